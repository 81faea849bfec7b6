"""The re-run's candidates (clinical/rerun/candidates/): span replacement
on the copied input, and the rule that picks the candidate that replaces the
fast text, on real texts measured by the real safety and faithfulness
checks; the note that tells the clinician why the text changed; and the
re-run recording its candidates without text in the audit log."""

from __future__ import annotations

import math

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

from clinical.models import AuditEvent, Rerun, Translation
from clinical.quality.gate import DEFAULT_THRESHOLD
from clinical.rerun import candidates, execute
from clinical.rerun.change_note import rerun_change_note
from clinical.translation import admission, finish
from clinical.web.frames import verification_frame
from inference.fake_engine import FakeEngine

KNEE = "Mild left knee effusion."
KEEPS_LEFT = "There is a little extra fluid in your left knee."
DROPS_LEFT = "There is a little extra fluid in your knee."
INVENTS_BRAIN = "There is a little extra fluid in your knee and your brain."
DOSE_NOTE = "No pericardial effusion. Metoprolol 25 mg daily for left ventricular hypertrophy."


def measured(name: str, text: str, confidence_logprob: float = -0.1, *, input_text: str = KNEE,
             tokens: int = 10) -> candidates.Candidate:
    translation = Translation(input_text=input_text, language="en", reading_level=6)
    return candidates.candidate_measure(translation=translation, name=name, text=text,
                                        logprobs=[confidence_logprob] * tokens, ms=1.0, prompt_version="test")


# -- selection ----------------------------------------------------------------

def test_a_candidate_that_keeps_the_side_is_chosen_over_a_more_confident_one_that_drops_it():
    drops = measured(candidates.FULL_PRECISION, DROPS_LEFT, -0.01)
    keeps = measured(candidates.SAMPLED, KEEPS_LEFT, -0.7)
    assert drops.quality.safety.missing_dicts() == [{"kind": "laterality", "text": "left"}]
    assert keeps.passed and not drops.passed and drops.confidence > keeps.confidence
    assert candidates.candidate_select([drops, keeps], reading_level=6) is keeps


def test_a_candidate_that_keeps_the_dose_is_chosen_over_one_that_loses_it():
    loses = measured(candidates.FULL_PRECISION, "You have no fluid around your heart. Take metoprolol every day "
                     "because the left side of your heart is thick.", -0.05, input_text=DOSE_NOTE)
    keeps = measured(candidates.RETRIEVED_EXAMPLES, "No fluid around the heart. Metoprolol 25 mg daily for a "
                     "thick wall of the left side of the heart.", -0.4, input_text=DOSE_NOTE)
    assert {"kind": "dose", "text": "25 mg"} in loses.quality.safety.missing_dicts()
    assert candidates.candidate_select([loses, keeps], reading_level=6) is keeps


def test_among_passing_candidates_the_more_confident_model_text_wins_over_the_copied_sentence():
    copied = measured(candidates.SPAN_REPLACEMENT, "Mild left knee fluid buildup.", -0.01)
    low = measured(candidates.RETRIEVED_EXAMPLES, "A little fluid in the left knee.", -0.9)
    high = measured(candidates.SAMPLED, KEEPS_LEFT, -0.3)
    assert all(c.passed for c in (copied, low, high))
    assert candidates.candidate_select([copied, low, high], reading_level=6) is high
    assert candidates.candidate_select([copied, low], reading_level=6) is low  # the copy is the safety net


def test_the_input_returned_unchanged_ranks_below_a_copy_with_plain_words():
    unchanged = measured(candidates.RETRIEVED_EXAMPLES, "mild left knee effusion .", -0.01)
    plain = measured(candidates.SPAN_REPLACEMENT, "Mild left knee fluid buildup.", -0.5)
    assert unchanged.passed and candidates.candidate_tier(unchanged) == 0 and candidates.candidate_tier(plain) == 1
    assert candidates.candidate_select([unchanged, plain], reading_level=6) is plain


