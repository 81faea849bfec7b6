"""The broker's epoch: a token that changes when the Celery broker (Redis)
loses its data, so re-runs whose tasks were lost with it can be sent again.

A Redis that restarts without persistence (``appendonly no``), is flushed or
fails over to a replica that had not received the writes comes back empty:
every task waiting in the ``rerun`` queue is gone, while the database still
says ``queued``. Nothing in Celery reports that. So each dispatch records the
epoch it was sent under (``Rerun.broker_epoch``): a random token kept in one
key of the broker's own database, created when missing (``SET NX``). Lose
the data and the key goes with it; the next reader creates a new token, and
:func:`clinical.rerun.dispatch.reruns_redispatch` sends again every ``queued``
re-run recorded under another one. A Redis that keeps its data (AOF or RDB)
keeps the key too, so nothing is sent twice. Were the key alone lost (an
eviction policy that evicts keys without a TTL), the re-runs would be sent a
second time: the task is idempotent and the first completion wins.

Only Redis brokers have an epoch; with another broker (RabbitMQ keeps
durable queues) it is ``""`` and only undispatched re-runs are sent again.
"""

from __future__ import annotations

import functools
import logging
import math
import uuid
from urllib.parse import urlsplit

import redis
from django.conf import settings
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily

logger = logging.getLogger(__name__)

EPOCH_KEY = "clinical:broker-epoch"


def broker_key(name: str) -> str:
    """``name`` under the broker's ``global_keyprefix``, the namespace of
    Celery's own keys (``CELERY_KEY_PREFIX``)."""
    return settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "") + name


def broker_redis(*, timeout_s: float) -> redis.Redis:
    """A Redis client on the Celery broker (``CELERY_BROKER_URL``) whose
    connects and reads give up after ``timeout_s`` seconds. One connection
    pool per process, URL and timeout, so a caller on the translation's path
    does not open a new connection each time."""
    return _client(settings.CELERY_BROKER_URL, timeout_s)


@functools.lru_cache(maxsize=8)
def _client(url: str, timeout_s: float) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


def broker_epoch() -> str | None:
    """The broker's current epoch, created if the broker has none.

    Returns:
        A 32-character hex token; ``""`` for a broker that is not Redis
        (no epoch); ``None`` when the broker cannot be reached within
        ``CELERY_BROKER_TIMEOUT_S`` (logged as a warning, no exception).
    """
    if urlsplit(settings.CELERY_BROKER_URL).scheme not in ("redis", "rediss"):
        return ""
    key = broker_key(EPOCH_KEY)
    try:
        with broker_redis(timeout_s=settings.CELERY_BROKER_TIMEOUT_S).pipeline(transaction=True) as pipe:
            pipe.set(key, uuid.uuid4().hex, nx=True)
            pipe.get(key)
            _, epoch = pipe.execute()
        return epoch.decode()
    except (redis.RedisError, OSError) as exc:
        logger.warning("broker epoch unreadable (%s)", type(exc).__name__)
        return None


def rerun_queue_keys() -> list[str]:
    """Redis keys of the Celery ``rerun`` queue: kombu's Redis transport
    keeps one list per priority step (``rerun``, ``rerun\\x06\\x163`` ...),
    under the broker's ``global_keyprefix``."""
    from kombu.transport.redis import PRIORITY_STEPS, Channel

    return [broker_key("rerun" if step == 0 else f"rerun{Channel.sep}{step}") for step in PRIORITY_STEPS]


def rerun_queue_length() -> float:
    """Tasks waiting in the ``rerun`` queue (NaN if Redis cannot be read)."""
    try:
        with broker_redis(timeout_s=1).pipeline(transaction=False) as pipe:
            for key in rerun_queue_keys():
                pipe.llen(key)
            return float(sum(pipe.execute()))
    except (redis.RedisError, OSError):
        return math.nan


class _RerunQueueCollector:
    """Reads the queue length at scrape time."""

    def describe(self):
        return []

    def collect(self):
        yield GaugeMetricFamily("clinical_rerun_queue_length",
                                "Tasks waiting in the Celery rerun queue (all replicas).",
                                value=rerun_queue_length())


#: ``clinical_rerun_queue_length`` on every process that dispatches re-runs.
REGISTRY.register(_RerunQueueCollector())
