"""Graceful drain of a web replica (SIGTERM from systemd, Docker or a
person): the process state and the steps, kept out of the consumer.

Sequence (run by :func:`drain_run`, started by ``clinical.serve`` on
SIGTERM or SIGINT):

1. ``draining`` becomes true: ``/readyz`` answers 503, the replica stops
   listening (the load balancer's next connection attempt is refused and
   nginx passes it to another replica), new translations on sockets that
   are already open are refused with ``{"type": "error", "code":
   "draining", "retry_after_s": 1}`` and idle sockets are closed with code
   1012 ("Service Restart", RFC 6455 §7.4.1 as registered by IANA), so that
   the page reconnects through the load balancer to another replica.
2. Streams in flight run to their end for up to ``DRAIN_TIMEOUT_S``
   (default 25 s, under systemd's and Docker's default stop timeouts of
   90 s and 10 s+; set ``TimeoutStopSec``/``stop_grace_period`` above it);
   each socket is closed with 1012 once its stream has ended.
3. Streams still running then are cancelled: ``translation_generate``
   records them as ``cancelled`` with their audit record; their sockets
   get an ``error`` frame with code ``server_restart`` and close 1012.

No request is left without its final audit status: every translation is
finalised by its own stream (steps 2 and 3), and if the process dies
before (SIGKILL, power loss) the orphan sweep of another replica
finalises it as ``error``/``ReplicaLost`` once its lease expires
(:mod:`clinical.runtime.replica`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref

from django.conf import settings

from clinical.runtime import replica

logger = logging.getLogger(__name__)

#: WebSocket close code "Service Restart" (IANA WebSocket Close Code registry).
CLOSE_SERVICE_RESTART = 1012
#: Seconds a refused client is asked to wait before it retries.
DRAIN_RETRY_AFTER_S = 1

_draining = False
_drain_started: float | None = None
_sockets: "weakref.WeakSet" = weakref.WeakSet()


def is_draining() -> bool:
    """True once this replica has begun to shut down."""
    return _draining


def drain_begin() -> None:
    """Enter the draining state (idempotent)."""
    global _draining, _drain_started
    if not _draining:
        _draining, _drain_started = True, time.monotonic()
        logger.warning("draining: refusing new translations")


def drain_reset() -> None:
    """Leave the draining state (tests only)."""
    global _draining, _drain_started
    _draining, _drain_started = False, None


def socket_register(consumer) -> None:
    """Remember an accepted socket so that a drain can close it."""
    _sockets.add(consumer)


def socket_unregister(consumer) -> None:
    _sockets.discard(consumer)


def _socket_busy(consumer) -> bool:
    """True while a socket's stream (and the frames after it) is running."""
    task = getattr(consumer, "task", None)
    return task is not None and not task.done()


async def _close(consumer, error: tuple[str, str] | None = None) -> None:
    """Close a socket with 1012, after the consumer's ``error`` frame
    ``(code, message)`` when given (the consumer builds its frames)."""
    _sockets.discard(consumer)
    try:
        if error is not None:
            await consumer.send_error(*error, retry_after_s=DRAIN_RETRY_AFTER_S)
        await consumer.close(code=CLOSE_SERVICE_RESTART)
    except Exception:  # noqa: BLE001 - the client already left
        pass


async def drain_run(*, timeout_s: float | None = None, poll_s: float = 0.1) -> dict:
    """Drain this replica: see the module docstring. Returns counts for the
    log: ``{"finished": n, "cancelled": n, "sockets_closed": n,
    "seconds": s}``. Call in the server's event loop after
    :func:`drain_begin`.
    """
    drain_begin()
    timeout_s = settings.DRAIN_TIMEOUT_S if timeout_s is None else timeout_s
    started = time.monotonic()
    in_flight_at_start = replica.inflight_count()
    closed = 0
    while True:
        for consumer in list(_sockets):
            if not _socket_busy(consumer):
                await _close(consumer)
                closed += 1
        if replica.inflight_count() == 0 and not any(_socket_busy(c) for c in list(_sockets)):
            break
        if time.monotonic() - started >= timeout_s:
            break
        await asyncio.sleep(poll_s)
    cancelled = await replica.inflight_cancel()
    for consumer in list(_sockets):
        task = getattr(consumer, "task", None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await _close(consumer, (
            "server_restart", "This server is restarting; the translation was stopped and recorded. "
            "Please try again: you will be connected to another server."))
        closed += 1
    seconds = round(time.monotonic() - started, 2)
    result = {"finished": max(0, in_flight_at_start - cancelled), "cancelled": cancelled,
              "sockets_closed": closed, "seconds": seconds}
    logger.warning("drained in %.2f s: %s", seconds, result)
    return result
