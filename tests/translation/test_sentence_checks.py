"""A note of several sentences is checked sentence by sentence
(clinical/translation/checking.py, clinical/translation/generation.py)
and re-run sentence by sentence (clinical/rerun/sentences.py,
clinical/rerun/execute.py): only the sentences the model's own check
doubted change, so one doubted sentence no longer turns a whole note into
the diagnosis as written."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from channels.db import database_sync_to_async

from clinical.api.serializers import TranslationSerializer
from clinical.models import AuditEvent, Translation
from clinical.quality.display import self_check_display
from clinical.quality.measure import translation_quality_payload
from clinical.rerun import candidates, execute
from clinical.translation import admission, finish, selectors
from clinical.translation.generation import translation_generate
from clinical.web.frames import verification_frame
from inference.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = "Mild left knee effusion. No fracture is seen. She is well."
SENTENCES = ["Mild left knee effusion.", "No fracture is seen.", "She is well."]
FAST = ["There is a little extra fluid in your left knee.", "The bone is broken.", "She is doing well."]
BETTER = "No broken bone was seen."


def echo(sentence: str) -> str:
    return "Plain words: " + sentence


async def test_a_note_is_checked_sentence_by_sentence_and_gated_by_its_most_doubted_sentence(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(logprob=-0.01, checks={echo(SENTENCES[1]): 0.3}, check_all=0.9)
    row = await database_sync_to_async(admission.translation_create)(user=clinician, text=NOTE)
    done = await translation_generate(translation=row, engine=engine, received_ns=time.monotonic_ns())
    assert done.output_text == " ".join(echo(s) for s in SENTENCES)
    assert [(c["input"], c["answer"], c["cut"]) for c in done.sentence_checks] == [
        (s, echo(s), False) for s in SENTENCES]
    assert [c["p_yes"] for c in done.sentence_checks] == pytest.approx([0.9, 0.3, 0.9])
    assert done.self_check == pytest.approx(0.3) and done.rerun_reason == "low_self_check"
    assert done.verification == Translation.Verification.PENDING
    request_id = str(row.request_id)
    assert engine.admitted[-3:] == [f"{request_id}-check-{n}" for n in (1, 2, 3)]  # no whole-note check
    event = await database_sync_to_async(AuditEvent.objects.get)(event_type="translation")
    assert event.self_check == pytest.approx(0.3)
    payload = translation_quality_payload(done)["self_check"]
    assert payload["p_yes"] == 0.3 and payload["sentences"] == [0.9, 0.3, 0.9] and payload["passed"] is False
    assert self_check_display(self_check=payload)["summary"].endswith(
        "Checked sentence by sentence, the lowest shown: sentence 2 of 3 is doubted.")


async def test_a_note_whose_sentences_the_model_trusts_is_not_rerun(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    engine = FakeEngine(logprob=-1.5, check_all=0.9)  # confidence 0.22: only the check stands for it
    row = await database_sync_to_async(admission.translation_create)(user=clinician, text=NOTE)
    done = await translation_generate(translation=row, engine=engine, received_ns=time.monotonic_ns())
    assert done.self_check == pytest.approx(0.9) and done.rerun_reason == ""
    assert done.verification == Translation.Verification.NOT_NEEDED


def doubted_note(user, p_yes=(0.9, 0.3, 0.8)) -> Translation:
    """A finished translation of NOTE streamed as FAST, whose second
    sentence the model's check doubted, as the web process leaves it."""
    row = admission.translation_create(user=user, text=NOTE)
    checks = [{"input": s, "answer": f, "cut": False, "p_yes": p} for s, f, p in zip(SENTENCES, FAST, p_yes)]
    return finish.translation_finish(
        translation_id=row.pk, status=Translation.Status.COMPLETED, output_text=" ".join(FAST),
        figures=finish.TranslationFigures(tokens_out=30, confidence=0.97, self_check=min(p_yes),
                                          sentence_checks=checks))


