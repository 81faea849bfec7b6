"""Per-user caps on open sockets and on translations running at once, so
that one clinician (or one API client) cannot hold the whole engine and
others keep a fair share.

Each holder (``user:<pk>`` or ``client:<pk>``) has one Redis sorted set per
kind (``<CACHE_PREFIX>:held:sockets:<holder>``,
``<CACHE_PREFIX>:held:translations:<holder>``): one member per socket
(its channel name) or translation (its request id), scored with the Redis
server's time (s) at which it lapses. Taking a place is one Lua script
(drop the lapsed members, count, add when under the cap), so the cap holds
across sockets, tabs, Daphne processes and replicas. The holder renews its
place every ``LEASE_REFRESH_S`` while it lives and removes it when it ends
(socket closed; translation's text final, cancelled or abandoned); a place
whose replica was killed lapses after ``LEASE_TTL_S`` (default 15 s).
A translation's place is taken at admission
(:func:`clinical.translation.admission.translation_accept`) and held while
its events are read (:func:`clinical.translation.stream.translation_events`).

Settings (0 = no cap): ``USER_MAX_SOCKETS`` (default 6),
``USER_MAX_CONCURRENT_TRANSLATIONS`` (default 2),
``API_CLIENT_MAX_CONCURRENT_TRANSLATIONS`` (default 4).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import redis
from django.conf import settings

from clinical.runtime.replica import redis_client

logger = logging.getLogger(__name__)

SOCKETS, TRANSLATIONS = "sockets", "translations"
#: Seconds a client refused for too many running translations is asked to
#: wait (a translation's text takes a few seconds to a minute on a CPU).
TRANSLATIONS_RETRY_AFTER_S = 5

# KEYS[1]: the holder's set. ARGV: member, cap, time to live (s).
# Returns 1 when the member holds a place (new or renewed), else 0.
_ACQUIRE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
    return 0
end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 1)
return 1
"""
# KEYS[1]: the holder's set. ARGV: member, time to live (s). Renews a place
# still held; one that lapsed is not taken again (the cap may be full).
_RENEW = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
if redis.call('ZADD', KEYS[1], 'XX', 'CH', t + tonumber(ARGV[2]), ARGV[1]) == 1 then
    redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) + 1)
end
return 1
"""


@dataclass(frozen=True)
class Place:
    """A place held in a holder's set (``key``) by ``member``."""

    key: str
    member: str


def holder_key(*, kind: str, user_id: int | None = None, api_client_id: int | None = None) -> str:
    """The Redis key of a user's or an API client's places of ``kind``."""
    holder = f"client:{api_client_id}" if api_client_id is not None else f"user:{user_id}"
    return f"{settings.CACHE_PREFIX}:held:{kind}:{holder}"


def translations_cap(*, api_client_id: int | None) -> int:
    """Translations a user or an API client may run at once (0 = no cap)."""
    return (settings.API_CLIENT_MAX_CONCURRENT_TRANSLATIONS if api_client_id is not None
            else settings.USER_MAX_CONCURRENT_TRANSLATIONS)


def translation_place_for(*, user_id: int | None, api_client_id: int | None, request_id) -> Place | None:
    """The place a translation with ``request_id`` of this user or API
    client takes (its request id in their set), ``None`` when uncapped or
    held by nobody (an anonymous request)."""
    if translations_cap(api_client_id=api_client_id) <= 0 or (user_id is None and api_client_id is None):
        return None
    return Place(holder_key(kind=TRANSLATIONS, user_id=user_id, api_client_id=api_client_id), str(request_id))


def translation_place(translation) -> Place | None:
    """The place a translation admitted by
    :func:`clinical.translation.admission.translation_accept` holds
    (:func:`translation_place_for` of its row)."""
    return translation_place_for(user_id=translation.user_id, api_client_id=translation.api_client_id,
                                 request_id=translation.request_id)


async def place_take(*, key: str, member: str, cap: int) -> Place | None:
    """Take a place for ``member`` in ``key`` if fewer than ``cap`` (> 0)
    are held; it lapses after ``LEASE_TTL_S`` s unless renewed
    (:class:`PlaceHolder`).

    Returns:
        The :class:`Place`, or ``None`` when the cap is reached.

    Raises:
        redis.RedisError / OSError: Redis unreachable.
    """
    taken = await redis_client().eval(_ACQUIRE, 1, key, member, cap, settings.LEASE_TTL_S)
    return Place(key, member) if int(taken) else None


async def place_give_back(place: Place) -> None:
    """Give ``place`` back now; a failure is logged (the place lapses by
    itself after ``LEASE_TTL_S``)."""
    try:
        await redis_client().zrem(place.key, place.member)
    except (redis.RedisError, OSError) as exc:
        logger.warning("place release failed: %s", type(exc).__name__)


async def _renew_forever(place: Place) -> None:
    while True:
        await asyncio.sleep(settings.LEASE_REFRESH_S)
        try:
            await redis_client().eval(_RENEW, 1, place.key, place.member, settings.LEASE_TTL_S)
        except (redis.RedisError, OSError) as exc:
            logger.warning("place renewal failed: %s", type(exc).__name__)


class PlaceHolder:
    """Keeps a place renewed from :meth:`start` until :meth:`stop` gives
    it back."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self._renewal: asyncio.Task | None = None
        self._released = False

    def start(self) -> None:
        self._renewal = asyncio.get_running_loop().create_task(_renew_forever(self.place))

    async def stop(self) -> None:
        """Stop renewing and give the place back (awaited)."""
        if self._renewal is not None:
            self._renewal.cancel()
        if not self._released:
            self._released = True
            await place_give_back(self.place)
