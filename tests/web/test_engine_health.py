"""A replica whose engine dies, in-process: /readyz answers 503 with the
reason, the translation in flight ends with an ``engine_restarting`` frame
and one audit record, and the engine is rebuilt (with backoff) without a
restart. The fake engine dies as vLLM's does (``health()`` says dead,
streams raise ``EngineDead``); tests/live/test_engine_death.py kills the
real engine-core process under a real server."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import AsyncClient
from prometheus_client import REGISTRY

from clinical.models import AuditEvent, Translation
from clinical.translation import engine as process_engine
from inference.fake_engine import FakeEngine
from tests.data import laymaker_sentences
from tests.frames import frames_until, open_socket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dying_engine(settings):
    """A slow fake engine as the process engine; a rebuild builds a new
    fake one (INFERENCE_ENGINE=fake) after 0.3 s, checked every 50 ms."""
    settings.INFERENCE_ENGINE = "fake"
    settings.ENGINE_REBUILD_BACKOFF_S = 0.3
    settings.ENGINE_HEALTH_INTERVAL_S = 0.05
    engine = FakeEngine(token_delay_s=0.05)
    process_engine.engine_set(engine)
    yield engine
    process_engine.engine_set(None)


async def wait_until(predicate, timeout_s: float = 5.0) -> float:
    """Seconds until ``predicate()`` held (polled every 20 ms)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(timeout_s):
        while not await predicate():
            await asyncio.sleep(0.02)
    return loop.time() - started


async def test_readiness_names_the_dead_engine_then_recovers_after_the_rebuild(dying_engine):
    client = AsyncClient()
    assert (await client.get("/readyz")).status_code == 200
    dying_engine.kill("EngineCore exited with code -9")

    response = await client.get("/readyz")
    body = response.json()
    assert response.status_code == 503
    assert (body["status"], body["error"], body["reason"]) == (
        "unavailable", "EngineDead", "EngineCore exited with code -9")
    assert body["checks"]["engine"]["state"] in ("dead", "rebuilding")
    assert body["checks"]["redis"]["ok"] and body["checks"]["database"]["ok"]
    assert REGISTRY.get_sample_value("clinical_engine_up") == 0.0

    async def ready() -> bool:
        return (await client.get("/readyz")).status_code == 200

    await wait_until(ready)
    body = (await client.get("/readyz")).json()
    assert body["engine_state"]["rebuilds"] == 1 and body["engine_state"]["deaths"] == 1
    assert process_engine.engine_current() is not dying_engine
    assert REGISTRY.get_sample_value("clinical_engine_up") == 1.0
    assert REGISTRY.get_sample_value("clinical_engine_rebuilds") == 1.0
    await sync_to_async(lambda: connection.close())()


async def test_the_translation_in_flight_gets_an_error_frame_and_one_audit_record_then_the_next_is_served(
        dying_engine, clinician):
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": laymaker_sentences()[0]})
    frames = await frames_until(communicator, "token")
    dying_engine.kill("EngineCore exited with code -9")
    frames += await frames_until(communicator, "error")
    error = frames[-1]
    assert error["code"] == "engine_restarting" and error["retry_after_s"] > 0
    assert "restarting" in error["message"]

    def recorded():
        (row,) = Translation.objects.all()
        events = list(AuditEvent.objects.filter(event_type="translation", request_id=row.request_id))
        return row, events

    row, events = await sync_to_async(recorded)()
    assert (row.status, row.error_class) == (Translation.Status.ERROR, "EngineDead")
    assert [(e.outcome, e.error_class) for e in events] == [("error", "EngineDead")]

    async def rebuilt() -> bool:
        status = process_engine.engine_status()
        return status is not None and status.alive

    await wait_until(rebuilt)
    await communicator.send_json_to({"type": "translate", "text": laymaker_sentences()[1]})
    frames = await frames_until(communicator, "done")
    assert frames[-1]["status"] == "completed"
    await communicator.disconnect()


async def test_a_translation_asked_for_while_the_engine_is_dead_is_refused_as_engine_restarting(
        settings, clinician):
    """Refused at admission, before any row: the same code as a translation
    the engine died under (the API's 503, tests/api/test_engine_restarting.py),
    and one audit record."""
    settings.INFERENCE_ENGINE = "fake"
    settings.ENGINE_REBUILD_BACKOFF_S = 30  # still dead when the request comes
    engine = FakeEngine()
    process_engine.engine_set(engine)
    try:
        communicator = await open_socket(clinician)
        await communicator.send_json_to({"type": "translate", "text": laymaker_sentences()[0]})
        assert (await frames_until(communicator, "done"))[-1]["status"] == "completed"  # loaded and serving
        engine.kill("EngineCore exited with code -9")
        await communicator.send_json_to({"type": "translate", "text": laymaker_sentences()[1]})
        (error,) = await frames_until(communicator, "error")
        assert error["code"] == "engine_restarting" and error["retry_after_s"] >= 30
        assert "restarting" in error["message"] and "nothing was translated" in error["message"]
        await communicator.disconnect()
    finally:
        process_engine.engine_set(None)

    def recorded():
        return (Translation.objects.count(),
                [(e.outcome, e.error_class) for e in AuditEvent.objects.filter(event_type="translation")])

    count, events = await sync_to_async(recorded)()
    assert count == 1 and sorted(events) == [("completed", ""), ("error", "EngineDead")]


def test_a_dead_rerun_lane_shows_on_readiness_metrics_and_the_dashboard(client, django_user_model, settings):
    """A worker's report as clinical.rerun.lane writes it, read back by the
    three places IT looks (the real worker writing it: tests/live/test_engine_death.py)."""
    from django.contrib.auth.models import Permission

    from clinical.rerun import lane

    settings.INFERENCE_ENGINE = "fake"
    lane._name = "rerun@gpu-node-7"  # as heartbeat_start sets it in a worker
    try:
        lane.lane_report({"state": "dead", "alive": False, "reason": "EngineCore exited with code -9",
                          "deaths": 1, "rebuilds": 0, "retry_in_s": 1.0, "engine": "vllm",
                          "model": "Qwen2.5-7B-Instruct", "precision": "fp32"})
        summary = lane.lane_summary()
        assert summary["state"] == "down"
        assert [w["worker"] for w in summary["workers"]] == ["rerun@gpu-node-7"]

        assert REGISTRY.get_sample_value("clinical_rerun_engine_up", {"worker": "rerun@gpu-node-7"}) == 0.0
        assert REGISTRY.get_sample_value("clinical_rerun_workers_reporting") == 1.0
        process_engine.engine_set(FakeEngine())
        response = client.get("/readyz")
        assert response.status_code == 200  # the lane informs; it does not take the replica out
        assert response.json()["rerun_lane"]["state"] == "down"

        it = django_user_model.objects.create_user("it-lane", password="x-very-long-password-1", is_staff=True)
        it.user_permissions.add(Permission.objects.get(codename="view_auditevent"))
        client.force_login(it)
        page = client.get("/admin/dashboard/").content.decode()
        assert "Re-run worker rerun@gpu-node-7" in page and "EngineCore exited with code -9" in page
        assert "Re-run lane: <strong>down</strong>" in page
    finally:
        lane.lane_forget()
        lane._name = ""
        process_engine.engine_set(None)
    assert lane.lane_summary()["state"] == "no_workers"