def test_a_confidence_tie_goes_to_the_text_at_the_reading_level_asked_for():
    hard = measured(candidates.FULL_PRECISION, "Mild accumulation of synovial fluid within the left knee articulation.",
                    -0.2)
    easy = measured(candidates.SAMPLED, KEEPS_LEFT, -0.2)
    assert hard.quality.readability.output_fkgl > 6 >= easy.quality.readability.output_fkgl
    assert candidates.candidate_select([hard, easy], reading_level=6) is easy


def test_when_none_passes_the_one_with_the_fewest_failed_checks_is_kept():
    both_fail = measured(candidates.FULL_PRECISION, INVENTS_BRAIN, -0.01)  # drops left, adds brain
    one_fails = measured(candidates.SAMPLED, "There is a little extra fluid in your left knee and your brain.", -0.9)
    assert not both_fail.quality.safety.passed and not both_fail.quality.faithfulness.passed
    assert one_fails.quality.safety.passed and not one_fails.quality.faithfulness.passed
    assert candidates.candidate_select([both_fail, one_fails], reading_level=6) is one_fails


def test_early_stop_needs_both_checks_and_the_gates_confidence(settings):
    settings.CONFIDENCE_THRESHOLD = None
    confident = measured(candidates.RETRIEVED_EXAMPLES, KEEPS_LEFT, -0.01)
    unsure = measured(candidates.RETRIEVED_EXAMPLES, KEEPS_LEFT, -1.0)
    failing = measured(candidates.FULL_PRECISION, DROPS_LEFT, -0.01)
    assert confident.confidence >= DEFAULT_THRESHOLD > unsure.confidence
    assert candidates.candidate_good_enough(confident, model_name="not-calibrated.gguf")
    assert not candidates.candidate_good_enough(unsure, model_name="not-calibrated.gguf")
    assert not candidates.candidate_good_enough(failing, model_name="not-calibrated.gguf")


# -- a passing fast text is the incumbent ---------------------------------------

def test_a_question_made_of_a_finding_ranks_with_the_input_unchanged():
    finding = "UROLOGICAL : Frequency ."
    question = measured(candidates.RETRIEVED_EXAMPLES, "how often does the patient urinate?", -0.01,
                        input_text=finding)
    plain = measured(candidates.FULL_PRECISION, "URINARY : Needs to pass urine often.", -0.9, input_text=finding)
    assert question.passed and candidates.candidate_tier(question) == 0
    assert candidates.candidate_select([question, plain], reading_level=6) is plain
    # the fast text stands against it, however confident
    incumbent = candidates.Incumbent(confidence=0.30, margin=0.0)
    assert candidates.candidate_select([question], reading_level=6, incumbent=incumbent) is None
    # a question the input asks may stay one
    asked = measured(candidates.SAMPLED, "Is the pain worse at night?", -0.1, input_text="Nocturnal pain?")
    assert candidates.candidate_tier(asked) == 2


def test_a_passing_fast_text_stands_against_a_candidate_that_is_not_clearly_more_confident():
    incumbent = candidates.Incumbent(confidence=0.50, margin=0.05)
    slightly = measured(candidates.RETRIEVED_EXAMPLES, "A little fluid in the left knee.", math.log(0.53))
    clearly = measured(candidates.SAMPLED, KEEPS_LEFT, math.log(0.60))
    assert slightly.passed and clearly.passed
    assert candidates.candidate_select([slightly], reading_level=6, incumbent=incumbent) is None
    assert candidates.candidate_select([slightly, clearly], reading_level=6, incumbent=incumbent) is clearly
    # without an incumbent (the fast text failed a check) the more confident text wins as before
    assert candidates.candidate_select([slightly], reading_level=6) is slightly


def test_a_passing_fast_text_is_never_replaced_by_a_failing_or_copied_candidate():
    incumbent = candidates.Incumbent(confidence=0.30, margin=0.0)
    failing = measured(candidates.RETRIEVED_EXAMPLES, DROPS_LEFT, -0.01)
    copied = measured(candidates.SPAN_REPLACEMENT, "Mild left knee fluid buildup.", -0.01)
    unchanged = measured(candidates.SAMPLED, "mild left knee effusion .", -0.01)
    assert candidates.candidate_select([failing, copied, unchanged], reading_level=6, incumbent=incumbent) is None


