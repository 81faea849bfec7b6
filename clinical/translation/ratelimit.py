"""Rate limits on sockets: translations per user, frames per socket.

API clients have their own per-client limit (DRF throttle in
:mod:`clinical.api.auth`); this one covers clinicians' sockets. Counts live
in Redis (the `limits` library's moving window, one atomic Lua call per hit),
so the limit holds across sockets, tabs and web replicas. The frame rate of
one socket (``SOCKET_FRAME_RATE``, default ``"20/second"``) is counted in
this process's memory: a socket lives on one replica.

Setting: ``TRANSLATE_RATE_PER_USER`` (default ``"30/minute"``, the
`limits` rate string notation), e.g. ``"10/minute;100/hour"``. OWASP ASVS 5.0
V2.4 (anti-automation) asks for such limits; the figure is this project's
choice: a clinician at the bedside rarely starts more than one translation
every few seconds.
"""

from __future__ import annotations

import math
import time
from functools import lru_cache

from django.conf import settings
from limits import parse_many
from limits.storage import MemoryStorage, storage_from_string
from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter


@lru_cache(maxsize=4)
def _redis_limiter(redis_url: str, prefix: str) -> MovingWindowRateLimiter:
    return MovingWindowRateLimiter(storage_from_string(redis_url, key_prefix=f"{prefix}:limits"))


def translate_retry_after_s(*, user_id: int) -> int | None:
    """Count one translation for ``user_id``; ``None`` when it is allowed,
    else the seconds (≥ 1) until the user may start the next one. A refused
    attempt is not counted against the rate that refused it (with several
    rates, it still counts against the others).

    Raises:
        limits.errors.StorageError / redis.RedisError: Redis unreachable
            (callers treat it as "service unavailable").
    """
    limiter = _redis_limiter(settings.REDIS_URL, settings.CACHE_PREFIX)
    retry_after: int | None = None
    for item in parse_many(settings.TRANSLATE_RATE_PER_USER):
        # hit() is atomic in Redis and does not count a refused attempt.
        if not limiter.hit(item, "translate-user", str(user_id)):
            reset_at, _ = limiter.get_window_stats(item, "translate-user", str(user_id))
            retry_after = max(retry_after or 1, math.ceil(reset_at - time.time()))
    return retry_after


_frames = FixedWindowRateLimiter(MemoryStorage())


def socket_frame_allowed(*, channel_name: str) -> bool:
    """Count one received frame of the socket ``channel_name``; False once
    the socket exceeds ``SOCKET_FRAME_RATE`` in the current window (the
    frame is then refused unread)."""
    return all(_frames.hit(item, "socket-frames", channel_name)
               for item in parse_many(settings.SOCKET_FRAME_RATE))
