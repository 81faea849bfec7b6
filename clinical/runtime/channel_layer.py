"""The Redis channel layer, made to outlive a Redis restart.

channels_redis lets a connection error escape from ``receive()``, which ends
every consumer's dispatch loop and closes its socket with 1011 (reported as
django/channels_redis#20). Here ``receive()`` waits and tries again instead,
with exponential back-off from 0.1 s up to 5 s, so open sockets survive a
Redis restart or fail-over. channels_redis has already cleaned its receive
lock and buffer when the error reaches us, so retrying is safe.

Group memberships live in Redis: a Redis that restarts *empty* forgets them
(re-run results then reach the page when it asks again with a ``watch``
frame); run Redis with persistence (``appendonly yes``) in production.
"""

from __future__ import annotations

import asyncio
import logging

from channels_redis.core import RedisChannelLayer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)

#: Back-off between attempts, seconds.
RETRY_FIRST_S, RETRY_MAX_S = 0.1, 5.0


class ResilientRedisChannelLayer(RedisChannelLayer):
    """:class:`channels_redis.core.RedisChannelLayer` whose ``receive()``
    retries on Redis connection and timeout errors (never gives up: the
    consumer's own disconnect cancels it)."""

    async def receive(self, channel: str) -> dict:
        delay = RETRY_FIRST_S
        while True:
            try:
                return await super().receive(channel)
            except (RedisConnectionError, RedisTimeoutError) as exc:
                logger.warning("channel layer unreachable (%s); retrying in %.1f s", type(exc).__name__, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
