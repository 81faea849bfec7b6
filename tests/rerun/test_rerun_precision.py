"""The verified text is labelled with the precision its engine reported
after load (``Rerun.engine_precision``: ``fp32``, ``bf16``,
``fp8 (compressed-tensors)``...), not with the re-run's lookup key
(``Rerun.precision``, always ``fp32``): in the ``verified`` frame, the
detail page, the REST API, FHIR and the verification's audit record. A
re-run recorded before engines reported a label shows the old ``fp32``."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from django.urls import reverse

from clinical.api import fhir
from clinical.models import RERUN_PRECISION, AuditEvent, Rerun, Translation
from clinical.rerun import execute, notify
from clinical.translation import admission, finish, selectors
from clinical.web.frames import verification_event_frame, verification_frame
from tests.frames import open_socket

pytestmark = pytest.mark.django_db(transaction=True)

KNEE = "Mild left knee effusion."
FAST = "Some fluid in your left knee."
VERIFIED = "There is a little extra fluid in your left knee."


def verified_translation(user, *, engine_precision: str) -> Translation:
    """A low-confidence translation whose re-run completed on an engine that
    reported ``engine_precision`` ("" as rows from before the field)."""
    row = admission.translation_create(user=user, text=KNEE)
    row = finish.translation_finish(translation_id=row.pk, status=Translation.Status.COMPLETED,
                                    output_text=FAST, figures=finish.TranslationFigures(
                                          tokens_out=6, confidence=0.01))
    rerun = execute.rerun_start(translation_id=row.pk)  # the gate queued it (confidence 0.01)
    execute.rerun_complete(rerun_id=rerun.pk, output_text=VERIFIED, token_logprobs=[-0.1] * 10,
                           duration_ms=1234.0, engine="vllm", model_name="Qwen2.5-7B-Instruct",
                           engine_precision=engine_precision)
    row.refresh_from_db()
    assert row.verification == Translation.Verification.VERIFIED
    return row


@pytest.mark.parametrize("label", ["bf16", "fp8 (compressed-tensors)"])
def test_the_verified_frame_names_the_engines_precision_and_keeps_the_old_field(clinician, label):
    frame = verification_frame(verified_translation(clinician, engine_precision=label))
    assert frame["type"] == "verified"
    assert frame["engine_precision"] == label
    assert frame["precision"] == RERUN_PRECISION == "fp32"  # the lookup key, kept for older clients
    assert f"Verified in full precision ({label})" in frame["message"]
    assert "(fp32)" not in frame["message"]


def test_a_rerun_recorded_before_engines_reported_a_label_still_shows_fp32(clinician):
    row = verified_translation(clinician, engine_precision="")
    frame = verification_frame(row)
    assert (frame["precision"], frame["engine_precision"]) == ("fp32", "fp32")
    assert "Verified in full precision (fp32)" in frame["message"]
    assert selectors.translation_api_view(translation=row)["precision"] == "fp32"
    assert Rerun.objects.get(translation=row).precision_label == "fp32"


def test_the_api_fhir_and_audit_record_carry_the_engines_precision(clinician):
    row = verified_translation(clinician, engine_precision="bf16")
    view = selectors.translation_api_view(translation=row)
    assert view["verified"] and view["text"] == VERIFIED and view["precision"] == "bf16"
    parameters = fhir.plain_language_parameters(api_view=view, references=[])
    assert {p["name"]: p.get("valueString") for p in parameters["parameter"]}["precision"] == "bf16"
    event = AuditEvent.objects.get(event_type="verification", request_id=row.request_id)
    assert (event.outcome, event.precision) == ("verified", "bf16")


def test_the_fast_text_keeps_its_own_engines_label_until_verified(clinician):
    row = admission.translation_create(user=clinician, text=KNEE)
    Translation.objects.filter(pk=row.pk).update(precision="q4_k_m")
    row = finish.translation_finish(translation_id=row.pk, status=Translation.Status.COMPLETED,
                                    output_text=FAST, figures=finish.TranslationFigures(
                                          tokens_out=6, confidence=0.01))
    assert selectors.translation_api_view(translation=row)["precision"] == "q4_k_m"


def test_the_detail_page_names_the_engines_precision(clinician, client):
    row = verified_translation(clinician, engine_precision="fp8 (compressed-tensors)")
    client.force_login(clinician)
    page = client.get(reverse("translation-detail", args=[row.request_id])).content.decode()
    assert "Verified in full precision (fp8 (compressed-tensors))" in page


async def test_the_worker_sends_a_plain_event_and_the_socket_gets_the_frame_it_always_got(clinician, fake_engine):
    """The re-run lane hands the web side an event (ids and figures, no
    frame); the socket turns it into the ``verified`` frame, the same one
    a ``watch`` reads from the database."""
    row = await database_sync_to_async(verified_translation)(clinician, engine_precision="bf16")
    event = await database_sync_to_async(notify.verification_event)(row)
    assert event["event"] == "verified" and "type" not in event and "message" not in event
    frame = await database_sync_to_async(verification_frame)(row)
    assert verification_event_frame(json.loads(json.dumps(event))) == frame  # plain data over the channel layer
    socket = await open_socket(clinician)
    await socket.send_json_to({"type": "watch", "id": str(row.request_id)})
    assert await socket.receive_json_from(timeout=10) == frame
    await database_sync_to_async(notify.rerun_notify)(translation=row)  # as the worker sends it
    assert await socket.receive_json_from(timeout=10) == frame
    await socket.disconnect()
