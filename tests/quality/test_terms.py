"""Medical terms the output neither keeps nor explains
(clinical.quality.terms, the safety check's ``term`` kind). The documented
examples are in docs/safety-check.md and run by test_safety.py."""

from __future__ import annotations

import pytest

from clinical.quality.safety import safety_check
from clinical.quality.terms import input_terms, terms_missing
from clinical.rerun.candidates import span_replacements_apply


def missing(source: str, output: str) -> list[str]:
    return [term.word for term in terms_missing(input_text=source, output_text=output)]


def test_a_term_replaced_by_words_for_none_of_its_parts_is_missing():
    assert missing("Partial plantar fasciotomy.", "Partial foot tightening.") == ["fasciotomy"]
    assert missing("No ischemic changes.", "No signs of heart problems.") == ["ischemic"]


@pytest.mark.parametrize("source,output", [
    ("Partial plantar fasciotomy.", "A partial cut to release the tight tissue under the foot."),
    ("Laparoscopic appendectomy.", "Keyhole surgery to take out the appendix."),
    ("Gross hematuria.", "Blood in the urine that you can see."),
    ("No ischemic changes.", "No signs of poor blood flow."),
])
def test_a_plain_word_for_one_of_its_parts_explains_a_term(source, output):
    assert missing(source, output) == []


@pytest.mark.parametrize("source,output", [
    ("Two fasciotomies were done.", "Two fasciotomy cuts were done."),  # inflected
    ("Ischemic changes.", "Signs of ischemia."),  # another ending of the same word
    ("Right adrenalectomy.", "Right adrenal surgery."),  # a piece of the word
    ("Hyperbilirubinemia.", "High bilirubin."),
])
def test_a_term_kept_inflected_or_as_a_piece_is_not_missing(source, output):
    assert missing(source, output) == []


def test_a_plain_word_the_input_already_had_does_not_explain_a_term():
    # "tone" would explain "-tonia", but it is the input's own word.
    assert missing("The tone is characterized by paratonia.", "The tone is characterized by a limp.") == \
        ["paratonia"]
    assert missing("The tone is characterized by paratonia.", "The tone is stiff.") == []


def test_a_term_of_the_privative_prefix_needs_a_word_of_loss_beside_its_part():
    # a-phasia, "without speech": "speech" alone names what is lost, not the loss.
    assert missing("Stable expressive aphasia and decreased vision.", "Stable speech and decreased vision.") == \
        ["aphasia"]
    assert missing("Stable expressive aphasia.", "She still has trouble speaking.") == []
    assert missing("Obstructive sleep apnea.", "Heavy breathing during sleep.") == ["apnea"]
    assert missing("Obstructive sleep apnea.", "His breathing stops while he sleeps.") == []
    assert missing("Muscle atrophy.", "The muscles are wasting away.") == []
    # a word of loss the input already had does not count again
    assert missing("No aphasia.", "No speech.") == ["aphasia"]
    assert missing("No aphasia.", "No trouble speaking.") == []
    # other words starting with a are not privative ("adenopathy": aden- + -pathy)
    assert not any(t.privative for t in input_terms("Adenopathy and arthritis of the knee."))


def test_a_term_of_stopping_needs_a_word_of_stopping_beside_its_part():
    # hemo-stasis, "stopping of bleeding": "bleeding" alone says the opposite.
    source = "The nasal area was examined at the end of the case and it seemed to be hemostatic as well ."
    assert missing(source, "The inside of the nose was looked at and it seemed to be bleeding.") == ["hemostatic"]
    assert missing(source, "The inside of the nose was looked at and it was not bleeding.") == []
    assert missing("Hemostasis was assured .", "Blood clot was assured.") == ["Hemostasis"]
    assert missing("Hemostasis was assured .", "The bleeding was stopped and checked.") == []
    # metastasis is a spread, not a stopping
    assert not any(t.privative for t in input_terms("Metastatic disease and metastasis to the liver."))


def test_everyday_words_and_body_sites_alone_are_not_terms():
    text = ("The weather and her father, a systemic analysis of the program; the kidney and the abdominal wall; "
            "blood pressure and fever.")
    assert input_terms(text) == []


def test_a_one_word_phenotype_term_is_explained_by_its_layperson_synonym():
    assert [t.word for t in input_terms("The vertigo had lasted hours.")] == ["vertigo"]
    assert missing("The vertigo had lasted hours.", "The dizziness had lasted hours.") == []
    assert missing("The vertigo had lasted hours.", "The pain had lasted hours.") == ["vertigo"]


def test_only_english_output_is_checked_for_terms():
    english = safety_check(input_text="Partial plantar fasciotomy.", output_text="Partial foot tightening.")
    spanish = safety_check(input_text="Partial plantar fasciotomy.", output_text="Fasciotomía plantar parcial.",
                           language="es")
    assert [(i.kind, i.text) for i in english.missing] == [("term", "fasciotomy")]
    assert spanish.passed and not any(item.kind == "term" for item in spanish.checked)


def test_the_span_candidate_keeps_a_term_rather_than_a_replacement_that_misses_it():
    """The re-run's copied-sentence candidate checks each replacement, so a
    wrong plain word for a term leaves the term as written."""
    text = "Emergency fasciotomy of the forearm."
    wrong, kept = span_replacements_apply(text=text, pairs=[("fasciotomy", "tightening")])
    assert (wrong, kept) == (text, [])
    right, kept = span_replacements_apply(text=text, pairs=[("fasciotomy", "a cut to release the muscle covering")])
    assert kept == [("fasciotomy", "a cut to release the muscle covering")]
    assert right == "Emergency a cut to release the muscle covering of the forearm."