def test_the_full_precision_rerun_may_always_replace_the_fast_text():
    incumbent = candidates.Incumbent(confidence=0.9, margin=math.inf)
    full = measured(candidates.FULL_PRECISION, KEEPS_LEFT, math.log(0.4))
    assert candidates.candidate_select([full], reading_level=6, incumbent=incumbent) is full


def test_early_stop_waits_for_a_candidate_that_may_replace_the_fast_text(settings):
    settings.CONFIDENCE_THRESHOLD = None
    confident = measured(candidates.RETRIEVED_EXAMPLES, KEEPS_LEFT, -0.01)
    assert candidates.candidate_good_enough(confident, model_name="x.gguf")
    assert not candidates.candidate_good_enough(confident, model_name="x.gguf",
                                                incumbent=candidates.Incumbent(confidence=0.99, margin=0.05))


def test_only_a_fast_text_rerun_for_low_confidence_alone_is_an_incumbent(settings):
    settings.RERUN_REPLACE_MARGIN = 0.1
    low = Translation(input_text=KNEE, output_text=KEEPS_LEFT, rerun_reason="low_confidence", confidence=0.4)
    failed = Translation(input_text=KNEE, output_text=DROPS_LEFT, rerun_reason="low_confidence,safety_failed",
                         confidence=0.4)
    assert candidates.incumbent_for(low) == candidates.Incumbent(confidence=0.4, margin=0.1)
    assert candidates.incumbent_for(failed) is None


# -- the model's own check ranks the candidates --------------------------------

def checked(name: str, text: str, p_yes: float | None, confidence_logprob: float = -0.1) -> candidates.Candidate:
    translation = Translation(input_text=KNEE, language="en", reading_level=6)
    return candidates.candidate_measure(translation=translation, name=name, text=text,
                                        logprobs=[confidence_logprob] * 10, ms=1.0, prompt_version="test",
                                        self_check=p_yes)


def test_among_passing_candidates_the_one_the_model_checks_as_faithful_wins_over_a_more_confident_one():
    doubted = checked(candidates.RETRIEVED_EXAMPLES, "A little fluid in the left knee.", 0.40, -0.01)
    trusted = checked(candidates.SAMPLED, KEEPS_LEFT, 0.90, -0.9)
    assert doubted.passed and trusted.passed and doubted.confidence > trusted.confidence
    assert candidates.candidate_select([doubted, trusted], reading_level=6) is trusted
    # a candidate the check did not score: the confidence ranks them all, as before
    unscored = checked(candidates.SAMPLED, KEEPS_LEFT, None, -0.9)
    assert candidates.candidate_select([doubted, unscored], reading_level=6) is doubted
    # the checks still come first: a failing text loses however sure the model is of it
    failing = checked(candidates.FULL_PRECISION, DROPS_LEFT, 0.99, -0.01)
    assert candidates.candidate_select([failing, doubted], reading_level=6) is doubted


def test_early_stop_reads_the_self_check_threshold_where_the_candidate_was_checked(settings):
    settings.CONFIDENCE_THRESHOLD = 0.99  # no candidate here reaches it
    trusted = checked(candidates.RETRIEVED_EXAMPLES, KEEPS_LEFT, 0.80)
    doubted = checked(candidates.RETRIEVED_EXAMPLES, KEEPS_LEFT, 0.50)
    assert candidates.candidate_good_enough(trusted, model_name="m.gguf", self_check_threshold=0.57)
    assert not candidates.candidate_good_enough(doubted, model_name="m.gguf", self_check_threshold=0.57)
    assert not candidates.candidate_good_enough(trusted, model_name="m.gguf")  # no threshold: the confidence
    failing = checked(candidates.RETRIEVED_EXAMPLES, DROPS_LEFT, 0.95)
    assert not candidates.candidate_good_enough(failing, model_name="m.gguf", self_check_threshold=0.57)


