"""The re-run lane's health: each worker's engine, as it last reported.

The re-run worker is a process of its own (Celery, solo pool), so a web
replica cannot ask its engine directly. Each worker writes its engine's
state (:class:`inference.supervisor.SupervisorStatus` plus the model) to one
Redis key of the broker's database, ``clinical:rerun-lane:<worker>`` under
the broker's key prefix, every ``RERUN_LANE_HEARTBEAT_S`` seconds (10) from
a daemon thread and at once after each load or rebuild; the key expires
after three heartbeats, so a worker that died (or lost Redis) drops out of
the report instead of showing a stale "ready". The thread only reads: a
death of the engine while the worker is idle shows as ``dead`` within one
heartbeat, and the worker rebuilds it when its next job asks for the engine
(:func:`clinical.rerun.worker_engine.rerun_engine_get`).

Read by ``/readyz`` (``rerun_lane``), ``/metrics``
(``clinical_rerun_engine_up{worker}``, ``clinical_rerun_engine_rebuilds{worker}``,
``clinical_rerun_workers_reporting``) and the admin dashboard. No patient data.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable

import redis
from django.conf import settings
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily

from clinical.rerun.broker import broker_key, broker_redis

logger = logging.getLogger(__name__)

KEY_PREFIX = "clinical:rerun-lane:"
READ_TIMEOUT_S = 1.0


def worker_name() -> str:
    """This process's name in the report: Celery's node name when set by
    :func:`heartbeat_start`, else ``<host>-<pid>``."""
    return _name or f"{socket.gethostname()}-{os.getpid()}"


_name = ""
_stop = threading.Event()


def lane_report(report: dict) -> None:
    """Write one worker's report (a JSON object: ``state``, ``alive``,
    ``reason``, ``deaths``, ``rebuilds``, ``retry_in_s``, ``engine``,
    ``model``, ``precision``); a Redis failure is logged, never raised."""
    body = report | {"worker": worker_name(), "reported_at": time.time()}
    ttl = max(1, round(3 * settings.RERUN_LANE_HEARTBEAT_S))
    try:
        broker_redis(timeout_s=settings.CELERY_BROKER_TIMEOUT_S).set(
            broker_key(KEY_PREFIX + worker_name()), json.dumps(body), ex=ttl)
    except (redis.RedisError, OSError) as exc:
        logger.warning("re-run lane report not written (%s)", type(exc).__name__)


def lane_forget() -> None:
    """Remove this worker's report (clean shutdown)."""
    _stop.set()
    try:
        broker_redis(timeout_s=settings.CELERY_BROKER_TIMEOUT_S).delete(broker_key(KEY_PREFIX + worker_name()))
    except (redis.RedisError, OSError):
        pass


def heartbeat_start(name: str, report: Callable[[], dict]) -> threading.Thread:
    """Report ``report()`` now and every ``RERUN_LANE_HEARTBEAT_S`` seconds
    from a daemon thread, under the worker name ``name``."""
    global _name
    _name = name
    _stop.clear()

    def beat() -> None:
        while True:
            try:
                lane_report(report())
            except Exception:  # noqa: BLE001 - the heartbeat must outlive one bad round
                logger.exception("re-run lane heartbeat failed")
            if _stop.wait(settings.RERUN_LANE_HEARTBEAT_S):
                return

    thread = threading.Thread(target=beat, name="rerun-lane-heartbeat", daemon=True)
    thread.start()
    return thread


def lane_workers() -> list[dict] | None:
    """Every worker's last report, by worker name; ``None`` when Redis
    cannot be read within a second."""
    try:
        client = broker_redis(timeout_s=READ_TIMEOUT_S)
        keys = sorted(client.scan_iter(match=broker_key(KEY_PREFIX) + "*", count=100))
        values = client.mget(keys) if keys else []
    except (redis.RedisError, OSError):
        return None
    workers = []
    for value in values:
        try:
            workers.append(json.loads(value))
        except (TypeError, ValueError):
            continue
    return sorted(workers, key=lambda w: str(w.get("worker", "")))


def lane_summary() -> dict:
    """``{"state", "workers": [...]}``: ``ok`` (every reporting worker's
    engine serves), ``degraded`` (some do), ``down`` (none does: re-runs
    wait), ``no_workers`` (none reported within three heartbeats) or
    ``unknown`` (Redis unreadable)."""
    workers = lane_workers()
    if workers is None:
        return {"state": "unknown", "workers": []}
    alive = sum(1 for w in workers if w.get("alive"))
    if not workers:
        state = "no_workers"
    elif alive == len(workers):
        state = "ok"
    else:
        state = "degraded" if alive else "down"
    return {"state": state, "workers": workers}


class _LaneCollector:
    """``clinical_rerun_*`` engine gauges, read from Redis at scrape time."""

    def describe(self):
        return []

    def collect(self):
        workers = lane_workers() or []
        up = GaugeMetricFamily("clinical_rerun_engine_up",
                               "1 while the re-run worker's engine serves (as last reported).", labels=["worker"])
        rebuilds = GaugeMetricFamily("clinical_rerun_engine_rebuilds",
                                     "Dead engines the re-run worker rebuilt since it started.", labels=["worker"])
        for worker in workers:
            name = str(worker.get("worker", ""))
            up.add_metric([name], 1.0 if worker.get("alive") else 0.0)
            rebuilds.add_metric([name], float(worker.get("rebuilds") or 0))
        yield up
        yield rebuilds
        yield GaugeMetricFamily("clinical_rerun_workers_reporting",
                                "Re-run workers whose report has not expired.", value=len(workers))


REGISTRY.register(_LaneCollector())
