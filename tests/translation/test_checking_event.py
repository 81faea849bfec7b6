"""Between the last word and ``done`` the model checks the text (one
sentence at a time for a note: about 0.8 s a sentence on two CPU cores, 5 s
for six). The stream says so with a ``checking`` event, which the socket
sends as a frame and the API as a server-sent event
(clinical/translation/stream.py, clinical/web/frames.py), so the page can say
the text is written and being checked instead of "Translating…"."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from clinical.models import APIClient, AuditEvent, Translation
from clinical.translation import engine as process_engine
from inference.fake_engine import FakeEngine
from tests.frames import frames_until, open_socket

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = "Mild left knee effusion. No fracture is seen. She is well."
SENTENCE = "Mild left knee effusion."


@pytest.fixture
def checking_engine(settings):
    """A fake engine as the process engine that answers every self-check
    prompt with P(yes) 0.9, the check on (a threshold for any model)."""
    settings.INFERENCE_ENGINE = "fake"
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(check_all=0.9)
    process_engine.engine_set(engine)
    yield engine
    process_engine.engine_set(None)


def kinds(frames: list[dict]) -> list[str]:
    """Frame types in order, runs of ``token`` collapsed to one."""
    out: list[str] = []
    for frame in frames:
        if not (out and out[-1] == frame["type"] == "token"):
            out.append(frame["type"])
    return out


@pytest.mark.parametrize(("text", "sentences"), [(NOTE, 3), (SENTENCE, 1)])
async def test_the_socket_says_checking_between_the_last_word_and_done(checking_engine, clinician,
                                                                      text, sentences):
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": text})
    frames = await frames_until(communicator, "done")
    await communicator.disconnect()
    assert kinds(frames) == ["started", "token", "checking", "done"]
    checking = next(f for f in frames if f["type"] == "checking")
    assert checking == {"type": "checking", "id": frames[0]["id"], "sentences": sentences}
    assert frames[-1]["self_check"]["p_yes"] == pytest.approx(0.9)  # the check it announced ran


async def test_no_checking_frame_where_no_check_runs(checking_engine, clinician, settings):
    settings.SELF_CHECK = False
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": NOTE})
    frames = await frames_until(communicator, "done")
    await communicator.disconnect()
    assert kinds(frames) == ["started", "token", "done"]
    assert not any("-check" in request for request in checking_engine.admitted)


async def test_the_event_stream_sends_checking_before_done(checking_engine):
    _, key = await sync_to_async(APIClient.objects.create_key)(name="ehr-checking")
    response = await AsyncClient().post(
        "/api/v1/translations/", json.dumps({"text": NOTE}), content_type="application/json",
        headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"})
    assert response.status_code == 200
    events = []
    async for chunk in response.streaming_content:
        for block in chunk.decode().strip().split("\n\n"):
            name, data = block.split("\n", 1)
            events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    names = kinds([{"type": name} for name, _ in events])
    assert names[:4] == ["started", "token", "checking", "done"], names
    checking = dict(events)["checking"]
    assert checking == {"id": dict(events)["started"]["id"], "sentences": 3}


async def test_cancel_while_the_text_is_checked_says_cancelled_and_the_row_agrees(clinician, settings):
    """The clinician presses Cancel after the last word, during the check:
    the socket says ``cancelled`` and the row and its audit event say the
    same (before, the row completed and could be re-run while the page
    said cancelled)."""
    settings.INFERENCE_ENGINE = "fake"
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(hang_on="Does the rewrite say the same thing")
    process_engine.engine_set(engine)
    try:
        communicator = await open_socket(clinician)
        await communicator.send_json_to({"type": "translate", "text": SENTENCE})
        before = await frames_until(communicator, "checking")
        await communicator.send_json_to({"type": "cancel"})
        after = await frames_until(communicator, "cancelled", "done")
        await communicator.disconnect()
    finally:
        process_engine.engine_set(None)
    assert after[-1] == {"type": "cancelled", "id": before[0]["id"]}
    row = await Translation.objects.aget(request_id=before[0]["id"])
    written = "".join(f["text"] for f in before if f["type"] == "token")
    assert row.status == Translation.Status.CANCELLED and row.output_text == written != ""
    assert await AuditEvent.objects.filter(event_type="translation", request_id=row.request_id,
                                           outcome=AuditEvent.Outcome.CANCELLED).acount() == 1

