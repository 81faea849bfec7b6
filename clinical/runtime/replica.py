"""This web replica's identity, its in-flight translations and their Redis
leases.

Leases: while a translation streams, Redis holds
``<CACHE_PREFIX>:lease:<request id>`` = ``REPLICA_ID`` with a time to live
of ``LEASE_TTL_S`` (default 15 s), renewed every ``LEASE_REFRESH_S``
(default 5 s) by one task per event loop for all of the process's
translations, and deleted once the translation's final state (and its audit
record) is committed. A replica that is killed (SIGKILL, OOM, power loss)
stops renewing; its leases expire, and the orphan sweep
(:mod:`clinical.ops.sweeps`) finalises what it left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import redis
import redis.asyncio as aioredis
from django.conf import settings

logger = logging.getLogger(__name__)

def replica_id() -> str:
    """``REPLICA_ID`` (default ``<host>-<pid>``, set in settings)."""
    return settings.REPLICA_ID


def lease_key(request_id) -> str:
    return f"{settings.CACHE_PREFIX}:lease:{request_id}"


@dataclass
class InFlight:
    """A translation this process is streaming."""

    translation_id: int
    task: asyncio.Task | None


_inflight: dict[str, InFlight] = {}
_clients: dict[asyncio.AbstractEventLoop, aioredis.Redis] = {}
_refreshers: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}


def inflight_count() -> int:
    """Translations this process is streaming now."""
    return len(_inflight)


def redis_client() -> aioredis.Redis:
    """The asyncio Redis client of the running event loop (one per loop,
    made on first use; 2 s connect and read timeouts), for the replica's
    leases and the per-user caps (:mod:`clinical.translation.concurrency`)."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = aioredis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    return client


async def _leases_set(request_ids: list[str]) -> None:
    """Write (or renew) the leases; failures are logged, never raised: a
    stream goes on when Redis blinks (its lease is renewed on the next
    round, see the module docstring for the race this leaves)."""
    if not request_ids:
        return
    try:
        async with redis_client().pipeline(transaction=False) as pipe:
            for request_id in request_ids:
                pipe.set(lease_key(request_id), settings.REPLICA_ID, ex=settings.LEASE_TTL_S)
            await pipe.execute()
    except (redis.RedisError, OSError) as exc:
        logger.warning("lease renewal failed for %d translations: %s", len(request_ids), type(exc).__name__)


async def _refresh_forever() -> None:
    while True:
        await asyncio.sleep(settings.LEASE_REFRESH_S)
        await _leases_set(list(_inflight))


def _refresher_ensure() -> None:
    loop = asyncio.get_running_loop()
    task = _refreshers.get(loop)
    if task is None or task.done():
        _refreshers[loop] = loop.create_task(_refresh_forever(), name="lease-refresher")


_lease_writes: set[asyncio.Task] = set()


def _in_background(coro) -> None:
    """Run a lease write beside the stream, never inside it: a cancelled
    stream (client gone, drain) must not be held up by Redis, and redis-py
    can turn a cancellation during a command into a connection error."""
    task = asyncio.get_running_loop().create_task(coro)
    _lease_writes.add(task)
    task.add_done_callback(_lease_writes.discard)


async def _lease_release(request_id: str) -> None:
    try:
        await redis_client().delete(lease_key(request_id))
    except (redis.RedisError, OSError) as exc:
        # The lease expires by itself; the row is final already.
        logger.warning("lease release failed: %s", type(exc).__name__)


@contextlib.asynccontextmanager
async def translation_lease(translation):
    """Hold a lease on ``translation`` while the block runs (the block must
    finalise it). Registers the current task, so that a drain can cancel
    it (:func:`inflight_cancel`). The lease is written and deleted by
    background tasks, so the block starts at once; the sweep's grace
    (``SWEEP_GRACE_S`` >= ``LEASE_TTL_S``) covers the moment between."""
    request_id = str(translation.request_id)
    _inflight[request_id] = InFlight(translation.pk, asyncio.current_task())
    _refresher_ensure()
    _in_background(_leases_set([request_id]))
    try:
        yield
    finally:
        _inflight.pop(request_id, None)
        _in_background(_lease_release(request_id))


async def inflight_cancel(*, timeout_s: float = 10) -> int:
    """Cancel every stream still running here and wait (at most
    ``timeout_s``) for each to record its final state. Returns the number
    cancelled."""
    tasks = [entry.task for entry in _inflight.values()
             if entry.task is not None and not entry.task.done() and entry.task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout_s)
    return len(tasks)
