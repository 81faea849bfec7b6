"""The WebSocket protocol, driven in-process with a fake engine.

These are fast unit tests of the consumer; tests/live/test_live_stack.py runs the
same path through a real Daphne with a real model.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from clinical.models import Translation
from clinical.web.consumers import CLOSE_UNAUTHENTICATED, TranslateConsumer
from inference.examples import heading_split
from tests.data import diagnosis_sentence, laymaker_sentences
from tests.frames import frames_until, open_socket

pytestmark = pytest.mark.django_db(transaction=True)


async def rows() -> list[Translation]:
    return await database_sync_to_async(lambda: list(Translation.objects.all()))()


async def test_anonymous_socket_is_closed(fake_engine):
    communicator = WebsocketCommunicator(TranslateConsumer.as_asgi(), "/ws/translate/")
    communicator.scope["user"] = AnonymousUser()
    connected, code = await communicator.connect()
    assert not connected
    assert code == CLOSE_UNAUTHENTICATED


async def test_translation_streams_tokens_then_done_and_row_matches(fake_engine, clinician):
    text = diagnosis_sentence()
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": text})
    frames = await frames_until(communicator, "done")
    await communicator.disconnect()

    assert frames[0]["type"] == "started" and frames[0]["engine"] == "fake"
    tokens = [f["text"] for f in frames if f["type"] == "token"]
    heading, findings = heading_split(text)  # a copied heading streams with the answer's first token
    assert heading and tokens[0].startswith(heading)
    assert len(tokens) == len(("Plain words: " + findings).split(" "))
    done = frames[-1]
    (row,) = await rows()
    assert done["id"] == str(row.request_id)
    assert row.status == Translation.Status.COMPLETED
    assert row.output_text == "".join(tokens).strip()
    assert row.input_text == text
    assert row.user_id == clinician.pk
    assert row.tokens_out == done["tokens_out"] == len(tokens)
    assert done["confidence"] == pytest.approx(row.confidence) and 0 < row.confidence <= 1
    assert 0 <= row.queue_wait_ms <= row.ttft_ms <= row.total_ms


@pytest.mark.parametrize("text, code", [
    ("", "empty"),
    ("   \n\t ", "empty"),
    ("x" * 8001, "too_long"),
    (12345, "invalid"),
    ("chest pain\x00", "invalid"),
])
async def test_bad_text_is_refused_with_error_frame_and_nothing_stored(fake_engine, clinician, text, code):
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": text})
    frame = await communicator.receive_json_from()
    assert frame["type"] == "error" and frame["code"] == code and frame["message"]
    assert await rows() == []
    # The socket stays usable for the next good request.
    await communicator.send_json_to({"type": "translate", "text": "Left knee pain."})
    assert (await frames_until(communicator, "done"))[-1]["type"] == "done"
    await communicator.disconnect()


@pytest.mark.parametrize("raw", ["{not json", "[1, 2", '"just a string"', '{"type": "dance"}', "[]",
                                 "[" * 50_000 + "]" * 50_000])
async def test_malformed_frame_gets_error_frame_and_socket_stays_open(fake_engine, clinician, raw):
    communicator = await open_socket(clinician)
    await communicator.send_to(text_data=raw)
    frame = await communicator.receive_json_from()
    assert frame == {"type": "error", "code": "bad_frame", "message": frame["message"]}
    await communicator.send_json_to({"type": "translate", "text": "No acute distress."})
    assert (await frames_until(communicator, "done"))[-1]["type"] == "done"
    await communicator.disconnect()


async def test_binary_frame_gets_error_frame(fake_engine, clinician):
    communicator = await open_socket(clinician)
    await communicator.send_to(bytes_data=b"\xff\xfe\x00")
    frame = await communicator.receive_json_from()
    assert frame["type"] == "error" and frame["code"] == "bad_frame"
    await communicator.disconnect()


async def test_cancel_stops_the_stream_and_aborts_the_engine(fake_engine, clinician):
    fake_engine.token_delay_s = 0.05
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": " ".join(["word"] * 200)})
    started = await communicator.receive_json_from()
    first = await communicator.receive_json_from()
    assert first["type"] == "token"
    await communicator.send_json_to({"type": "cancel"})
    frames = await frames_until(communicator, "cancelled")
    await communicator.disconnect()

    tokens_received = 1 + sum(f["type"] == "token" for f in frames)
    assert tokens_received < 50
    (row,) = await rows()
    assert row.status == Translation.Status.CANCELLED
    assert row.finish_reason == "abort"
    assert started["id"] in fake_engine.aborted
    assert row.tokens_out < 50


async def test_disconnect_mid_stream_marks_the_row_cancelled(fake_engine, clinician):
    fake_engine.token_delay_s = 0.05
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": " ".join(["word"] * 200)})
    started = await communicator.receive_json_from()
    await communicator.receive_json_from()
    await communicator.disconnect()

    (row,) = await rows()
    assert row.status == Translation.Status.CANCELLED
    assert started["id"] in fake_engine.aborted


async def test_engine_error_mid_stream_sends_error_frame_and_records_error(fake_engine, clinician):
    fake_engine.fail_after = 3
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": diagnosis_sentence(1)})
    frames = await frames_until(communicator, "error")
    await communicator.disconnect()

    assert sum(f["type"] == "token" for f in frames) == 3
    assert frames[-1]["code"] == "engine_error"
    (row,) = await rows()
    assert row.status == Translation.Status.ERROR
    assert row.error_class == "EngineError"
    assert row.tokens_out == 3


async def test_second_translate_while_running_is_refused(fake_engine, clinician):
    fake_engine.token_delay_s = 0.05
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": " ".join(["word"] * 40)})
    await communicator.receive_json_from()
    await communicator.send_json_to({"type": "translate", "text": "Another one."})
    frames = await frames_until(communicator, "error")
    assert frames[-1]["code"] == "in_progress"
    await communicator.send_json_to({"type": "cancel"})
    await frames_until(communicator, "cancelled")
    await communicator.disconnect()
    assert len(await rows()) == 1
    await asyncio.sleep(0)


async def test_the_next_request_is_accepted_right_after_done(fake_engine, clinician):
    """A low-confidence output is followed by verification frames; a new
    request sent as soon as "done" arrives must not be refused as busy."""
    fake_engine.logprob = -1.0  # confidence 0.37: below the threshold
    communicator = await open_socket(clinician)
    for sentence in laymaker_sentences()[:3]:
        await communicator.send_json_to({"type": "translate", "text": sentence})
        frames = await frames_until(communicator, "done", "error")
        assert frames[-1]["type"] == "done", frames[-1]
        assert frames[-1]["verification"] == "pending"
    await communicator.disconnect()
    assert [r.status for r in await rows()] == ["completed"] * 3


async def test_a_full_engine_queue_answers_busy_with_a_retry_time(fake_engine, clinician, other_clinician):
    """The queue is bounded: past ENGINE_MAX_QUEUE the request is refused
    with "busy, retry in N s" (and audited as rejected), not queued."""
    from clinical.models import AuditEvent

    fake_engine.max_queue = 1
    fake_engine.token_delay_s = 0.05
    first = await open_socket(clinician)
    await first.send_json_to({"type": "translate", "text": " ".join(["word"] * 60)})
    await first.receive_json_from()  # started
    second = await open_socket(other_clinician)
    await second.send_json_to({"type": "translate", "text": "Left knee pain."})
    busy = await second.receive_json_from()
    assert busy["type"] == "error" and busy["code"] == "busy"
    assert busy["retry_after_s"] >= 1 and f"{busy['retry_after_s']} s" in busy["message"]
    await frames_until(first, "done")
    await second.send_json_to({"type": "translate", "text": "Left knee pain."})  # room again
    assert (await frames_until(second, "done", "error"))[-1]["type"] == "done"
    await first.disconnect()
    await second.disconnect()
    outcomes = await database_sync_to_async(
        lambda: sorted(AuditEvent.objects.values_list("outcome", "error_class")))()
    assert outcomes == [("completed", ""), ("completed", ""), ("rejected", "EngineBusy")]


async def test_reading_level_and_language_are_stored_and_bad_ones_refused(fake_engine, clinician):
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": "Left knee pain.",
                                     "reading_level": 8, "language": "es"})
    frames = await frames_until(communicator, "done")
    assert frames[0]["reading_level"] == 8 and frames[0]["language"] == "es"
    for bad in ({"reading_level": 5}, {"reading_level": "6"}, {"language": "fr"}, {"reading_level": True}):
        await communicator.send_json_to({"type": "translate", "text": "Left knee pain.", **bad})
        frame = await communicator.receive_json_from()
        assert frame["type"] == "error" and frame["code"] == "invalid_option", bad
    await communicator.disconnect()
    (row,) = await rows()
    assert (row.reading_level, row.language) == (8, "es")


async def test_a_deactivated_users_socket_is_closed_on_the_next_frame(fake_engine, clinician):
    communicator = await open_socket(clinician)
    clinician.is_active = False
    await database_sync_to_async(clinician.save)()
    await communicator.send_json_to({"type": "translate", "text": "Left knee pain."})
    output = await communicator.receive_output(timeout=5)
    assert output == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}
    assert await rows() == []


async def test_an_idle_socket_is_closed_when_its_session_expires(fake_engine, clinician, settings):
    settings.SESSION_CHECK_INTERVAL_S = 0.2
    communicator = await open_socket(clinician)
    session = communicator.scope["session"]
    await database_sync_to_async(session.delete)()  # logged out elsewhere, or expired
    output = await communicator.receive_output(timeout=5)
    assert output == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}


async def test_an_oversized_frame_is_refused_before_parsing(fake_engine, clinician, settings):
    settings.MAX_FRAME_BYTES = 65536
    communicator = await open_socket(clinician)
    await communicator.send_to(text_data='{"type": "translate", "text": "' + "é" * 40_000 + '"}')
    frame = await communicator.receive_json_from()
    assert frame["type"] == "error" and frame["code"] == "frame_too_large"
    assert "65,536 bytes" in frame["message"]
    await communicator.send_json_to({"type": "translate", "text": "Left knee pain."})  # still usable
    assert (await frames_until(communicator, "done"))[-1]["type"] == "done"
    await communicator.disconnect()
    assert len(await rows()) == 1


async def test_a_translation_ends_with_done_carrying_the_glossary_and_no_glossary_frame_follows(
        fake_engine, clinician):
    """The glossary comes from the vocabularies with the ``done`` frame;
    the engine writes none after it, so no ``glossary`` frame follows."""
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": "Vomiting and dysuria. Started on furosemide."})
    frames = await frames_until(communicator, "done")
    later = []
    while not await communicator.receive_nothing(timeout=0.5):
        later.append((await communicator.receive_json_from())["type"])
    await communicator.disconnect()
    assert "glossary" not in [f["type"] for f in frames]
    assert "glossary" not in later and set(later) <= {"verifying", "verified", "verification_failed"}
    glossary = {entry["term"]: entry for entry in frames[-1]["glossary"]}
    assert set(glossary) == {"Vomiting", "dysuria", "furosemide"}
    assert glossary["furosemide"]["definition"] == "A medicine (no vetted plain definition)."
    assert all(entry["source_name"] for entry in glossary.values())
    (row,) = await rows()
    assert [entry["term"] for entry in row.glossary] == list(glossary)


async def test_a_new_translation_right_after_done_sends_no_stray_cancelled_frame(fake_engine, clinician):
    """What is left of the last translation's task after its ``done`` frame
    is cancelled when the next one starts: that is not the new translation
    being cancelled."""
    fake_engine.token_delay_s = 0.05
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": "Left knee effusion with hypertension."})
    first = await frames_until(communicator, "done")
    await communicator.send_json_to({"type": "translate", "text": "Right knee pain."})
    second = await frames_until(communicator, "done", "cancelled", "error", timeout=20)
    await communicator.disconnect()
    assert first[-1]["type"] == "done"
    assert [f["type"] for f in second if f["type"] != "token"][:1] == ["started"], second
    assert second[-1]["type"] == "done" and second[-1]["id"] != first[-1]["id"]
    assert not any(f["type"] == "cancelled" for f in second)
