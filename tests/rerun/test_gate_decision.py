"""The confidence gate's decision, in-process: at or above the threshold
nothing, below it one re-run queued on commit; tests/live/test_confidence_gate.py
runs the gate with a real worker."""

from __future__ import annotations

import pytest

from clinical.models import Rerun, Translation
from clinical.quality.gate import DEFAULT_THRESHOLD
from clinical.translation import admission, finish
from tests.data import laymaker_sentences

FINAL = ("verified", "verification_failed", "error", "cancelled")


def finish_with_confidence(user, confidence: float) -> Translation:
    row = admission.translation_create(user=user, text=laymaker_sentences()[2])
    return finish.translation_finish(
        translation_id=row.pk, status=Translation.Status.COMPLETED, output_text="Plain text.",
        figures=finish.TranslationFigures(tokens_out=3, confidence=confidence))


@pytest.mark.django_db
def test_gate_does_nothing_at_or_above_the_threshold(clinician, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        row = finish_with_confidence(clinician, DEFAULT_THRESHOLD)
    assert row.verification == Translation.Verification.NOT_NEEDED
    assert not Rerun.objects.exists()
    assert callbacks == []


@pytest.mark.django_db
def test_below_the_threshold_one_rerun_is_queued_after_commit(clinician, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        row = finish_with_confidence(clinician, DEFAULT_THRESHOLD - 0.01)
    assert row.verification == Translation.Verification.PENDING
    rerun = Rerun.objects.get()
    assert (rerun.translation, rerun.precision, rerun.status) == (row, "fp32", Rerun.Status.QUEUED)
    assert len(callbacks) == 1  # translation_verify.delay, sent only once the row is committed


@pytest.mark.django_db
def test_cancelled_and_failed_translations_are_not_rerun(clinician):
    for status in (Translation.Status.CANCELLED, Translation.Status.ERROR):
        row = admission.translation_create(user=clinician, text="Left knee pain.")
        finish.translation_finish(translation_id=row.pk, status=status, output_text="",
                                  figures=finish.TranslationFigures(confidence=0.1))
    assert not Rerun.objects.exists()