def test_a_fast_text_rerun_for_its_self_check_alone_stands_unless_a_candidate_checks_better(settings):
    settings.RERUN_REPLACE_MARGIN = 0.0
    row = Translation(input_text=KNEE, output_text=KEEPS_LEFT, rerun_reason="low_self_check", confidence=0.95,
                      self_check=0.45)
    incumbent = candidates.incumbent_for(row)
    assert incumbent == candidates.Incumbent(confidence=0.95, margin=0.0, self_check=0.45)
    lower = checked(candidates.SAMPLED, "A little fluid in the left knee.", 0.40, -0.01)
    higher = checked(candidates.RETRIEVED_EXAMPLES, "Some fluid in the left knee.", 0.70, -0.9)
    assert candidates.candidate_select([lower], reading_level=6, incumbent=incumbent) is None
    assert candidates.candidate_select([lower, higher], reading_level=6, incumbent=incumbent) is higher
    failed = Translation(input_text=KNEE, output_text=DROPS_LEFT, rerun_reason="low_self_check,safety_failed",
                         self_check=0.2)
    assert candidates.incumbent_for(failed) is None


def test_the_candidate_record_holds_checks_and_figures_but_no_text():
    record = measured(candidates.FULL_PRECISION, INVENTS_BRAIN, -0.1).record()
    assert record["name"] == "full_precision" and record["tokens"] == 10
    assert record["safety_missing"] == {"laterality": 1} and record["faithfulness_flags"] == {"body_site": 1}
    assert "brain" not in str(record) and "knee" not in str(record)


def test_unknown_candidate_names_are_refused(settings):
    settings.RERUN_CANDIDATES = ("full_precision", "beam_search")
    with pytest.raises(ImproperlyConfigured, match="beam_search"):
        candidates.candidate_names()


def test_the_sampled_candidate_has_a_seed_of_its_own_from_the_input_and_its_prompt():
    messages = [{"role": "user", "content": KNEE}]
    translation = Translation(input_text=KNEE, language="en", reading_level=6, prompt_version="p1")
    plan = candidates.candidate_plan(translation=translation, name=candidates.SAMPLED, messages=messages)
    assert plan.params.seed == candidates.sampled_seed(translation) and 0 <= plan.params.seed < 2 ** 63
    again = Translation(input_text=KNEE, language="en", reading_level=6, prompt_version="p1")
    assert candidates.sampled_seed(again) == plan.params.seed
    assert candidates.sampled_seed(Translation(input_text=KNEE, prompt_version="p2")) != plan.params.seed
    greedy = candidates.candidate_plan(translation=translation, name=candidates.FULL_PRECISION, messages=messages)
    assert greedy.params.seed is None and greedy.params.temperature == 0


def test_the_full_precision_rerun_of_a_sentence_with_a_heading_keeps_the_heading():
    from inference.prompts import ClusterPrompt

    translation = Translation(input_text="NEUROLOGIC : I can not assess at this time.", language="en",
                              reading_level=6, prompt_version=ClusterPrompt(24, 8, 0, headings=True).version)
    plan = candidates.candidate_plan(translation=translation, name=candidates.FULL_PRECISION)
    assert plan.messages == [] and [part.prefix for part in plan.parts] == ["NEUROLOGIC : "]
    assert plan.parts[0].messages[-1]["content"] == "I can not assess at this time."
    retrieved = candidates.candidate_plan(translation=translation, name=candidates.RETRIEVED_EXAMPLES)
    assert [part.prefix for part in retrieved.parts] == ["NEUROLOGIC : "]
    assert retrieved.parts[0].messages[-1]["content"] == "I can not assess at this time."
    span = candidates.candidate_plan(translation=translation, name=candidates.SPAN_REPLACEMENT)
    assert span.messages[-1]["content"] == "I can not assess at this time."  # the heading is not rewritten


# -- span replacement -----------------------------------------------------------

def test_span_replacement_replaces_hard_terms_and_keeps_the_facts():
    answer = ("pericardial effusion => fluid around the heart\n"
              "25 mg => a small dose\n"                       # a number: refused
              "left ventricular hypertrophy => a big heart\n"  # a side: refused
              "Metoprolol => a heart pill\n"                   # a drug: refused
              "daily => every day\n"                           # an easy word: refused
              "hypertrophy => thickening of the liver")        # adds a body site: undone by the check
    text, replaced = candidates.span_candidate_text(text=DOSE_NOTE, answer=answer)
    assert text.startswith("No fluid around the heart. Metoprolol 25 mg daily for left ventricular ")
    assert replaced[0] == ("pericardial effusion", "fluid around the heart")
    assert all("liver" not in plain for _, plain in replaced) and text.endswith(" hypertrophy.")
    result = measured(candidates.SPAN_REPLACEMENT, text, input_text=DOSE_NOTE)
    assert result.passed and candidates.candidate_tier(result) == 1


