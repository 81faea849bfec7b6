"""The faithfulness check (clinical/quality/faithfulness/): the documented
examples of docs/quality/faithfulness.md, run as they are written there,
and properties that hold for any text. No model, no database."""

from __future__ import annotations

import re

import pytest

from clinical.quality.faithfulness import (
    KINDS,
    LANGUAGE_KINDS,
    FaithfulnessResult,
    faithfulness_check,
)
from tests.conftest import ROOT

DOC = ROOT / "docs" / "quality" / "faithfulness.md"


def _documented_examples() -> list[tuple[str, str, str, str, list[tuple[str, str]]]]:
    """Rows of the doc's examples table: (number, language, input, output, [(kind, text)])."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split("<!-- examples:start -->", 1)[1].split("<!-- examples:end -->", 1)[0]
    examples = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].isdigit():
            continue
        number, language, source, output, expected = cells
        flags = [] if expected == "none" else [tuple(part.split(": ", 1)) for part in expected.split("; ")]
        examples.append((number, language, source, output, flags))
    return examples


EXAMPLES = _documented_examples()


def test_the_doc_has_examples_of_every_kind():
    assert len(EXAMPLES) >= 25
    kinds = {kind for *_, flags in EXAMPLES for kind, _ in flags}
    assert kinds == set(KINDS)
    assert any(language == "es" for _, language, *_ in EXAMPLES)


@pytest.mark.parametrize("number,language,source,output,expected", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_documented_example(number, language, source, output, expected):
    result = faithfulness_check(source, output, language=language)
    assert [(f.kind, f.text) for f in result.flags] == [tuple(e) for e in expected]
    for flag in result.flags:
        assert output[flag.start:flag.end] == flag.text


def test_output_equal_to_input_has_no_flags():
    from tests.data import laymaker_sentences

    for sentence in laymaker_sentences():
        result = faithfulness_check(sentence, sentence)
        assert result.passed, (sentence, result.flags)


@pytest.mark.parametrize("text", [
    "Aspirin 81 mg daily for 3 days, left knee pain, no fever.",
    "She denies chest pain; renal function normal; 2+ pitting edema bilaterally.",
    "I gave him 5 units of insulin at 10:30 for a glucose of 350 mg/dL.",
    "",
])
def test_identity_and_empty_output(text):
    assert faithfulness_check(text, text).passed
    assert faithfulness_check(text, "").passed
    assert faithfulness_check(text, text, language="es").passed


def test_counts_by_kind_holds_no_text():
    result = faithfulness_check("Pain in the right knee .", "My left knee and your heart hurt for 3 days.")
    counts = result.counts_by_kind()
    assert counts == {"person": 1, "laterality": 1, "body_site": 1, "number": 1, "unit": 1}
    assert all(isinstance(k, str) and k in KINDS and isinstance(v, int) for k, v in counts.items())
    assert not re.search(r"knee|heart|left|my|days", repr(counts))
    assert [d["kind"] for d in result.flag_dicts()] == ["person", "laterality", "body_site", "number", "unit"]


def test_result_shape_and_errors():
    result = faithfulness_check("Fever .", "Fever.")
    assert isinstance(result, FaithfulnessResult) and result.passed and result.flags == ()
    assert result.checked == LANGUAGE_KINDS["en"]
    assert faithfulness_check("Fever .", "Fiebre.", language="es").checked == LANGUAGE_KINDS["es"]
    with pytest.raises(ValueError):
        faithfulness_check("Fever .", "Fièvre.", language="fr")
    with pytest.raises(TypeError):
        faithfulness_check(None, "x")  # type: ignore[arg-type]


def test_spanish_skips_english_only_kinds():
    # an organ and a drug in Spanish are not guessed at: only numbers, units, sides and person
    result = faithfulness_check("Pain .", "Le duele el corazón; tome aspirina.", language="es")
    assert result.passed


def test_fast_after_warm_up():
    import time

    faithfulness_check("Aspirin 81 mg, left knee.", "Aspirin 81 mg, left knee.")
    source = "The liver edge is palpable 4 cm below right costal margin ."
    output = "The edge of your liver can be felt about 4 centimeters below the edge of your right shoulder."
    started = time.perf_counter()
    for _ in range(50):
        faithfulness_check(source, output)
    per_call_ms = (time.perf_counter() - started) * 1000 / 50
    assert per_call_ms < 5, per_call_ms


_TRICKY_TEXT = ("no not without denies fever pain left right both shoulders each side bilateral he she his her I my "
                "me you we 2 3.5 10 mg two twice half one first heart cardiac brain muscles in your of the back head "
                "foot feet aspirin Lasix furosemide normal absent ruled out negative . , ; : - / 120/80 mmHg 1,5 "
                "1.000 LUE RLE kidney renal atraumatic nontender Mr. Mrs. patient she's tone chest lungs eye 4/94 "
                "1) ( ) % degrees temperature 99 days MI type")
_TRICKY = tuple(_TRICKY_TEXT.split())


def test_identity_property_on_tricky_words():
    """Any text compared with itself is faithful (hypothesis, fixed seed)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, derandomize=True, deadline=None)
    @given(st.lists(st.sampled_from(_TRICKY), min_size=1, max_size=14), st.sampled_from(["en", "es"]))
    def identity(words, language):
        text = " ".join(words)
        assert faithfulness_check(text, text, language=language).passed

    identity()


def test_a_direction_the_unseen_cochrane_sample_reversed_is_flagged_and_no_other_of_its_40():
    import json

    rows = [json.loads(line) for line in
            (ROOT / "docs" / "quality" / "unseen-cochrane-sample.jsonl").read_text(encoding="utf-8").splitlines()]
    flagged = [row["line"] for row in rows
               if any(f.kind == "direction" for f in faithfulness_check(row["input"], row["delivered"]).flags)]
    assert len(rows) == 40 and flagged == [233]  # "Naloxone helps lower blood pressure" for "improves"


@pytest.mark.parametrize("source,output", [
    ("Naloxone improves blood pressure .", "Naloxone lowers your blood pressure."),
    ("Hypotension .", "Your blood pressure is high."),
    ("Blood pressure decreased .", "Your blood pressure went up."),
    ("Fever .", "Your temperature is low."),
])
def test_a_reversed_or_invented_direction_is_flagged(source, output):
    assert [f.kind for f in faithfulness_check(source, output).flags] == ["direction"]


@pytest.mark.parametrize("source,output", [
    # a treatment of a state is no reversal: a state and a change are different types
    ("Antihypertensive therapy for hypertension .", "Medicine that lowers blood pressure."),
    # a condition to avoid is no value
    ("Hypoglycaemia was more common with insulin .", "Insulin aimed to avoid high blood sugar."),
    # a comparison contradicts only a comparison
    ("The block gave a lower heart rate than placebo .", "An increased heart rate can be a sign of pain."),
    # a negated direction states none, on either side
    ("Blood pressure did not rise .", "Your blood pressure did not go down or up."),
    # oxygen has one good direction
    ("Improves oxygenation .", "Raises the oxygen level in your blood."),
    # "go up" / "set up": only a verb of movement makes "up" a direction
    ("Heart rate was controlled .", "They set up a heart rate monitor."),
])
def test_a_direction_the_input_grounds_or_states_none_of_is_not_flagged(source, output):
    assert not [f for f in faithfulness_check(source, output).flags if f.kind == "direction"]


def test_direction_is_not_checked_in_spanish():
    result = faithfulness_check("Blood pressure is high .", "Su presión arterial es baja.", language="es")
    assert "direction" not in result.checked and result.passed
