"""The REST API, its server-sent events and FHIR name a dead engine in
their own vocabulary, in-process: code ``engine_restarting`` with a 503 and
``Retry-After`` (JSON), an SSE ``error`` event with that code, a FHIR
``OperationOutcome`` with issue code ``transient``; the socket's frame says
the same (tests/web/test_engine_health.py). The fake engine dies as vLLM's
does (``health()`` says dead, streams raise ``EngineDead``); every request
still ends in exactly one audit record. tests/live/test_engine_death.py does
it through a real server whose vLLM engine core is SIGKILLed."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import AsyncClient

from clinical.models import APIClient, AuditEvent, Translation
from clinical.translation import engine as process_engine
from inference.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = ("Mild degenerative joint disease of the left knee without effusion and a small "
        "Baker cyst behind the right knee with no sign of deep vein thrombosis")
TRANSLATE = "/api/v1/translations/"
FHIR = "/api/fhir/Condition/$plain-language"


@pytest.fixture
def dying_engine(settings):
    """A slow fake engine as the process engine. A dead one is rebuilt
    (INFERENCE_ENGINE=fake) only after 30 s, so requests in the test meet
    it dead; the watchdog looks every 50 ms."""
    settings.INFERENCE_ENGINE = "fake"
    settings.ENGINE_REBUILD_BACKOFF_S = 30
    settings.ENGINE_HEALTH_INTERVAL_S = 0.05
    engine = FakeEngine(token_delay_s=0.05)
    process_engine.engine_set(engine)
    yield engine
    process_engine.engine_set(None)


@pytest.fixture
def api_key() -> str:
    _, key = APIClient.objects.create_key(name="ehr-engine-death")
    return key


async def post(key: str, path: str, body: str, *, content_type: str = "application/json",
               accept: str = "application/json"):
    """POST ``body`` as API client ``key`` (Django's AsyncClient takes
    headers per request)."""
    return await AsyncClient().post(path, body, content_type=content_type,
                                    headers={"Authorization": f"Bearer {key}", "Accept": accept})


async def kill_after_first_token(engine: FakeEngine) -> None:
    """Kill ``engine`` once a request has begun streaming (mid-translation)."""
    async with asyncio.timeout(10):  # the load's warm-up request does not count
        while not [r for r in engine.admitted if not r.startswith("warmup-")]:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.08)  # a token or two
    engine.kill("EngineCore exited with code -9")


def only_translation_and_its_audit() -> tuple[Translation, list[tuple[str, str]]]:
    (row,) = Translation.objects.all()
    events = AuditEvent.objects.filter(event_type="translation", request_id=row.request_id)
    return row, [(e.outcome, e.error_class) for e in events]


async def recorded():
    try:
        return await sync_to_async(only_translation_and_its_audit)()
    finally:
        await sync_to_async(lambda: connection.close())()


async def test_a_synchronous_post_whose_engine_dies_gets_503_engine_restarting_and_one_audit_record(
        dying_engine, api_key):
    killer = asyncio.create_task(kill_after_first_token(dying_engine))
    response = await post(api_key, TRANSLATE, json.dumps({"text": NOTE}))
    await killer
    body = response.json()
    assert response.status_code == 503, body
    assert body["code"] == "engine_restarting" and "restarting" in body["detail"]
    assert int(response["Retry-After"]) == body["retry_after_s"] > 0
    assert body["status"] == "error" and body["id"]  # the translation, as GET shows it
    row, events = await recorded()
    assert (row.status, row.error_class) == (Translation.Status.ERROR, "EngineDead")
    assert str(row.request_id) == body["id"] and response["Location"].endswith(f"/{row.request_id}/")
    assert events == [("error", "EngineDead")]


async def test_the_event_stream_ends_with_an_error_event_named_engine_restarting(dying_engine, api_key):
    killer = asyncio.create_task(kill_after_first_token(dying_engine))
    response = await post(api_key, TRANSLATE, json.dumps({"text": NOTE}), accept="text/event-stream")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/event-stream")
    events = []
    async for chunk in response.streaming_content:
        for block in chunk.decode().strip().split("\n\n"):
            name, data = block.split("\n", 1)
            events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    await killer
    names = [name for name, _ in events]
    assert names[0] == "started" and "token" in names and names[-1] == "error", names
    error = events[-1][1]
    assert error["code"] == "engine_restarting" and error["retry_after_s"] > 0 and "restarting" in error["detail"]
    assert error["status"] == "error"
    row, audit = await recorded()
    assert row.error_class == "EngineDead" and audit == [("error", "EngineDead")]


async def test_fhir_answers_a_dead_engine_with_a_transient_operation_outcome(dying_engine, api_key):
    condition = {"resourceType": "Condition", "id": "knee", "subject": {"reference": "Patient/1"},
                 "code": {"text": NOTE}}
    killer = asyncio.create_task(kill_after_first_token(dying_engine))
    response = await post(api_key, FHIR, json.dumps(condition), content_type="application/fhir+json",
                          accept="application/fhir+json")
    await killer
    body = response.json()
    assert response.status_code == 503 and int(response["Retry-After"]) > 0, body
    assert body["resourceType"] == "OperationOutcome"
    (issue,) = body["issue"]
    assert (issue["severity"], issue["code"]) == ("error", "transient") and "restarting" in issue["diagnostics"]
    row, audit = await recorded()
    assert row.error_class == "EngineDead" and audit == [("error", "EngineDead")]


async def test_a_request_that_meets_the_engine_already_dead_is_refused_with_the_same_code(dying_engine, api_key):
    assert (await AsyncClient().get("/readyz")).status_code == 200  # loaded and serving
    dying_engine.kill("EngineCore exited with code -9")

    response = await post(api_key, TRANSLATE, json.dumps({"text": NOTE}))
    assert response.status_code == 503
    assert response.json()["code"] == "engine_restarting" and int(response["Retry-After"]) >= 30
    fhir = await post(api_key, FHIR, json.dumps({"resourceType": "Condition", "code": {"text": NOTE},
                                                 "subject": {"reference": "Patient/1"}}),
                      content_type="application/fhir+json", accept="application/fhir+json")
    assert fhir.status_code == 503 and fhir.json()["issue"][0]["code"] == "transient"
    assert "restarting" in fhir.json()["issue"][0]["diagnostics"]

    def refusals():
        return [(e.outcome, e.error_class) for e in AuditEvent.objects.filter(event_type="translation")]

    try:
        assert await sync_to_async(refusals)() == [("error", "EngineDead")] * 2  # one record per request
        assert await sync_to_async(Translation.objects.count)() == 0
    finally:
        await sync_to_async(lambda: connection.close())()


async def test_a_generic_engine_failure_keeps_its_502_and_engine_error_code(settings, api_key):
    settings.INFERENCE_ENGINE = "fake"
    process_engine.engine_set(FakeEngine(fail_after=2))
    try:
        response = await post(api_key, TRANSLATE, json.dumps({"text": NOTE}))
    finally:
        process_engine.engine_set(None)
    body = response.json()
    assert response.status_code == 502 and body["code"] == "engine_error" and "Retry-After" not in response
    row, audit = await recorded()
    assert row.error_class == "EngineError" and audit == [("error", "EngineError")]
