"""Who and what may reach the service (the known risks), performed on the
real ``python -m clinical.serve``: a socket from another origin of the same
host, users who are not clinicians, and a client that never finishes its
request headers."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import psycopg
import pytest
from django.contrib.auth.models import Group
from django.db import connection
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from clinical.models import Translation
from tests.conftest import PASSWORD, in_thread
from tests.frames import receive_until

pytestmark = pytest.mark.django_db(transaction=True)


def ws_at(server, host: str) -> str:
    return f"ws://{host}:{server.port}/ws/translate/"


async def test_foreign_origin_socket_is_refused(shared_fake_server, clinician):
    """The probe: a page on http://localhost:1234 opened a socket to
    the server on localhost with the clinician's session cookie."""
    server = shared_fake_server
    session = await in_thread(server.login, clinician.username)
    cookie = {"Cookie": f"sessionid={session}"}
    for origin in ("http://localhost:1234", f"https://localhost:{server.port}", "http://localhost",
                   f"http://evil.localhost:{server.port}", "null"):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(ws_at(server, "localhost"), additional_headers={**cookie, "Origin": origin}):
                pass
        assert refused.value.response.status_code == 403, origin

    # The page's own origin works, by either name the server answers to.
    for host in ("localhost", "127.0.0.1"):
        async with connect(ws_at(server, host), additional_headers={
                **cookie, "Origin": f"http://{host}:{server.port}"}) as ws:
            await ws.send(json.dumps({"type": "translate", "text": "Mild left knee effusion."}))
            assert (await receive_until(ws, ("done", "error"), timeout=30))[-1]["type"] == "done"


def make_user(username: str, group: str | None, fields: dict):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username, password=PASSWORD, **fields)
    if group:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


@pytest.mark.parametrize("username, group, fields", [("no-role", None, {}), ("it-admin", "IT", {"is_staff": True})])
async def test_users_who_are_not_clinicians_cannot_translate(shared_fake_server, username, group, fields):
    server = shared_fake_server
    await in_thread(make_user, username, group, fields)
    session = await in_thread(server.login, username)
    cookies = {"sessionid": session}

    for path in ("/", "/translations/"):
        page = await in_thread(lambda p=path: httpx.get(server.base_url + p, cookies=cookies, timeout=30))
        assert page.status_code == 403, path
        assert "Clinician group" in page.text

    async with connect(server.ws_url + "/ws/translate/", additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as ws:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
        with pytest.raises(ConnectionClosed) as closed:
            await ws.send(json.dumps({"type": "translate", "text": "Mild left knee effusion."}))
            await asyncio.wait_for(ws.recv(), 10)
    assert (frame["type"], frame["code"]) == ("error", "forbidden") and "Clinician group" in frame["message"]
    assert closed.value.rcvd.code == 4403
    assert await in_thread(Translation.objects.count) == 0


def seconds_until_closed(port: int, sent: bytes, limit_s: float) -> float:
    """Send ``sent`` and wait, up to ``limit_s``, for the server to close
    the connection; the seconds it took."""
    with socket.create_connection(("127.0.0.1", port), timeout=limit_s) as raw:
        started = time.monotonic()
        raw.sendall(sent)
        try:
            while raw.recv(4096):
                pass
        except TimeoutError:
            pytest.fail(f"the connection was still open after {limit_s} s")
        except ConnectionResetError:
            pass
        return time.monotonic() - started


async def test_a_slow_header_connection_is_closed_within_the_bound(daphne_server, clinician):
    """The probe: a partial request line, then nothing (without the bound
    it is held for 75 s: Twisted's 60 s idle timeout plus 15 s to abort)."""
    server = daphne_server(INFERENCE_ENGINE="fake", HTTP_HEADER_TIMEOUT_S="3")
    for sent in (b"GET /accounts/login/ HTT", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1", b""):
        took = await in_thread(seconds_until_closed, server.port, sent, 15)
        assert 2.5 <= took <= 6, (sent, took)

    # What the bound must not cut: a WebSocket idle for longer than it.
    session = await in_thread(server.login, clinician.username)
    async with connect(server.ws_url + "/ws/translate/", additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as ws:
        await asyncio.sleep(5)
        await ws.send(json.dumps({"type": "translate", "text": "Mild left knee effusion."}))
        assert (await receive_until(ws, ("done", "error"), timeout=30))[-1]["type"] == "done"


def test_the_default_header_bound_is_well_under_twisteds_idle_timeout(settings):
    assert 0 < settings.HTTP_HEADER_TIMEOUT_S <= 30


def hold_table(table: str, seconds: float, held: threading.Event) -> None:
    """Hold an exclusive lock on ``table`` of the test database for
    ``seconds`` from a connection of its own (set ``held`` once it is held)."""
    db = connection.settings_dict
    with psycopg.connect(dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"] or None,
                         host=db["HOST"] or None, port=db["PORT"] or None) as conn:
        conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        held.set()
        time.sleep(seconds)
        conn.rollback()


async def test_a_websocket_handshake_slower_than_five_seconds_is_answered(daphne_server, clinician):
    """Daphne's ``Server`` drops a WebSocket whose handshake takes over 5 s
    without an HTTP response (seen with 150 sockets opening at once on a
    loaded 2-core machine). The consumer's user lookup is held here for 7 s
    by a lock on the session table: the socket must open once it is free."""
    if connection.vendor != "postgresql":
        pytest.skip("the lock is PostgreSQL's")
    server = daphne_server(INFERENCE_ENGINE="fake")
    session = await in_thread(server.login, clinician.username)
    held = threading.Event()
    holder = threading.Thread(target=hold_table, args=("django_session", 7, held))
    holder.start()
    assert await in_thread(held.wait, 10)

    started = time.monotonic()
    async with connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as ws:
        took = time.monotonic() - started
        await ws.send(json.dumps({"type": "translate", "text": "Mild left knee effusion."}))
        assert (await receive_until(ws, ("done", "error"), timeout=30))[-1]["type"] == "done"
    await in_thread(holder.join)
    assert took >= 6
