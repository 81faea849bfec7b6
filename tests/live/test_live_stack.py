"""The main path end to end: real Daphne, real login, real WebSocket, real
Redis channel layer, real model (llama.cpp), rows in the real database."""

from __future__ import annotations

import json

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from clinical.models import AuditEvent, Translation
from inference.self_check import SELF_CHECK_PROMPT_VERSION
from inference.weights import default_gguf_path, smollm2_gguf_path
from tests.conftest import in_thread
from tests.data import laymaker_sentences
from tests.frames import receive_until, translate_over_socket


def assert_stream_matches_row(frames: list[dict], user) -> Translation:
    assert frames[0]["type"] == "started", frames
    assert frames[-1]["type"] == "done", frames[-1]
    tokens = [f["text"] for f in frames if f["type"] == "token"]
    assert len(tokens) >= 3
    done = frames[-1]
    assert 0 < done["confidence"] <= 1
    row = Translation.objects.get(request_id=done["id"])
    assert row.user == user
    assert row.status == Translation.Status.COMPLETED
    assert row.output_text == "".join(tokens).strip() and row.output_text
    assert row.tokens_out == done["tokens_out"] >= len([t for t in tokens if t])
    assert row.confidence == pytest.approx(done["confidence"])
    assert row.ttft_ms == pytest.approx(done["ttft_ms"]) and 0 < row.ttft_ms <= row.total_ms
    assert row.engine == "llamacpp" and row.prompt_version
    return row


async def test_real_daphne_streams_a_laymaker_sentence_from_smollm2(daphne_server, clinician):
    server = daphne_server(INFERENCE_ENGINE="llamacpp", INFERENCE_MODEL=str(smollm2_gguf_path()))
    session = server.login(clinician.username)
    sentence = laymaker_sentences()[4]

    frames = await translate_over_socket(server, session, sentence)

    row = await in_thread(assert_stream_matches_row, frames, clinician)
    assert row.input_text == sentence
    assert row.model_name == smollm2_gguf_path().name and row.precision == "q4_1"
    assert sentence not in server.logs(), "clinical text leaked into the server log"


async def test_real_daphne_closes_an_anonymous_socket(shared_fake_server):
    server = shared_fake_server
    with pytest.raises(InvalidStatus) as failure:
        async with connect(server.ws_url + "/ws/translate/",
                           additional_headers={"Origin": server.base_url}):
            pass
    assert failure.value.response.status_code == 403


async def test_real_daphne_refuses_a_foreign_origin(shared_fake_server, clinician):
    server = shared_fake_server
    session = server.login(clinician.username)
    with pytest.raises(InvalidStatus):
        async with connect(server.ws_url + "/ws/translate/",
                           additional_headers={"Cookie": f"sessionid={session}",
                                               "Origin": "http://evil.example"}):
            pass


@pytest.mark.slow
async def test_default_model_translates_a_laymaker_sentence_end_to_end(daphne_server, clinician):
    """The 1.5B default model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) via Daphne."""
    server = daphne_server(INFERENCE_ENGINE="llamacpp")
    session = server.login(clinician.username)
    frames = await translate_over_socket(server, session, laymaker_sentences()[17])
    row = await in_thread(assert_stream_matches_row, frames, clinician)
    assert row.model_name == default_gguf_path().name and row.precision == "q4_k_m"
    # the model checked its own text after the stream, and the gate read that, not the confidence
    assert row.self_check is not None and row.self_check_version == SELF_CHECK_PROMPT_VERSION
    assert "low_confidence" not in row.rerun_reason.split(",")
    done = next(frame for frame in frames if frame["type"] == "done")
    assert row.self_check_threshold == pytest.approx(0.5743)  # the default model's calibrated threshold
    assert done["self_check"] == {"p_yes": round(row.self_check, 3), "version": SELF_CHECK_PROMPT_VERSION,
                                  "threshold": row.self_check_threshold,
                                  "passed": row.self_check >= row.self_check_threshold}




async def test_an_idle_socket_survives_the_channel_layer_poll(shared_fake_server, clinician):
    """channels_redis polls Redis with a 5 s BZPOPMIN: a socket idle for
    longer must stay open and still translate (redis-py 8 broke this)."""
    import asyncio

    server = shared_fake_server
    session = server.login(clinician.username)
    async with connect(server.ws_url + "/ws/translate/", additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        await asyncio.sleep(6.5)
        await socket.send(json.dumps({"type": "translate", "text": "Mild left knee effusion."}))
        frames = [json.loads(await socket.recv()) for _ in range(2)]
    assert [f["type"] for f in frames] == ["started", "token"]


def test_readiness_reports_the_loaded_engine(shared_fake_server):
    server = shared_fake_server
    import httpx

    response = httpx.get(server.base_url + "/readyz", timeout=30)
    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in ("status", "engine", "model", "precision", "device")} == {
        "status": "ready", "engine": "fake", "model": "fake-echo", "precision": "none", "device": "cpu"}


async def test_a_missing_model_gives_503_and_a_clear_error_frame(daphne_server, clinician):
    import httpx

    server = daphne_server(INFERENCE_ENGINE="llamacpp", INFERENCE_MODEL="/nonexistent/model.gguf")
    response = await in_thread(lambda: httpx.get(server.base_url + "/readyz", timeout=30))
    assert response.status_code == 503 and response.json()["error"] == "EngineError"
    session = server.login(clinician.username)
    frames = await translate_over_socket(server, session, laymaker_sentences()[5])
    assert frames == [{"type": "error", "code": "engine_error",
                       "message": "The translation engine is unavailable. Please try again.",
                       "retry_after_s": 30}]
    assert await in_thread(lambda: Translation.objects.count()) == 0
    event = await in_thread(lambda: AuditEvent.objects.get())
    assert (event.outcome, event.error_class, event.actor) == ("error", "EngineError", clinician.username)


async def test_cancel_while_the_text_is_checked_is_recorded_cancelled_by_the_served_stack(daphne_server, clinician):
    """Through ``python -m clinical.serve``: the clinician presses Cancel
    after the last word, while the model checks the text (here a check that
    never answers). The socket says ``cancelled``, and the row and its one
    audit event say the same, with the whole text kept."""
    server = daphne_server(INFERENCE_ENGINE="fake", SELF_CHECK_THRESHOLD="0.6",
                           FAKE_ENGINE_HANG_ON="Does the rewrite say the same thing")
    session = server.login(clinician.username)
    async with connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        await socket.send(json.dumps({"type": "translate", "text": laymaker_sentences()[4]}))
        before = await receive_until(socket, ("checking", "done", "error"), timeout=60)
        assert before[-1]["type"] == "checking", before[-1]
        await socket.send(json.dumps({"type": "cancel"}))
        after = await receive_until(socket, ("cancelled", "done", "error"), timeout=30)
    assert after[-1] == {"type": "cancelled", "id": before[0]["id"]}
    row = await in_thread(lambda: Translation.objects.get(request_id=before[0]["id"]))
    assert row.status == Translation.Status.CANCELLED and row.verification == Translation.Verification.NOT_NEEDED
    assert row.output_text == "".join(f["text"] for f in before if f["type"] == "token") != ""
    outcomes = await in_thread(lambda: list(AuditEvent.objects.filter(
        event_type="translation", request_id=row.request_id).values_list("outcome", flat=True)))
    assert outcomes == [AuditEvent.Outcome.CANCELLED]
