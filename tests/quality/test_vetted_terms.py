"""A medical term replaced by plain words that no vetted vocabulary gives
for it is a safety finding of its own (clinical/quality/vetted_terms.py,
kind lay_term of clinical/quality/safety.py)."""

from __future__ import annotations

import pytest

from bench.lay_terms import stored_sets
from clinical.quality.safety import safety_check
from clinical.quality.vetted_terms import lay_term_findings, spanish_term_findings, word_stem
from inference.prompts import EXAMPLE_ANSWER_SPANISH_TERMS, EXAMPLE_NOTE

EFFUSION = "Chest x-ray shows a small left pleural effusion without pneumothorax."


@pytest.mark.parametrize("a,b", [("lungs", "lung"), ("narrowing", "narrowed"), ("inflammation", "inflamed"),
                                 ("nodes", "node")])
def test_inflections_share_a_stem(a, b):
    assert word_stem(a) == word_stem(b)


def test_a_lay_word_that_means_something_else_is_found_and_the_vetted_one_passes():
    wrong = lay_term_findings(input_text=EFFUSION,
                              output_text="The x-ray shows a small amount of fluid in the left lung and no collapsed lung.")
    assert [(f.term, f.layperson) for f in wrong] == [("pleural effusion", ("Fluid around lungs",))]
    assert EFFUSION[wrong[0].start:wrong[0].end] == "pleural effusion"
    assert not lay_term_findings(input_text=EFFUSION,
                                 output_text="The x-ray shows a little fluid around the left lung, no collapsed lung.")


def test_a_term_kept_is_left_to_the_term_check_to_explain():
    assert not lay_term_findings(input_text=EFFUSION, output_text="A small left pleural effusion, no pneumothorax.")


def test_a_term_hpo_gives_no_layperson_synonym_for_is_not_held_against_one():
    assert not lay_term_findings(input_text="Moderate mitral regurgitation.",
                                 output_text="One heart valve leaks back a little.")


def test_the_safety_check_lists_it_once_in_english_and_in_spanish():
    result = safety_check(input_text="Moderate aortic stenosis.", output_text="Your heart valve is a bit leaky.")
    assert [(i.kind, i.text) for i in result.missing] == [("lay_term", "aortic stenosis")]
    spanish = safety_check(input_text="Moderate aortic stenosis.", output_text="Su válvula del corazón gotea un poco.",
                           language="es")
    assert [(i.kind, i.text) for i in spanish.missing] == [("lay_term", "aortic stenosis")]
    # neither kept nor explained at all: a `term`, not listed twice
    unexplained = safety_check(input_text="Moderate aortic stenosis.", output_text="Your heart is fine.")
    assert [i.kind for i in unexplained.missing] == ["term"]


def test_every_replacement_of_the_stored_texts_that_matches_no_vetted_entry_is_a_safety_finding():
    """Over every stored text (laymaker-dev's rewrites by the clinicians,
    the published systems and this system; the unseen samples): each term
    replaced with words outside its layperson synonyms fails the safety
    check on that term."""
    findings = 0
    for texts in stored_sets().values():
        for row in texts:
            found = lay_term_findings(input_text=row["input"], output_text=row["output"])
            if not found:
                continue
            missing = safety_check(input_text=row["input"], output_text=row["output"]).missing
            for finding in found:
                findings += 1
                assert any(item.kind == "lay_term" and item.text == finding.term or item.kind == "term"
                           and item.text.lower() in finding.term.lower() for item in missing), (finding, row)
    assert findings >= 50  # the stored texts hold such replacements, so the test checks something


@pytest.mark.parametrize("output", [
    "Su corazón tiene un poco menos de espacio para llenarse de sangre.",  # the product's wrong text
    "Tiene una válvula del corazón que gotea un poco.",                      # a leak is not a narrowing
])
def test_a_spanish_text_that_does_not_say_the_vetted_spanish_term_is_found(output):
    findings = spanish_term_findings(input_text="Moderate aortic stenosis.", output_text=output)
    assert [(f.term, f.name) for f in findings] == [("aortic stenosis", "Estenosis de la válvula aórtica")]


@pytest.mark.parametrize("output", [
    "Tiene una estenosis aórtica moderada: la válvula aórtica del corazón está más estrecha de lo normal.",
    "Tiene una estenosis de la válvula aórtica moderada (la válvula está estrecha).",
    "TIENE UNA ESTENOSIS AORTICA MODERADA.",  # accents and case folded
])
def test_a_spanish_text_that_says_the_vetted_term_passes(output):
    assert not spanish_term_findings(input_text="Moderate aortic stenosis.", output_text=output)


def test_a_spanish_false_friend_is_found_and_the_vetted_word_passes():
    note = "The patient reports constipation for two weeks."
    wrong = spanish_term_findings(input_text=note, output_text="El paciente dice que está constipado desde hace dos semanas.")
    assert [(f.term, f.name) for f in wrong] == [("constipation", "Estreñimiento")]
    assert note[wrong[0].start:wrong[0].end] == "constipation"
    assert not spanish_term_findings(input_text=note,
                                     output_text="Usted tiene estreñimiento (le cuesta ir al baño) desde hace dos semanas.")


def test_a_two_word_label_needs_both_words():
    # "un derrame" alone is what Spanish speakers call a stroke
    assert spanish_term_findings(input_text="Small pleural effusion.", output_text="Tiene un pequeño derrame.")
    assert not spanish_term_findings(input_text="Small pleural effusion.",
                                     output_text="Tiene un pequeño derrame pleural: líquido alrededor del pulmón.")


def test_the_spanish_prompts_worked_answer_says_every_term_by_its_label():
    assert not spanish_term_findings(input_text=EXAMPLE_NOTE, output_text=EXAMPLE_ANSWER_SPANISH_TERMS)
