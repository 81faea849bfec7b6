"""One clinician must not hold the whole engine: the attack on real
``python -m clinical.serve`` processes sharing the real Redis. Without the
per-user caps, 9 sockets of one clinician start 8 translations and the next
clinician gets "busy", and 150 sockets of one user are accepted."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from clinical.models import APIClient, AuditEvent, Translation
from tests.conftest import in_thread
from tests.frames import receive_until

pytestmark = pytest.mark.django_db(transaction=True)

#: A slow fake engine (60 words at 0.2 s: 12 s a translation) and short
#: place leases, so a killed replica's places lapse within seconds. With a
#: 3 s lease a replica starved of the CPU for 2 s on a loaded 2-core machine
#: lost a running translation's place (CI, stop 31); 8 s leaves 7 s of slack.
LEASE_TTL_S = 8
SLOW = {"INFERENCE_ENGINE": "fake", "FAKE_ENGINE_TOKEN_DELAY_S": "0.2", "LEASE_TTL_S": str(LEASE_TTL_S),
        "LEASE_REFRESH_S": "1"}
LONG_TEXT = " ".join(["word"] * 60)
SHORT_TEXT = "Mild left knee effusion."


async def open_socket(server, session: str):
    return await connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
        "Cookie": f"sessionid={session}", "Origin": server.base_url})


async def probe(socket) -> str:
    """The code of the answer to a harmless frame: ``not_found`` on an
    accepted socket, ``too_many_sockets`` on a refused one (which is then
    closed with 4429)."""
    try:
        await socket.send(json.dumps({"type": "watch", "id": "00000000-0000-0000-0000-000000000000"}))
    except ConnectionClosed:
        pass
    frame = json.loads(await asyncio.wait_for(socket.recv(), 10))
    assert frame["type"] == "error", frame
    if frame["code"] == "too_many_sockets":
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), 10)
        assert closed.value.rcvd.code == 4429
        assert "close one" in frame["message"].lower()
    return frame["code"]


async def first_answer(socket, text: str) -> dict:
    await socket.send(json.dumps({"type": "translate", "text": text}))
    return json.loads(await asyncio.wait_for(socket.recv(), 30))


def audits_of(user) -> list[tuple[str, str]]:
    return list(AuditEvent.objects.filter(actor_user=user, event_type="translation")
                .values_list("outcome", "error_class"))


def each_translation_has_one_audit_row() -> None:
    deadline = time.monotonic() + 20
    while Translation.objects.filter(status="pending").exists():
        assert time.monotonic() < deadline, "translations left pending"
        time.sleep(0.2)
    for row in Translation.objects.all():
        assert AuditEvent.objects.filter(request_id=row.request_id, event_type="translation").count() == 1, row


async def test_one_clinician_cannot_hold_the_engine_with_many_sockets(daphne_server, clinician, other_clinician):
    server = daphne_server(**SLOW, ENGINE_MAX_QUEUE="8")  # defaults: 6 sockets, 2 translations a user
    session = await in_thread(server.login, clinician.username)

    sockets = [await open_socket(server, session) for _ in range(9)]
    codes = [await probe(socket) for socket in sockets]
    assert codes == ["not_found"] * 6 + ["too_many_sockets"] * 3
    sockets = sockets[:6]

    answers = await asyncio.gather(*(first_answer(socket, LONG_TEXT) for socket in sockets))
    started = [s for s, a in zip(sockets, answers) if a["type"] == "started"]
    refused = [a for a in answers if a["type"] == "error"]
    assert len(started) == 2 and len(refused) == 4, answers
    assert {a["code"] for a in refused} == {"too_many_translations"}
    assert all(a["retry_after_s"] >= 1 and "running" in a["message"] for a in refused)

    # Another clinician still gets the engine at once.
    colleague = await in_thread(server.login, other_clinician.username)
    async with await open_socket(server, colleague) as socket:
        await socket.send(json.dumps({"type": "translate", "text": SHORT_TEXT}))
        frames = await receive_until(socket, ("done", "error"), timeout=30)
    assert frames[0]["type"] == "started" and frames[-1]["type"] == "done", frames

    # Cancelling one gives its place back: the next one starts.
    await started[0].send(json.dumps({"type": "cancel"}))
    await receive_until(started[0], ("cancelled",), timeout=10)
    free = next(s for s in sockets if s not in started)
    assert (await first_answer(free, SHORT_TEXT))["type"] == "started"

    # Closed sockets give their places back (a new tab connects).
    for socket in sockets:
        await socket.close()
    await asyncio.sleep(0.5)
    again = [await open_socket(server, session) for _ in range(6)]
    assert [await probe(socket) for socket in again] == ["not_found"] * 6
    for socket in again:
        await socket.close()

    rejected = [e for e in await in_thread(audits_of, clinician) if e[0] == "rejected"]
    assert rejected == [("rejected", "TooManyTranslations")] * 4
    await in_thread(each_translation_has_one_audit_row)


async def test_a_hundred_and_fifty_sockets_of_one_user_are_not_accepted(daphne_server, clinician):
    """All 150 stay open at once; they are opened 25 at a time. A burst of
    150 simultaneous handshakes to a fresh server on this 2-core host got
    one connection closed without an HTTP response in 2 of 3 whole-suite
    runs (2026-11-28; never alone, 0 of 9): that burst is not what the cap
    is about."""
    server = daphne_server(INFERENCE_ENGINE="fake")
    session = await in_thread(server.login, clinician.username)
    opening = asyncio.Semaphore(25)

    async def opened():
        async with opening:
            return await open_socket(server, session)

    sockets = await asyncio.gather(*(opened() for _ in range(150)))
    codes = await asyncio.gather(*(probe(socket) for socket in sockets))
    assert codes.count("not_found") == 6 and codes.count("too_many_sockets") == 144
    for socket in sockets:
        await socket.close()


async def test_the_caps_hold_across_replicas_and_a_killed_replica_gives_its_places_back(
        daphne_server, clinician):
    one, two = daphne_server(**SLOW), daphne_server(**SLOW)
    session = await in_thread(one.login, clinician.username)

    on_one = [await open_socket(one, session) for _ in range(3)]
    on_two = [await open_socket(two, session) for _ in range(4)]
    assert [await probe(s) for s in on_one + on_two] == ["not_found"] * 6 + ["too_many_sockets"]
    on_two = on_two[:3]

    assert (await first_answer(on_one[0], LONG_TEXT))["type"] == "started"
    assert (await first_answer(on_two[0], LONG_TEXT))["type"] == "started"
    third = await first_answer(on_one[1], LONG_TEXT)
    assert (third["type"], third.get("code")) == ("error", "too_many_translations")

    one.process.kill()  # SIGKILL: no disconnect, no clean-up; its places lapse after LEASE_TTL_S
    await asyncio.sleep(LEASE_TTL_S + 1.5)
    replacements = [await open_socket(two, session) for _ in range(3)]
    assert [await probe(s) for s in replacements] == ["not_found"] * 3
    assert (await first_answer(replacements[0], LONG_TEXT))["type"] == "started"
    for socket in on_two + replacements:
        await socket.close()


async def test_an_api_client_over_its_cap_gets_a_json_429_with_retry_after(daphne_server):
    # The product's lease time (15 s), not SLOW's short one: on a loaded
    # machine the detached stream was seen to start renewing its place more
    # than 3 s after the 202.
    server = daphne_server(**(SLOW | {"LEASE_TTL_S": "15", "LEASE_REFRESH_S": "5"}),
                           API_CLIENT_MAX_CONCURRENT_TRANSLATIONS="1")
    _, key = await in_thread(lambda: APIClient.objects.create_key(name="ehr-main"))
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=server.base_url + "/api", timeout=60) as api:
        first = await in_thread(lambda: api.post("/v1/translations/?wait=false", json={"text": LONG_TEXT},
                                                 headers=headers))
        assert first.status_code == 202
        over = await in_thread(lambda: api.post("/v1/translations/", json={"text": SHORT_TEXT}, headers=headers))
        assert over.status_code == 429, over.text
        assert over.headers["Content-Type"].startswith("application/json") and "running" in over.json()["detail"]
        assert int(over.headers["Retry-After"]) >= 1
        deadline = time.monotonic() + 30
        while (await in_thread(lambda: api.get(first.headers["Location"].removeprefix("/api"),
                                               headers=headers))).json()["status"] == "pending":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.5)
        after = await in_thread(lambda: api.post("/v1/translations/", json={"text": SHORT_TEXT}, headers=headers))
        assert after.status_code == 201, after.text

    events = await in_thread(lambda: list(AuditEvent.objects.filter(actor_client__isnull=False)
                                          .values_list("outcome", "error_class")))
    assert ("rejected", "TooManyTranslations") in events
    await in_thread(each_translation_has_one_audit_row)
