"""The model's own check of each output (clinical/translation/checking.py):
run by the web process after the stream, stored with the translation and
its audit event, read by the gate instead of the confidence, and by the
re-run to choose among its candidates (clinical/rerun/execute.py)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from channels.db import database_sync_to_async
from prometheus_client import REGISTRY

from clinical.api.serializers import TranslationSerializer
from clinical.models import AuditEvent, Translation
from clinical.quality.display import translation_quality_display
from clinical.quality.measure import translation_quality_payload
from clinical.rerun import candidates, execute
from clinical.translation import admission, finish, selectors
from clinical.translation.generation import CANCEL_REQUESTED, translation_generate
from clinical.web.frames import verification_frame
from inference.fake_engine import FakeEngine
from inference.self_check import SELF_CHECK_PROMPT_VERSION

pytestmark = pytest.mark.django_db(transaction=True)

KNEE = "Mild left knee effusion."
FAST = "There is a little extra fluid in your left knee."
BETTER = "There is a small amount of extra fluid in your left knee."


async def create(user, text: str = KNEE) -> Translation:
    return await database_sync_to_async(admission.translation_create)(user=user, text=text)


def doubted_fast_text(user, *, confidence: float = 0.97) -> Translation:
    """A finished translation of KNEE whose fast text FAST the model's own
    check doubted (P(yes) 0.3), as the web process leaves it for the re-run."""
    row = admission.translation_create(user=user, text=KNEE)
    return finish.translation_finish(translation_id=row.pk, status=Translation.Status.COMPLETED, output_text=FAST,
                                     figures=finish.TranslationFigures(tokens_out=9, confidence=confidence,
                                                                       self_check=0.3))


async def test_a_text_the_model_doubts_is_rerun_for_its_self_check_though_it_was_written_confidently(
        clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(answer=FAST, logprob=-0.01, checks={FAST: 0.3})
    row = await create(clinician)
    done = await translation_generate(translation=row, engine=engine, received_ns=time.monotonic_ns())
    assert done.status == Translation.Status.COMPLETED and done.output_text == FAST
    assert done.confidence > 0.98 and done.safety_passed and done.faithfulness_passed
    assert done.self_check == pytest.approx(0.3) and done.self_check_version == SELF_CHECK_PROMPT_VERSION
    assert done.rerun_reason == "low_self_check" and done.verification == Translation.Verification.PENDING
    assert engine.admitted == [str(row.request_id), f"{row.request_id}-check"]  # after the text, on its engine
    event = await database_sync_to_async(AuditEvent.objects.get)(event_type="translation")
    assert event.self_check == pytest.approx(0.3)
    assert done.self_check_threshold == pytest.approx(0.6)  # the threshold it was gated by, kept with it
    assert translation_quality_payload(done)["self_check"] == {"p_yes": 0.3, "version": SELF_CHECK_PROMPT_VERSION,
                                                              "threshold": 0.6, "passed": False}


async def test_a_text_the_model_checks_as_faithful_is_not_rerun_though_its_confidence_is_low(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(answer=FAST, logprob=-1.5, checks={FAST: 0.9})
    done = await translation_generate(translation=await create(clinician), engine=engine,
                                      received_ns=time.monotonic_ns())
    assert done.confidence < 0.3 and done.self_check == pytest.approx(0.9)
    assert done.rerun_reason == "" and done.verification == Translation.Verification.NOT_NEEDED


async def test_without_a_self_check_threshold_the_check_does_not_run_and_the_confidence_gates(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = None  # the rows' model ("") is not calibrated
    engine = FakeEngine(answer=FAST, logprob=-1.5, checks={FAST: 0.9})
    row = await create(clinician)
    done = await translation_generate(translation=row, engine=engine, received_ns=time.monotonic_ns())
    assert engine.admitted == [str(row.request_id)]
    assert done.self_check is None and done.self_check_version == "" and done.rerun_reason == "low_confidence"


async def test_a_check_that_gives_way_to_a_clinicians_translation_leaves_the_confidence_to_gate(clinician, settings):
    """The check is background work: a translation arriving while it runs
    stops it (the one-at-a-time engine's rule), and the row completes
    without it, gated by its confidence."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(answer=FAST, logprob=-0.01, serial=True, token_delay_s=0.05, checks={FAST: 0.3})
    first, second = await create(clinician), await create(clinician)
    gave_way, ran = checks_counted("gave_way"), checks_counted("ran")
    task = asyncio.create_task(translation_generate(translation=first, engine=engine, received_ns=time.monotonic_ns()))
    while f"{first.request_id}-check" not in engine.admitted:
        await asyncio.sleep(0.01)
    other = await translation_generate(translation=second, engine=engine, received_ns=time.monotonic_ns())
    done = await task
    assert f"{first.request_id}-check" in engine.preempted
    # its cost is reported: one check gave way, the second text's ran
    assert checks_counted("gave_way") == gave_way + 1 and checks_counted("ran") == ran + 1
    assert done.status == Translation.Status.COMPLETED and done.self_check is None
    assert done.rerun_reason == ""  # confident, both checks passed: not re-run
    assert other.status == Translation.Status.COMPLETED


async def test_on_a_busy_cpu_engine_the_check_is_skipped_and_the_confidence_gates(clinician, settings):
    """A clinician's translation is waiting when another's text is whole:
    the check would take the cores they share, so it does not run."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(answer=FAST, logprob=-0.01, serial=True, token_delay_s=0.05, checks={FAST: 0.3})
    first, second = await create(clinician), await create(clinician)
    waiting = checks_counted("translations_waiting")
    task = asyncio.create_task(translation_generate(translation=first, engine=engine, received_ns=time.monotonic_ns()))
    while str(first.request_id) not in engine.admitted:
        await asyncio.sleep(0.01)
    other = asyncio.create_task(translation_generate(translation=second, engine=engine,
                                                     received_ns=time.monotonic_ns()))
    done, after = await task, await other
    assert f"{first.request_id}-check" not in engine.admitted  # skipped while the second waited
    assert done.self_check is None and done.rerun_reason == ""  # confident and passing: not re-run
    assert after.self_check == pytest.approx(0.3)  # alone by then: checked
    assert f"{second.request_id}-check" in engine.admitted
    assert checks_counted("translations_waiting") == waiting + 1


def checks_counted(outcome: str) -> float:
    """``clinical_self_checks_total{outcome}`` in this process's registry."""
    return REGISTRY.get_sample_value("clinical_self_checks_total", {"outcome": outcome}) or 0.0


async def cancelled_during_the_check(user, engine: FakeEngine, *message: str) -> tuple[Translation, Translation]:
    """Generate KNEE on ``engine`` (whose check hangs), cancel the task
    with ``message`` once the check is asked, and return the row as
    created and as stored."""
    row = await create(user)
    task = asyncio.create_task(translation_generate(translation=row, engine=engine, received_ns=time.monotonic_ns()))
    while f"{row.request_id}-check" not in engine.admitted:
        await asyncio.sleep(0.01)
    task.cancel(*message)
    with pytest.raises(asyncio.CancelledError):
        await task
    return row, await database_sync_to_async(Translation.objects.get)(pk=row.pk)


async def test_a_socket_closed_during_the_check_still_completes_the_whole_text(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(answer=FAST, logprob=-0.01, hang_on="Does the rewrite say the same thing")
    row, stored = await cancelled_during_the_check(clinician, engine)
    assert stored.status == Translation.Status.COMPLETED and stored.output_text == FAST
    assert stored.self_check is None and f"{row.request_id}-check" in engine.aborted
    assert await database_sync_to_async(AuditEvent.objects.filter(event_type="translation").count)() == 1


async def test_the_clinicians_cancel_during_the_check_records_the_whole_text_cancelled(clinician, settings):
    """Cancel pressed while the whole text is being checked: the clinician
    asked to stop, so the row says so (its text kept), and nothing gates or
    re-runs a text they set aside."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(answer=FAST, logprob=-3.0, hang_on="Does the rewrite say the same thing")
    row, stored = await cancelled_during_the_check(clinician, engine, CANCEL_REQUESTED)
    assert stored.status == Translation.Status.CANCELLED and stored.output_text == FAST
    assert stored.rerun_reason == "" and stored.verification == Translation.Verification.NOT_NEEDED
    assert f"{row.request_id}-check" in engine.aborted
    (event,) = await database_sync_to_async(list)(AuditEvent.objects.filter(event_type="translation"))
    assert event.outcome == AuditEvent.Outcome.CANCELLED


def test_the_rerun_keeps_the_candidate_the_model_checks_best_and_records_every_score(clinician, settings,
                                                                                     monkeypatch):
    """The worker checks each candidate on its engine; the one it scores
    highest (and above the fast text) replaces the doubted fast text."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision", "sampled")
    settings.RERUN_REPLACE_MARGIN = 0.0
    worker = FakeEngine(answer=BETTER, logprob=-1.0, checks={BETTER: 0.8})
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    row = doubted_fast_text(clinician)
    assert row.rerun_reason == "low_self_check"
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.output_text == BETTER and done.self_check == pytest.approx(0.8)
    # the first candidate checked at 0.8 >= 0.6 and may replace the fast text: the search stops there
    assert [(r["name"], r["self_check"]) for r in done.candidates] == [("full_precision", 0.8)]
    assert "doubted by the model's own check (0.30" in done.change_note
    event = AuditEvent.objects.get(event_type="verification")
    assert event.self_check == pytest.approx(0.8) and event.rerun_candidates[0]["self_check"] == 0.8
    translation = Translation.objects.get(pk=row.pk)
    frame = verification_frame(translation)
    assert frame["self_check"]["passed"] is True and "still doubts" not in frame["message"]
    assert frame["message"].startswith("Verified in full precision")
    assert translation_quality_display(translation=translation)["self_check"]["state"] == "passed"


def test_the_rerun_keeps_the_fast_text_when_no_candidate_checks_better_and_it_is_shown_as_doubted(
        clinician, client, settings, monkeypatch):
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.SELF_CHECK_COPY = "trusted"  # a site that keeps a doubted text, marked, where no copy is trusted
    settings.RERUN_CANDIDATES = ("sampled",)
    settings.RERUN_REPLACE_MARGIN = 0.0
    worker = FakeEngine(answer=BETTER, logprob=-0.01, checks={BETTER: 0.2})
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    row = doubted_fast_text(clinician, confidence=0.5)
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.candidate == candidates.FAST_TEXT and done.output_text == FAST
    assert done.self_check == pytest.approx(0.3)
    assert done.change_note.startswith("The first text stands") and "own check gave it 0.30" in done.change_note
    # the text the clinician gets is one the model doubts: every place that shows it says so
    translation = Translation.objects.get(pk=row.pk)
    frame = verification_frame(translation)
    assert frame["self_check"] == {"p_yes": 0.3, "version": SELF_CHECK_PROMPT_VERSION, "threshold": 0.6,
                                   "passed": False}
    assert "The model's own check still doubts this text (0.30, under 0.60)" in frame["message"]
    assert frame["message"].startswith("Re-run in full precision")  # not "Verified"
    shown = translation_quality_display(translation=translation)["self_check"]
    assert shown["state"] == "doubted" and shown["summary"].startswith(
        "Doubted by the model's own check: 30 % that it says the same as the diagnosis (under 60 %).")
    client.force_login(clinician)
    for path in (f"/translations/{row.request_id}/", f"/translations/{row.request_id}/handout/"):
        html = client.get(path).content.decode()
        assert 'id="self-check" class="safety" data-state="doubted"' in html, path
        assert "Read it against the diagnosis before giving it to the patient" in html, path
    api = TranslationSerializer(selectors.translation_api_view(translation=translation)).data
    assert api["verified_quality"]["self_check"]["passed"] is False and api["self_check"]["threshold"] == 0.6


def test_the_rerun_holds_its_candidates_to_the_threshold_the_fast_text_was_gated_by(clinician, settings,
                                                                                   monkeypatch):
    """A site that changes its threshold between the gate and the re-run:
    the re-run reads the one stored with the translation, so "doubted"
    means the same for the fast text and the text that replaces it."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision", "sampled")
    worker = FakeEngine(answer=BETTER, logprob=-1.0, checks={BETTER: 0.8})
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    row = doubted_fast_text(clinician)
    settings.SELF_CHECK_THRESHOLD = 0.9  # 0.8 would not stop the search at this one
    done = execute.rerun_execute(translation_id=row.pk)
    assert [r["name"] for r in done.candidates] == ["full_precision"]  # 0.8 >= 0.6: good enough, stopped
    assert verification_frame(Translation.objects.get(pk=row.pk))["self_check"]["passed"] is True


async def test_a_text_checked_where_no_threshold_applies_shows_its_score_without_a_verdict(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(answer=FAST, logprob=-0.01, checks={FAST: 0.9})
    done = await translation_generate(translation=await create(clinician), engine=engine,
                                      received_ns=time.monotonic_ns())
    done.self_check_threshold = None  # e.g. finished before thresholds were stored
    assert translation_quality_payload(done)["self_check"]["passed"] is None
    shown = await database_sync_to_async(translation_quality_display)(translation=done)
    assert shown["self_check"] == {
        "state": "measured", "summary": "The model's own check: 90 % that it says the same as the diagnosis."}


def test_where_the_model_doubts_every_rewrite_the_rerun_delivers_the_diagnosis_as_written(clinician, settings,
                                                                                          monkeypatch):
    """The worker's rewrite is doubted (0.2) and so is the fast text (0.3);
    span replacement found no term to replace, so it is the input
    unchanged, which the model trusts (0.9): that is delivered, and the
    clinician is told why."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision", "span_replacement")
    worker = FakeEngine(answer=BETTER, logprob=-0.01, checks={BETTER: 0.2, KNEE: 0.9})
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    row = doubted_fast_text(clinician)
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.output_text == KNEE and done.candidate == "span_replacement" and done.self_check == pytest.approx(0.9)
    assert [(r["name"], r["self_check"]) for r in done.candidates] == [("full_precision", 0.2),
                                                                       ("span_replacement", 0.9)]
    assert done.change_note.startswith("The diagnosis text as written: the model's own check doubted every "
                                       "plain-words version")
    frame = verification_frame(Translation.objects.get(pk=row.pk))
    assert frame["text"] == KNEE and frame["self_check"]["passed"] is True and "still doubts" not in frame["message"]

    settings.SELF_CHECK_COPY = "off"  # a site that wants the rewrite, marked as doubted
    row = doubted_fast_text(clinician)
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.output_text == BETTER and done.self_check == pytest.approx(0.2)
    assert "still doubts this text (0.20, under 0.60)" in verification_frame(Translation.objects.get(pk=row.pk))["message"]