def test_span_replacement_expands_an_abbreviation_only_into_words_that_spell_it():
    answer = "CC => Communication\naphasia => trouble speaking"
    text, replaced = candidates.span_candidate_text(text="CC : Stable expressive aphasia .", answer=answer)
    assert text == "CC : Stable expressive trouble speaking ." and replaced == [("aphasia", "trouble speaking")]
    text, _ = candidates.span_candidate_text(text="CC : Stable expressive aphasia .",
                                             answer="CC => chief complaint\nCHF => congestive heart failure")
    assert text.startswith("Chief complaint : Stable")
    assert candidates.span_lines_parse("CHFs => congestive heart failures\nMI => heart attack") == [
        ("CHFs", "congestive heart failures")]


def test_span_replacement_keeps_an_easy_word_at_the_edge_of_a_term():
    # "stable" and "needle" are words a patient reads; a replacement may not drop them
    assert candidates.span_lines_parse("Stable expressive aphasia => a type of language disorder\n"
                                       "needle puncture mark => puncture mark\n"
                                       "Bowel sounds => sounds from the gut\n"
                                       "Mild cardiomegaly => a mildly enlarged heart") == [
        ("Bowel sounds", "sounds from the gut"), ("Mild cardiomegaly", "a mildly enlarged heart")]
    text, _ = candidates.span_candidate_text(text="CC : Stable expressive aphasia .",
                                             answer="Stable expressive aphasia => a type of language disorder")
    assert text == "CC : Stable expressive aphasia (loss of expressive speech) ."  # explained in the vocabulary's words


def test_span_replacement_keeps_a_term_the_model_missed_and_explains_it_by_its_hpo_layperson_synonym():
    text, replaced = candidates.span_candidate_text(text="Cardiomegaly .", answer="I cannot help with that.")
    assert replaced == [("Cardiomegaly", "Cardiomegaly (enlarged heart)")]
    assert text == "Cardiomegaly (enlarged heart) ."
    # a model's words the vocabulary does not give are undone by the check; the vocabulary's stand instead
    text, _ = candidates.span_candidate_text(text="Chest x-ray shows a small left pleural effusion.",
                                             answer="pleural effusion => fluid in the lung")
    assert text == "Chest x-ray shows a small left pleural effusion (fluid around lungs)."


def test_span_replacement_keeps_the_article_in_front_of_the_plain_words_grammatical():
    text, _ = candidates.span_replacements_apply(text="Removal of an adrenal adenoma and a edematous lipoma .",
                                                 pairs=[("adrenal adenoma", "a tumor of the adrenal gland"),
                                                        ("edematous lipoma", "swollen fatty lump")])
    assert text == "Removal of a tumor of the adrenal gland and a swollen fatty lump ."
    text, _ = candidates.span_replacements_apply(text="She came for her generalized malaise .",
                                                 pairs=[("generalized malaise", "a feeling of being unwell")])
    assert text == "She came for her feeling of being unwell ."


def test_span_replacement_drops_the_plain_words_article_after_a_modifier():
    # the term stood bare after an adjective: "obvious a growth" is not English
    text, _ = candidates.span_replacements_apply(text="No obvious lymphadenopathy is noted to the neck .",
                                                 pairs=[("lymphadenopathy", "a swollen lymph node")])
    assert text == "No obvious swollen lymph node is noted to the neck ."
    text, _ = candidates.span_replacements_apply(text="Mild cardiomegaly . CT shows cardiomegaly .",
                                                 pairs=[("cardiomegaly", "an enlarged heart")])
    assert text == "Mild enlarged heart . CT shows cardiomegaly ."
    # after a verb the article stays
    text, _ = candidates.span_replacements_apply(text="CT shows cardiomegaly .",
                                                 pairs=[("cardiomegaly", "an enlarged heart")])
    assert text == "CT shows an enlarged heart ."


