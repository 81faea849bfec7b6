"""WebSocket helpers shared by the tests: in-process sockets on the
consumer (:func:`open_socket`, :func:`frames_until`) and real sockets on a
running server (:func:`receive_until`, :func:`translate_over_socket`)."""

from __future__ import annotations

import asyncio
import json

from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from websockets.asyncio.client import connect

from clinical.web.consumers import TranslateConsumer


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


def logged_in_session(user):
    """A real database session for ``user``, as the login view makes."""
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session.create()
    return session


async def open_socket(user) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(TranslateConsumer.as_asgi(), "/ws/translate/")
    communicator.scope["user"] = user
    communicator.scope["session"] = await database_sync_to_async(logged_in_session)(user)
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def frames_until(communicator, *final_types: str, timeout: float = 10) -> list[dict]:
    frames = []
    while True:
        frame = await communicator.receive_json_from(timeout=timeout)
        frames.append(frame)
        if frame["type"] in final_types:
            return frames


async def translate_over_socket(server, session: str, text: str) -> list[dict]:
    frames = []
    async with connect(
        server.ws_url + "/ws/translate/",
        additional_headers={"Cookie": f"sessionid={session}", "Origin": server.base_url},
        open_timeout=30,
    ) as socket:
        await socket.send(json.dumps({"type": "translate", "text": text}))
        async for message in socket:
            frame = json.loads(message)
            frames.append(frame)
            if frame["type"] in ("done", "error", "cancelled"):
                break
    return frames
