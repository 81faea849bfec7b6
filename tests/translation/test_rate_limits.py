"""Per-user translation rate and per-socket frame rate (clinical.translation.ratelimit),
counted in the real Redis."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from clinical.models import AuditEvent, Translation
from tests.data import laymaker_sentences
from tests.frames import frames_until, open_socket

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_clinician_past_the_translate_rate_is_refused_with_a_retry_time(
        fake_engine, clinician, other_clinician, settings):
    settings.TRANSLATE_RATE_PER_USER = "2/minute"
    socket = await open_socket(clinician)
    for sentence in laymaker_sentences()[:2]:
        await socket.send_json_to({"type": "translate", "text": sentence})
        assert (await frames_until(socket, "done", "error"))[-1]["type"] == "done"

    await socket.send_json_to({"type": "translate", "text": laymaker_sentences()[2]})
    refused = await socket.receive_json_from()
    assert refused["type"] == "error" and refused["code"] == "rate_limited"
    assert 1 <= refused["retry_after_s"] <= 60 and f"{refused['retry_after_s']} s" in refused["message"]

    # A second socket of the same clinician shares the count; a colleague does not.
    second_tab = await open_socket(clinician)
    await second_tab.send_json_to({"type": "translate", "text": laymaker_sentences()[3]})
    assert (await second_tab.receive_json_from())["code"] == "rate_limited"
    colleague = await open_socket(other_clinician)
    await colleague.send_json_to({"type": "translate", "text": laymaker_sentences()[3]})
    assert (await frames_until(colleague, "done", "error"))[-1]["type"] == "done"
    for communicator in (socket, second_tab, colleague):
        await communicator.disconnect()

    rows = await database_sync_to_async(lambda: Translation.objects.filter(user=clinician).count())()
    assert rows == 2  # refused requests store no translation...
    refusals = await database_sync_to_async(lambda: list(AuditEvent.objects.filter(
        actor_user=clinician, outcome="rejected").values_list("error_class", flat=True)))()
    assert refusals == ["RateLimited", "RateLimited"]  # ...but are audited


async def test_a_frame_flood_is_refused_and_the_socket_recovers(fake_engine, clinician, settings):
    settings.SOCKET_FRAME_RATE = "5/second"
    socket = await open_socket(clinician)
    for _ in range(12):  # sent within a few ms: one window (it opens at the first frame)
        await socket.send_json_to({"type": "watch", "id": "not-a-uuid"})
    codes = [(await socket.receive_json_from())["code"] for _ in range(12)]
    assert codes == ["not_found"] * 5 + ["rate_limited"] * 7
    await asyncio.sleep(1.1)
    await socket.send_json_to({"type": "translate", "text": laymaker_sentences()[0]})
    assert (await frames_until(socket, "done", "error"))[-1]["type"] == "done"
    await socket.disconnect()