# -- the clinician's note ---------------------------------------------------------

def test_the_note_says_which_candidate_replaced_the_text_and_what_the_first_text_lost():
    translation = Translation(input_text=KNEE, output_text=DROPS_LEFT, rerun_reason="safety_failed",
                              safety_missing=[{"kind": "laterality", "text": "left"}])
    rerun = Rerun(translation=translation, candidate=candidates.SPAN_REPLACEMENT,
                  output_text="Mild left knee fluid buildup.", safety_passed=True, faithfulness_passed=True)
    assert rerun_change_note(translation=translation, rerun=rerun) == (
        "Rewritten from the original sentence with plain words for the hard terms: the first text left out 'left'.")


def test_the_note_asks_for_review_when_no_candidate_passed():
    translation = Translation(input_text=KNEE, output_text=DROPS_LEFT, rerun_reason="low_confidence,safety_failed",
                              confidence=0.41, safety_missing=[{"kind": "laterality", "text": "left"}])
    rerun = Rerun(translation=translation, candidate=candidates.FULL_PRECISION, output_text=DROPS_LEFT,
                  safety_passed=False, faithfulness_passed=True)
    note = rerun_change_note(translation=translation, rerun=rerun)
    assert note.startswith("Written again from the same instructions in full precision: the first text left out "
                           "'left' and was written with low confidence (0.41).")
    assert "same text as the first one" in note and "No candidate passed both checks" in note


def test_the_note_says_the_first_text_stands_when_it_was_kept():
    translation = Translation(input_text=KNEE, output_text=KEEPS_LEFT, rerun_reason="low_confidence",
                              confidence=0.41)
    rerun = Rerun(translation=translation, candidate=candidates.FAST_TEXT, output_text=KEEPS_LEFT,
                  safety_passed=True, faithfulness_passed=True)
    assert rerun_change_note(translation=translation, rerun=rerun) == (
        "The first text stands: it passed both checks and no re-written text was clearly better "
        "(it was written with confidence 0.41).")


@pytest.mark.django_db(transaction=True)
def test_a_low_confidence_rerun_keeps_the_passing_fast_text_when_no_candidate_is_clearly_better(
        clinician, settings, monkeypatch):
    """Only candidates from other messages are tried (no full precision),
    and the engine answers them with a passing text no more confident than
    the fast one: the fast text stands, with its own confidence, and the
    clinician is told why."""
    settings.RERUN_CANDIDATES = ("sampled",)
    settings.RERUN_REPLACE_MARGIN = 0.05
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: FakeEngine(answer="Some fluid in the left knee.",
                                                                       logprob=math.log(0.42)))
    row = admission.translation_create(user=clinician, text=KNEE)
    row = finish.translation_finish(translation_id=row.pk, status=Translation.Status.COMPLETED,
                                      output_text=KEEPS_LEFT, figures=finish.TranslationFigures(
                                          tokens_out=9, confidence=0.40))
    assert row.rerun_reason == "low_confidence"

    done = execute.rerun_execute(translation_id=row.pk)
    assert done.candidate == candidates.FAST_TEXT and done.output_text == KEEPS_LEFT
    assert done.confidence == pytest.approx(0.40) and done.safety_passed and done.faithfulness_passed
    assert [r["name"] for r in done.candidates] == ["sampled"]
    assert done.change_note.startswith("The first text stands")

    settings.RERUN_REPLACE_MARGIN = 0.0  # now the sampled text, more confident, may replace it
    again = admission.translation_create(user=clinician, text=KNEE)
    finish.translation_finish(translation_id=again.pk, status=Translation.Status.COMPLETED, output_text=KEEPS_LEFT,
                                figures=finish.TranslationFigures(tokens_out=9, confidence=0.40))
    replaced = execute.rerun_execute(translation_id=again.pk)
    assert replaced.candidate == "sampled" and replaced.output_text == "Some fluid in the left knee."


