"""A re-run that hangs ends at ``RERUN_SOFT_TIME_LIMIT_S`` and the lane
takes the next job: the worker's solo pool enforces no Celery time limit,
so the task bounds its own generation."""

from __future__ import annotations

import time

import pytest

from clinical.models import Rerun, Translation
from clinical.rerun import execute
from clinical.translation import admission, finish
from inference.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)


def low_confidence_translation(user) -> Translation:
    row = admission.translation_create(user=user, text="Mild left knee effusion.")
    return finish.translation_finish(
        translation_id=row.pk, status=Translation.Status.COMPLETED, output_text="Some fluid in your left knee.",
        figures=finish.TranslationFigures(tokens_out=6, confidence=0.01))


def test_a_hung_rerun_stops_at_its_time_limit_and_the_next_one_runs(clinician, settings, monkeypatch):
    settings.RERUN_SOFT_TIME_LIMIT_S = 1
    engine = FakeEngine(token_delay_s=30)  # one token every 30 s: hung, as far as the lane can tell
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: engine)
    hung, nxt = low_confidence_translation(clinician), low_confidence_translation(clinician)

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        execute.rerun_execute(translation_id=hung.pk)
    assert time.monotonic() - started < 10
    assert engine.aborted  # the engine request was stopped, not left running
    execute.rerun_fail(translation_id=hung.pk, error_class="TimeoutError")  # what the task's on_failure does
    assert Rerun.objects.get(translation=hung).status == Rerun.Status.FAILED

    engine.token_delay_s = 0  # the next job, on the same lane and engine loop
    done = execute.rerun_execute(translation_id=nxt.pk)
    assert done.status == Rerun.Status.COMPLETED and done.output_text


def test_an_engine_that_hangs_on_one_text_holds_the_lane_only_until_the_limit(clinician, settings, monkeypatch):
    """The knob the live test gives its worker (FAKE_ENGINE_HANG_ON): the
    request for one text never yields; others on the same engine do."""
    settings.RERUN_SOFT_TIME_LIMIT_S = 1
    engine = FakeEngine(hang_on="left hip")
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: engine)
    row = admission.translation_create(user=clinician, text="Chronic pain of the left hip.")
    hung = finish.translation_finish(
        translation_id=row.pk, status=Translation.Status.COMPLETED, output_text="Your left hip hurts.",
        figures=finish.TranslationFigures(tokens_out=4, confidence=0.01))
    nxt = low_confidence_translation(clinician)

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        execute.rerun_execute(translation_id=hung.pk)
    assert 1 <= time.monotonic() - started < 10 and engine.aborted
    done = execute.rerun_execute(translation_id=nxt.pk)
    assert done.status == Rerun.Status.COMPLETED and "left knee" in done.output_text
