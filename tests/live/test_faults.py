"""Faults of the backing services, over real connections: Redis restarting
under a running Daphne, and the database refusing connections at request
time. Nothing may be half-written and the service must recover by itself."""

from __future__ import annotations

import asyncio
import json

import httpx
import psycopg
import pytest
from django.conf import settings
from django.db import connection
from websockets.asyncio.client import connect

from clinical.models import APIClient, AuditEvent, Translation
from tests.conftest import in_thread
from tests.data import laymaker_sentences

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


async def open_socket(server, session: str):
    return await connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
        "Cookie": f"sessionid={session}", "Origin": server.base_url})


async def translate(socket, text: str) -> list[dict]:
    await socket.send(json.dumps({"type": "translate", "text": text}))
    frames = []
    async for message in socket:
        frames.append(json.loads(message))
        if frames[-1]["type"] in ("done", "error", "cancelled"):
            return frames
    raise AssertionError(f"socket closed after {frames}")


def final_audit_counts() -> dict[str, int]:
    """Final translation audit events per request id."""
    counts: dict[str, int] = {}
    for request_id in AuditEvent.objects.filter(
            event_type=AuditEvent.EventType.TRANSLATION).values_list("request_id", flat=True):
        counts[str(request_id)] = counts.get(str(request_id), 0) + 1
    return counts


async def test_the_stack_rides_out_a_redis_restart(daphne_server, clinician, private_redis):
    """Redis (channel layer, cache, broker, rate limits) is killed while a
    translation streams and started again empty: the stream ends cleanly,
    the open socket and new logins work afterwards, each request has one
    final row and audit event."""
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_TOKEN_DELAY_S="0.05",
                           REDIS_URL=private_redis.url)
    session = server.login(clinician.username)
    socket = await open_socket(server, session)
    before = await translate(socket, laymaker_sentences()[0])
    assert before[-1]["type"] == "done"

    await socket.send(json.dumps({"type": "translate", "text": " ".join(laymaker_sentences()[1:4])}))
    assert json.loads(await socket.recv())["type"] == "started"
    await asyncio.sleep(0.3)
    private_redis.kill()
    await asyncio.sleep(1)
    private_redis.start()
    during = []
    async for message in socket:
        during.append(json.loads(message))
        if during[-1]["type"] in ("done", "error", "cancelled"):
            break
    assert during[-1]["type"] in ("done", "error"), during[-1]

    after = await translate(socket, laymaker_sentences()[5])
    assert after[-1]["type"] == "done", after[-1]
    await socket.close()
    new_socket = await open_socket(server, await in_thread(server.login, clinician.username))
    assert (await translate(new_socket, laymaker_sentences()[6]))[-1]["type"] == "done"
    await new_socket.close()

    statuses = await in_thread(lambda: sorted(Translation.objects.values_list("status", flat=True)))
    assert len(statuses) == 4 and "pending" not in statuses and "streaming" not in statuses
    audits = await in_thread(final_audit_counts)
    ids = await in_thread(lambda: [str(i) for i in Translation.objects.values_list("request_id", flat=True)])
    assert all(audits.get(i) == 1 for i in ids), audits
    assert server.process.poll() is None


@pytest.fixture
def database_switch():
    """Refuses, then allows again, new connections to the test database
    (PostgreSQL's ``ALLOW CONNECTIONS``), ending the server's open ones."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (the CI's database)")
    db = settings.DATABASES["default"]
    admin = psycopg.connect(host=db["HOST"] or "localhost", port=db["PORT"] or 5432, user=db["USER"],
                            password=db.get("PASSWORD") or None, dbname="postgres", autocommit=True)
    own_pid = connection.cursor().connection.info.backend_pid

    def refuse() -> None:
        admin.execute(f'ALTER DATABASE "{db["NAME"]}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = %s AND pid <> %s", (db["NAME"], own_pid))

    def allow() -> None:
        admin.execute(f'ALTER DATABASE "{db["NAME"]}" ALLOW_CONNECTIONS true')

    yield refuse, allow
    allow()
    admin.close()


async def test_an_unreachable_database_gets_a_clear_error_and_writes_nothing(
        daphne_server, clinician, database_switch):
    refuse, allow = database_switch
    server = daphne_server(INFERENCE_ENGINE="fake")
    session = server.login(clinician.username)
    _, key = await in_thread(lambda: APIClient.objects.create_key(name="ehr"))
    socket = await open_socket(server, session)
    assert (await translate(socket, laymaker_sentences()[0]))[-1]["type"] == "done"

    refuse()
    refused = await translate(socket, laymaker_sentences()[1])
    assert refused == [refused[-1]] and refused[-1]["code"] == "unavailable"
    assert refused[-1]["retry_after_s"] >= 1 and "nothing was recorded" in refused[-1]["message"]
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as api:
        response = await api.post("/api/v1/translations/", json={"text": laymaker_sentences()[1]},
                                  headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) >= 1 and "database" in response.json()["detail"]

    allow()
    assert (await translate(socket, laymaker_sentences()[2]))[-1]["type"] == "done"
    await socket.close()
    assert await in_thread(lambda: Translation.objects.count()) == 2
    assert await in_thread(lambda: AuditEvent.objects.filter(event_type="translation").count()) == 2
    assert laymaker_sentences()[1] not in server.logs()