# -- the re-run records its candidates --------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_the_rerun_stores_the_chosen_candidate_and_audits_the_tried_ones_without_text(clinician, settings,
                                                                                        monkeypatch):
    """The fake engine answers every prompt with a text that drops the side,
    so the generated candidates fail and the span replacement (the input
    copied, each hard term explained by HPO's plain words) is kept."""
    settings.RERUN_CANDIDATES = ("full_precision", "span_replacement", "sampled")
    engine = FakeEngine(answer=DROPS_LEFT, logprob=-0.01)
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: engine)
    row = admission.translation_create(user=clinician, text="Mild left cardiomegaly.")
    row = finish.translation_finish(translation_id=row.pk, status=Translation.Status.COMPLETED,
                                      output_text=DROPS_LEFT, figures=finish.TranslationFigures(
                                          tokens_out=9, confidence=0.99))
    assert "safety_failed" in row.rerun_reason

    done = execute.rerun_execute(translation_id=row.pk)
    assert done.candidate == "span_replacement" and done.output_text == "Mild left cardiomegaly (enlarged heart)."
    assert done.safety_passed and done.faithfulness_passed and done.engine_precision == "none"
    assert [r["name"] for r in done.candidates] == ["full_precision", "span_replacement", "sampled"]
    assert [r["safety_passed"] for r in done.candidates] == [False, True, False]
    assert done.change_note.startswith("Rewritten from the original sentence with plain words for the hard terms: "
                                       "the first text left out 'left'")
    row.refresh_from_db()
    frame = verification_frame(row)
    assert frame["candidate"] == "span_replacement" and done.change_note in frame["message"]
    event = AuditEvent.objects.get(event_type="verification")
    assert event.rerun_candidate == "span_replacement" and event.rerun_candidates == done.candidates
    stored = " ".join(str(getattr(event, f.attname)) for f in AuditEvent._meta.concrete_fields)
    assert "heart" not in stored and "left" not in stored


@pytest.mark.django_db(transaction=True)
def test_the_detail_page_and_the_handout_say_why_the_text_changed(clinician, client, settings, monkeypatch):
    settings.RERUN_CANDIDATES = ("full_precision", "span_replacement")
    monkeypatch.setattr(execute, "rerun_engine_get", lambda: FakeEngine(answer=DROPS_LEFT))
    row = admission.translation_create(user=clinician, text="Mild left cardiomegaly.")
    finish.translation_finish(translation_id=row.pk, status=Translation.Status.COMPLETED, output_text=DROPS_LEFT,
                                figures=finish.TranslationFigures(tokens_out=9, confidence=0.99))
    execute.rerun_execute(translation_id=row.pk)
    client.force_login(clinician)
    # the fast text, written for a knee, lost the side and the term and named a body part the note does not
    note = ("plain words for the hard terms: the first text left out &#x27;left&#x27; and &#x27;cardiomegaly&#x27; "
            "and added &#x27;knee&#x27;.")
    for name in ("translation-detail", "translation-handout"):
        page = client.get(reverse(name, args=[row.request_id]))
        assert page.status_code == 200 and note in page.content.decode(), name


def test_a_sentence_cut_at_the_token_limit_ends_in_an_ellipsis_in_the_rerun_as_in_the_stream(clinician, settings):
    """The re-run joins its parts as the stream did: after a sentence that
    stopped at the token limit, an ellipsis, not a period
    (test_a_sentence_cut_at_the_token_limit_makes_the_translation_length)."""
    settings.MAX_OUTPUT_TOKENS = 4
    row = admission.translation_create(user=clinician, text="There is 1+ pretibial edema. Stable.")
    chosen, _ = execute.rerun_candidates_run(translation=row, engine=FakeEngine(), request_prefix="cut",
                                             names=(candidates.FULL_PRECISION,))
    # "Plain words: There is" hit the limit; "Plain words: Stable." (3 tokens) stopped on its own.
    assert chosen.text == "Plain words: There is\u2026 Plain words: Stable."


def test_a_rerun_of_one_sentence_starts_with_a_capital_as_the_fast_text_does(clinician, settings):
    row = admission.translation_create(user=clinician, text=KNEE)
    chosen, _ = execute.rerun_candidates_run(translation=row, engine=FakeEngine(answer=" a little fluid in your left knee."),
                                             request_prefix="capital", names=(candidates.FULL_PRECISION,))
    assert chosen.text == "A little fluid in your left knee."