def test_where_the_model_still_doubts_the_text_the_rerun_would_keep_it_delivers_the_diagnosis_as_written(
        clinician, client, settings, monkeypatch):
    """No candidate is trusted (0.2) and the fast text is doubted (0.3):
    by default the clinician gets the diagnosis as written, told why, with
    the doubted text kept as the fast draft to read; the candidates the
    worker tried are all recorded."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    worker = FakeEngine(answer=BETTER, logprob=-0.01, checks={BETTER: 0.2})
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    row = doubted_fast_text(clinician)
    done = execute.rerun_execute(translation_id=row.pk)
    assert (done.output_text, done.candidate, done.self_check) == (KNEE, candidates.AS_WRITTEN, None)
    assert [(r["name"], r["self_check"]) for r in done.candidates] == [("full_precision", 0.2), ("as_written", None)]
    assert done.change_note.startswith("The diagnosis text as written: the model's own check doubted the "
                                       "plain-words version; explain it to the patient yourself")
    translation = Translation.objects.get(pk=row.pk)
    assert translation.output_text == FAST  # the fast text is kept beside it
    frame = verification_frame(translation)
    assert frame["text"] == KNEE and frame["candidate"] == "as_written"
    assert frame["safety"]["passed"] is True and frame["faithfulness"]["passed"] is True
    assert "still doubts" not in frame["message"] and "explain it to the patient yourself" in frame["message"]
    assert frame["message"].startswith("Re-run in full precision")  # not "Verified": no model wrote or checked it
    client.force_login(clinician)
    page = client.get(f"/translations/{row.request_id}/").content.decode()
    assert KNEE in page and FAST in page  # the doubted text stays readable as the fast draft
    handout = client.get(f"/translations/{row.request_id}/handout/").content.decode()
    printed = handout[handout.index('<article id="handout"'):handout.index("</article>")]
    assert KNEE in printed and FAST not in printed  # the patient's copy has only the diagnosis as written
    assert f'<p id="doubted-draft-text" lang="en">{FAST}</p>' in handout  # the clinician may still judge it
    api = TranslationSerializer(selectors.translation_api_view(translation=translation)).data
    assert api["verified_text"] == KNEE


def test_a_text_whose_check_did_not_run_is_not_replaced_by_the_diagnosis_as_written(clinician, settings,
                                                                                   monkeypatch):
    """Nothing says the kept text is wrong where the worker's check of it
    failed: it is delivered (unscored), not the copy."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    worker = FakeEngine(answer=BETTER, logprob=-0.01)
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    monkeypatch.setattr(execute, "_self_check_bounded", _check_timed_out)
    row = doubted_fast_text(clinician)
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.output_text == BETTER and done.candidate == "full_precision" and done.self_check is None


async def _check_timed_out(*args, **kwargs):
    """What :func:`clinical.rerun.execute._self_check_bounded` returns when
    the check runs past the re-run's time budget or its engine fails."""
    return None


def test_a_reruns_request_id_tags_its_own_log_lines_and_not_the_workers_next_ones(clinician, settings,
                                                                                monkeypatch, caplog):
    """A solo-pool worker runs every task in one thread: the re-run's id
    must not stay on the thread's log context for the next task's lines."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: FakeEngine(answer=BETTER, checks={BETTER: 0.8}))
    row = doubted_fast_text(clinician)
    with caplog.at_level(logging.INFO):
        execute.rerun_execute(translation_id=row.pk)
        logging.getLogger("celery.worker.strategy").info("Task received")  # the next task's first line
    completed = next(r for r in caplog.records if r.getMessage().startswith("re-run completed"))
    assert completed.request_id == str(row.request_id)
    assert caplog.records[-1].request_id == "-"
