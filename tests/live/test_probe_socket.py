"""A WebSocket frame larger than the server reads at all gets the same
``frame_too_large`` error frame as a smaller oversized one, then a close
with 1009 (message too big), not a dropped connection (1006)."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import in_thread


def _translate_frame(size: int) -> str:
    head = '{"type": "translate", "text": "'
    return head + "x" * (size - len(head) - 2) + '"}'


@pytest.mark.parametrize("size", [settings.WEBSOCKET_MAX_MESSAGE_BYTES + 1, 3 * settings.WEBSOCKET_MAX_MESSAGE_BYTES])
async def test_a_frame_over_the_message_limit_gets_an_error_frame_and_1009(shared_fake_server, clinician, size):
    """The attack: frames over about 1 MB closed the socket with 1006 and no
    error frame."""
    server = shared_fake_server
    session = await in_thread(server.login, clinician.username)
    async with connect(server.ws_url + "/ws/translate/", open_timeout=30, max_size=None, additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        await socket.send(_translate_frame(size))
        frame = json.loads(await socket.recv())
        assert frame["type"] == "error" and frame["code"] == "frame_too_large", frame
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009, closed.value


async def test_a_frame_under_the_message_limit_keeps_the_socket_open(shared_fake_server, clinician):
    server = shared_fake_server
    session = await in_thread(server.login, clinician.username)
    async with connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        await socket.send(_translate_frame(settings.MAX_FRAME_BYTES + 1))
        frame = json.loads(await socket.recv())
        assert frame["type"] == "error" and frame["code"] == "frame_too_large"
        await socket.send(json.dumps({"type": "translate", "text": "Left knee pain."}))
        while (frame := json.loads(await socket.recv()))["type"] not in ("done", "error"):
            pass
        assert frame["type"] == "done"