def test_a_note_reruns_only_its_doubted_sentence_and_keeps_the_others_as_streamed(clinician, settings,
                                                                                  monkeypatch):
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    worker = FakeEngine(answer=BETTER, logprob=-0.01, checks={BETTER: 0.85})
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    row = doubted_note(clinician)
    assert row.rerun_reason.split(",") == ["low_self_check", "safety_failed"]  # "fracture" is missing
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.output_text == f"{FAST[0]} {BETTER} {FAST[2]}"
    assert done.candidate == "sentences" and done.self_check == pytest.approx(0.8)  # the lowest of the three
    # One sentence was generated, on its own: the worker's requests are that sentence's.
    assert all("-s2-" in request_id for request_id in worker.admitted)
    assert [(r.get("name"), r.get("kept"), r["sentence"]) for r in done.candidates] == [
        ("full_precision", None, 2), (None, "full_precision", 2)]
    assert done.change_note == ("Sentence 2 of 3 was re-run (the model's own check doubted sentence 2; a safety or "
                                "faithfulness check failed on sentence 2): sentence 2 was rewritten (Written again "
                                "from the same instructions in full precision). The other sentences are as first "
                                "written.")
    frame = verification_frame(Translation.objects.get(pk=row.pk))
    assert frame["text"] == done.output_text and frame["message"].startswith("Verified in full precision")
    assert frame["sentences_as_written"] == []


def test_a_note_sentence_the_model_still_doubts_is_given_as_written_and_the_rest_stays_plain(
        clinician, client, settings, monkeypatch):
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    worker = FakeEngine(answer=BETTER, logprob=-0.01, checks={BETTER: 0.2})
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    row = doubted_note(clinician)
    client.force_login(clinician)
    page = client.get(f"/translations/{row.request_id}/").content.decode()
    assert "sentence 2 of 3 is doubted" in page  # while it waits: which sentence the model doubted
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.output_text == f"{FAST[0]} {SENTENCES[1]} {FAST[2]}"  # not the whole note as written
    assert [(r.get("name"), r.get("kept")) for r in done.candidates] == [
        ("full_precision", None), (candidates.AS_WRITTEN, None), (None, candidates.AS_WRITTEN)]
    assert done.change_note.endswith("sentence 2 is given as written, explain it to the patient yourself. "
                                     "The other sentences are as first written.")
    translation = Translation.objects.get(pk=row.pk)
    frame = verification_frame(translation)
    assert frame["message"].startswith("Re-run in full precision")  # no model wrote or checked sentence 2
    assert frame["sentences_as_written"] == [2]
    assert "explain it to the patient yourself" in frame["message"]
    page = client.get(f"/translations/{row.request_id}/").content.decode()
    assert done.output_text in page and " ".join(FAST) in page  # the streamed draft stays readable
    api = TranslationSerializer(selectors.translation_api_view(translation=translation)).data
    assert api["verified_text"] == done.output_text
    handout = client.get(f"/translations/{row.request_id}/handout/").content.decode()
    printed = handout[handout.index('<article id="handout"'):handout.index("</article>")]
    assert done.output_text in printed and FAST[1] not in printed  # the patient's copy: sentence 2 as written
    assert f'<li>Sentence 2: <span class="doubted-draft-text" lang="en">{FAST[1]}</span></li>' in handout