def test_where_the_model_doubts_every_rewrite_a_trusted_copy_of_the_diagnosis_is_delivered():
    """A wrong text is worse than none: with the self-check threshold, a
    doubted choice (or a doubted fast text that would stand) gives way to
    the input unchanged where the model checks that at the threshold."""
    doubted = checked(candidates.RETRIEVED_EXAMPLES, "A little fluid in the left knee.", 0.40)
    copy = checked(candidates.SPAN_REPLACEMENT, KNEE, 0.95)  # nothing replaced: the input as written
    assert candidates.candidate_tier(copy) == 0 and copy.passed
    assert candidates.candidate_select([doubted, copy], reading_level=6) is doubted  # no threshold: as before
    assert candidates.candidate_select([doubted, copy], reading_level=6, self_check_threshold=0.57) is copy
    # a rewrite the model trusts is kept: the copy explains nothing
    trusted = checked(candidates.SAMPLED, KEEPS_LEFT, 0.80)
    assert candidates.candidate_select([doubted, copy, trusted], reading_level=6,
                                       self_check_threshold=0.57) is trusted
    # a copy the model doubts too, or one it did not check, changes nothing
    for other in (checked(candidates.SPAN_REPLACEMENT, KNEE, 0.50), checked(candidates.SPAN_REPLACEMENT, KNEE, None)):
        assert candidates.candidate_select([doubted, other], reading_level=6, self_check_threshold=0.57) is doubted
    # the fast text that would stand is doubted (0.45): the trusted copy replaces it
    incumbent = candidates.Incumbent(confidence=0.95, margin=0.0, self_check=0.45)
    assert candidates.candidate_select([doubted], reading_level=6, incumbent=incumbent,
                                       self_check_threshold=0.57) is None
    assert candidates.candidate_select([doubted, copy], reading_level=6, incumbent=incumbent,
                                       self_check_threshold=0.57) is copy
    # the input with a term replaced is not the input: it does not replace a doubted text
    replaced = checked(candidates.SPAN_REPLACEMENT, "Mild left knee extra fluid.", 0.95)
    assert candidates.candidate_tier(replaced) == 1
    assert candidates.candidate_select([doubted, replaced], reading_level=6, self_check_threshold=0.57) is doubted


# -- the diagnosis as written where the model still doubts the text ---------

def model_checked(name: str, text: str, p_yes: float | None) -> candidates.Candidate:
    translation = Translation(input_text=KNEE, language="en", reading_level=6)
    return candidates.candidate_measure(translation=translation, name=name, text=text, logprobs=[-0.1] * 8,
                                        ms=1.0, prompt_version="test", self_check=p_yes)


def test_the_diagnosis_as_written_replaces_only_a_text_the_model_still_doubts():
    translation = Translation(input_text=KNEE, language="en", reading_level=6, prompt_version="p",
                              output_text=KEEPS_LEFT, self_check=0.3)
    doubted = model_checked(candidates.SAMPLED, KEEPS_LEFT, 0.4)
    copy = candidates.candidate_as_written(translation=translation, chosen=doubted, self_check_threshold=0.57)
    assert (copy.name, copy.text, copy.logprobs, copy.self_check) == ("as_written", KNEE, (), None)
    assert copy.passed and candidates.candidate_tier(copy) == 0 and copy.prompt_version == "p"
    # the fast text stands (chosen None): its own P(yes) decides
    assert candidates.candidate_as_written(translation=translation, chosen=None,
                                           self_check_threshold=0.57).text == KNEE
    for chosen, threshold in ((model_checked(candidates.SAMPLED, KEEPS_LEFT, 0.57), 0.57),  # at the threshold: trusted
                              (model_checked(candidates.SAMPLED, KEEPS_LEFT, None), 0.57),  # not checked: no verdict
                              (doubted, None)):  # no threshold: the confidence gated it
        assert candidates.candidate_as_written(translation=translation, chosen=chosen,
                                               self_check_threshold=threshold) is None
    translation.self_check = None
    assert candidates.candidate_as_written(translation=translation, chosen=None, self_check_threshold=0.57) is None
