"""Readability and the safety check wired into the product: stored on the
translation, audited without clinical text, a reason for the full-precision
re-run, checked again on the re-run, and sent in the done/verified frames
and the REST API."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from django.test import override_settings

from clinical.models import AuditEvent, Rerun, Translation
from clinical.rerun import execute
from clinical.translation import admission
from clinical.translation.finish import TranslationFigures, translation_finish
from clinical.web.frames import verification_frame
from tests.frames import frames_until, open_socket

NOTE = "Metoprolol 25 mg twice daily for left ventricular dysfunction. No chest pain."
FAITHFUL = ("Take metoprolol, 25 mg, two times a day, because the left side of your heart "
            "does not pump well. You have no chest pain.")
DROPS_DOSE = ("Take metoprolol two times a day, because the left side of your heart "
              "does not pump well. You have no chest pain.")


def finish(user, output: str, confidence: float, language: str = "en") -> Translation:
    row = admission.translation_create(user=user, text=NOTE, language=language)
    return translation_finish(
        translation_id=row.pk, status=Translation.Status.COMPLETED, output_text=output,
        figures=TranslationFigures(tokens_out=20, confidence=confidence))


@pytest.mark.django_db
def test_an_output_that_drops_a_dose_is_rerun_for_safety_and_audited_without_text(clinician):
    row = finish(clinician, DROPS_DOSE, confidence=0.95)
    assert row.safety_passed is False
    assert row.safety_missing == [{"kind": "dose", "text": "25 mg"}]
    assert row.rerun_reason == "safety_failed"
    assert row.verification == Translation.Verification.PENDING
    assert Rerun.objects.get().translation == row
    event = AuditEvent.objects.get(event_type="translation")
    assert (event.safety_passed, event.safety_missing_counts, event.rerun_reason) == (
        False, {"dose": 1}, "safety_failed")
    stored = " ".join(str(getattr(event, f.attname)) for f in AuditEvent._meta.concrete_fields)
    assert "25 mg" not in stored and "metoprolol" not in stored.lower()


@pytest.mark.django_db
def test_low_confidence_and_a_failed_check_are_both_named(clinician):
    row = finish(clinician, DROPS_DOSE, confidence=0.5)
    assert row.rerun_reason == "low_confidence,safety_failed"
    frame = verification_frame(row)
    assert frame["reason"] == "low_confidence,safety_failed"
    assert "Low confidence and Safety check" in frame["message"]


@pytest.mark.django_db
def test_a_faithful_confident_output_is_not_rerun_and_its_reading_level_is_stored(clinician):
    row = finish(clinician, FAITHFUL, confidence=0.95)
    assert row.safety_passed is True and row.safety_missing == []
    assert row.rerun_reason == "" and row.verification == Translation.Verification.NOT_NEEDED
    assert not Rerun.objects.exists()
    assert row.readability_measure == "fkgl"
    assert row.input_fkgl is not None and row.output_fkgl == row.output_readability is not None


@pytest.mark.django_db
def test_spanish_output_gets_szigriszt_pazos_and_no_fkgl(clinician):
    row = finish(clinician, "Tome metoprolol, 25 mg, dos veces al día, porque el lado izquierdo de su "
                            "corazón no bombea bien. No tiene dolor de pecho.", confidence=0.95, language="es")
    assert row.safety_passed is True
    assert row.readability_measure == "szigriszt_pazos" and row.output_fkgl is None
    assert row.output_readability is not None and row.input_fkgl is not None


@pytest.mark.django_db
@override_settings(SAFETY_RERUN=False)
def test_with_the_safety_gate_off_a_failed_check_is_stored_but_not_rerun(clinician):
    row = finish(clinician, DROPS_DOSE, confidence=0.95)
    assert row.safety_passed is False and row.rerun_reason == ""
    assert not Rerun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("rerun_output,passes", [(FAITHFUL, True), (DROPS_DOSE, False)])
def test_the_reruns_output_is_checked_again(clinician, rerun_output, passes):
    row = finish(clinician, DROPS_DOSE, confidence=0.95)
    started = execute.rerun_start(translation_id=row.pk)
    done = execute.rerun_complete(rerun_id=started.pk, output_text=rerun_output, token_logprobs=[-0.1] * 5,
                                duration_ms=10.0, engine="fake", model_name="fake")
    assert done.safety_passed is passes
    assert done.safety_missing == ([] if passes else [{"kind": "dose", "text": "25 mg"}])
    assert done.output_fkgl is not None
    row.refresh_from_db()
    frame = verification_frame(row)
    assert frame["type"] == "verified" and frame["safety"]["passed"] is passes
    assert frame["readability"]["output_fkgl"] == done.output_fkgl
    assert ("still finds facts missing" in frame["message"]) is not passes
    event = AuditEvent.objects.get(event_type="verification")
    assert event.safety_passed is passes and event.rerun_reason == "safety_failed"


@pytest.mark.django_db(transaction=True)
async def test_done_frame_carries_reading_level_and_safety_and_the_rerun_reason(fake_engine, clinician):
    fake_engine.answer = DROPS_DOSE
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": NOTE})
    frames = await frames_until(communicator, "verifying")
    await communicator.disconnect()
    done = next(f for f in frames if f["type"] == "done")
    assert done["safety"] == {"passed": False, "missing": [{"kind": "dose", "text": "25 mg"}]}
    assert done["rerun_reason"] == "safety_failed" and done["verification"] == "pending"
    readability = done["readability"]
    assert readability["measure"] == "fkgl" and readability["output_fkgl"] == readability["score"]
    assert readability["input_fkgl"] > 0
    assert frames[-1]["reason"] == "safety_failed"
    row = await database_sync_to_async(Translation.objects.get)()
    assert row.output_fkgl == readability["output_fkgl"]


# -- The faithfulness check in the product -----------------------------------

INVENTS = ("Take metoprolol, 25 mg, two times a day, because the left side of your heart does not pump "
           "well. The muscles in your brain are fine. You have no chest pain.")


@pytest.mark.django_db
def test_an_output_that_invents_a_body_part_is_flagged_rerun_and_audited_by_kind_only(clinician):
    row = finish(clinician, INVENTS, confidence=0.95)
    assert row.safety_passed is True and row.faithfulness_passed is False
    assert {f["kind"] for f in row.faithfulness_flags} == {"body_site"}
    assert any("brain" in f["text"] for f in row.faithfulness_flags)
    assert row.rerun_reason == "faithfulness_failed"
    assert row.verification == Translation.Verification.PENDING and Rerun.objects.get().translation == row
    event = AuditEvent.objects.get(event_type="translation")
    assert (event.faithfulness_passed, event.faithfulness_flag_counts) == (
        False, {"body_site": len(row.faithfulness_flags)})
    stored = " ".join(str(getattr(event, f.attname)) for f in AuditEvent._meta.concrete_fields)
    assert "brain" not in stored and "muscle" not in stored
    frame = verification_frame(row)
    assert "Faithfulness check" in frame["message"] and frame["reason"] == "faithfulness_failed"


@pytest.mark.django_db
def test_a_faithful_output_passes_and_the_gate_can_leave_faithfulness_alone(clinician, settings):
    row = finish(clinician, FAITHFUL, confidence=0.95)
    assert row.faithfulness_passed is True and row.faithfulness_flags == [] and row.rerun_reason == ""
    settings.FAITHFULNESS_RERUN = False
    row = finish(clinician, INVENTS, confidence=0.95)
    assert row.faithfulness_passed is False and row.rerun_reason == ""


@pytest.mark.django_db(transaction=True)
async def test_done_frame_and_api_view_carry_the_faithfulness_check(fake_engine, clinician):
    from clinical.translation import selectors

    fake_engine.answer = INVENTS
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": NOTE})
    frames = await frames_until(communicator, "verifying")
    await communicator.disconnect()
    done = next(f for f in frames if f["type"] == "done")
    assert done["faithfulness"]["passed"] is False
    assert {flag["kind"] for flag in done["faithfulness"]["flags"]} == {"body_site"}
    assert any("brain" in flag["text"] for flag in done["faithfulness"]["flags"])
    row = await database_sync_to_async(Translation.objects.get)()
    view = await database_sync_to_async(selectors.translation_api_view)(translation=row)
    assert view["faithfulness"] == done["faithfulness"]


@pytest.mark.django_db
def test_the_detail_page_and_the_handout_show_the_faithfulness_flags(client, clinician):
    row = finish(clinician, INVENTS, confidence=0.95)
    client.force_login(clinician)
    for path in (f"/translations/{row.request_id}/", f"/translations/{row.request_id}/handout/"):
        html = client.get(path).content.decode()
        assert 'id="faithfulness"' in html and 'data-state="failed"' in html, path
        assert "Body part:</span> muscles in your brain" in html, path
