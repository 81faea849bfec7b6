"""WebSocket frame helpers shared by the live-stack tests."""

from __future__ import annotations

import asyncio
import json


async def receive_until(socket, types: tuple[str, ...], timeout: float) -> list[dict]:
    """Frames received on ``socket`` up to and including the first whose
    ``type`` is in ``types``.

    Raises:
        TimeoutError: none arrived within ``timeout`` seconds.
    """
    frames = []
    async with asyncio.timeout(timeout):
        while True:
            frames.append(json.loads(await socket.recv()))
            if frames[-1]["type"] in types:
                return frames