def test_a_note_sentence_the_model_trusts_but_a_check_fails_is_rerun_on_its_own(clinician, settings,
                                                                                monkeypatch):
    """As a one-sentence translation would be: sentence 2's text leaves out
    "fracture" (the safety check fails on it), though its P(yes) passed."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    worker = FakeEngine(answer="No broken bone (fracture) is seen.", logprob=-0.01, check_all=0.9)
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    row = doubted_note(clinician, p_yes=(0.9, 0.7, 0.8))
    assert row.rerun_reason == "safety_failed"
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.output_text == f"{FAST[0]} No broken bone (fracture) is seen. {FAST[2]}"
    assert done.candidate == "sentences" and done.safety_passed
    assert done.change_note.startswith("Sentence 2 of 3 was re-run (a safety or faithfulness check failed on "
                                       "sentence 2): sentence 2 was rewritten")  # not "doubted": it was not
    assert all("-s2-" in request_id for request_id in worker.admitted)


def test_a_note_gated_by_its_confidence_alone_is_rerun_whole(clinician, settings, monkeypatch):
    """No sentence was checked (a busy CPU) and each passes the checks: a
    sentence's confidence is not kept, so the note's candidates are
    generated for the whole note, as before."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    worker = FakeEngine(logprob=-0.01, check_all=0.9)
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    row = admission.translation_create(user=clinician, text=NOTE)
    checks = [{"input": s, "answer": echo(s), "cut": False, "p_yes": None} for s in SENTENCES]
    row = finish.translation_finish(
        translation_id=row.pk, status=Translation.Status.COMPLETED, output_text=" ".join(echo(s) for s in SENTENCES),
        figures=finish.TranslationFigures(tokens_out=20, confidence=0.2, sentence_checks=checks))
    assert row.rerun_reason == "low_confidence"
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.candidate == "full_precision" and len(worker.admitted) >= 3  # one request per sentence
    assert not any(re.search(r"-s\d+-", request_id) for request_id in worker.admitted)  # not sentence by sentence


def test_a_note_with_headings_keeps_each_heading_once_when_a_sentence_is_given_as_written(clinician, settings,
                                                                                         monkeypatch):
    """Streamed by the fake engine (each heading copied, the findings
    echoed), the second finding doubted: the re-run gives it as written
    after its own heading, and the first stays as streamed."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    note = "ABDOMEN : Soft , nontender .\nEXTREMITIES : No edema ."
    fast = FakeEngine(logprob=-0.01, checks={"EXTREMITIES : Plain words: No edema .": 0.3}, check_all=0.9)
    row = admission.translation_create(user=clinician, text=note)
    streamed = asyncio.run(translation_generate(translation=row, engine=fast, received_ns=time.monotonic_ns()))
    assert streamed.output_text == "ABDOMEN : Plain words: Soft , nontender .\nEXTREMITIES : Plain words: No edema ."
    assert [c["answer"] for c in streamed.sentence_checks] == ["Plain words: Soft , nontender .",
                                                               "Plain words: No edema ."]
    assert [c["p_yes"] for c in streamed.sentence_checks] == pytest.approx([0.9, 0.3])
    worker = FakeEngine(answer="No swelling.", logprob=-0.01, check_all=0.2)
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.output_text == "ABDOMEN : Plain words: Soft , nontender .\nEXTREMITIES : No edema ."
    assert done.change_note.startswith("Sentence 2 of 2 was re-run (the model's own check doubted sentence 2): "
                                       "sentence 2 is given as written")


def test_a_doubted_sentence_the_time_budget_does_not_reach_is_given_as_written(clinician, settings, monkeypatch):
    """Sentence 1 is re-run; sentence 2's engine request hangs until the
    budget ends: it is given as written (it is doubted), not left doubted."""
    settings.SELF_CHECK_THRESHOLD = 0.6
    settings.RERUN_CANDIDATES = ("full_precision",)
    settings.RERUN_SOFT_TIME_LIMIT_S = 2
    knee = "There is a small amount of extra fluid in your left knee."
    worker = FakeEngine(answer=knee, logprob=-0.01, check_all=0.9, hang_on="fracture")
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: worker)
    row = doubted_note(clinician, p_yes=(0.3, 0.3, 0.9))
    done = execute.rerun_execute(translation_id=row.pk)
    assert done.output_text == f"{knee} {SENTENCES[1]} {FAST[2]}"
    assert {"sentence": 2, "outcome": "timeout"} in done.candidates
    assert [(r["sentence"], r["kept"]) for r in done.candidates if "kept" in r] == [
        (1, "full_precision"), (2, candidates.AS_WRITTEN)]
