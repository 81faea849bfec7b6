"""The safety check (clinical.quality.safety): every example of
docs/safety-check.md is a case here, so the documentation cannot drift."""

from __future__ import annotations

import re

import pytest

from bench.corpora import corpus_file
from clinical.quality.safety import KINDS, SafetyResult, safety_check
from tests.conftest import ROOT
from tests.data import laymaker_sentences

DOC = ROOT / "docs" / "safety-check.md"


def doc_examples() -> list[tuple[str, str, str, str, bool, list[tuple[str, str]]]]:
    """Rows of the examples table: ``(id, language, input, output, passes, missing)``."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split("<!-- safety-examples:start -->")[1].split("<!-- safety-examples:end -->")[0]
    rows = []
    for line in block.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        number, language, source, output, result, missing = cells
        items = [tuple(part.strip() for part in m.split(":", 1)) for m in missing.split(";") if m.strip()]
        rows.append((number, language, source, output, result == "pass", items))
    return rows


EXAMPLES = doc_examples()


def test_the_document_has_about_25_examples_of_each_outcome():
    assert len(EXAMPLES) >= 25
    assert sum(1 for e in EXAMPLES if e[4]) >= 10 and sum(1 for e in EXAMPLES if not e[4]) >= 10
    kinds = {kind for e in EXAMPLES for kind, _ in e[5]}
    assert kinds == set(KINDS), "every kind has a failing example"


@pytest.mark.parametrize("number,language,source,output,passes,missing", EXAMPLES,
                         ids=[f"example-{e[0]}" for e in EXAMPLES])
def test_documented_example(number, language, source, output, passes, missing):
    result = safety_check(input_text=source, output_text=output, language=language)
    assert result.passed is passes
    assert [(item.kind, item.text) for item in result.missing] == missing


def test_output_identical_to_the_input_always_passes():
    text = ("Metoprolol 25 mg BID, BP 150/90 mmHg, left leg swelling, bilateral rales; "
            "denies chest pain; no fever; not on warfarin.")
    result = safety_check(input_text=text, output_text=text)
    assert result.passed and {item.kind for item in result.checked} >= {"dose", "drug", "laterality", "negation"}


@pytest.mark.parametrize("source", ["laymaker-dev", "cochrane-val"])
def test_every_shared_text_passes_against_itself(source):
    """The input and output readers must agree on what a number is, on the
    real data too (a Cochrane abstract writes a confidence interval as
    "1.041.77", its dash lost)."""
    texts = laymaker_sentences() if source == "laymaker-dev" else \
        corpus_file("cochrane-val.source").read_text(encoding="utf-8").splitlines()
    failing = [i for i, text in enumerate(texts) if not safety_check(input_text=text, output_text=text).passed]
    assert len(texts) >= 250 and failing == []


def test_empty_output_misses_every_item():
    text = "Aspirin 81 mg daily for 3 days; right arm; no rash."
    result = safety_check(input_text=text, output_text="")
    assert not result.passed
    assert result.missing == result.checked
    assert result.missing_counts() == {"dose": 1, "measurement": 1, "drug": 1, "laterality": 1, "negation": 1}


def test_a_repeated_item_is_checked_once_but_each_negation_counts():
    result = safety_check(input_text="25 mg now, 25 mg later. No rash. No fever.",
                          output_text="Take 25 mg now and later. You have no rash and a fever.")
    assert [(i.kind, i.text) for i in result.checked].count(("dose", "25 mg")) == 1
    assert [(i.kind, i.text) for i in result.missing] == [("negation", "No fever")]


def test_spanish_decimal_comma_reads_as_a_decimal():
    result = safety_check(input_text="Take 0.5 mg.", output_text="Tome 0,5 mg.", language="es")
    assert result.passed


def test_result_shapes_for_storage_and_audit():
    result = safety_check(input_text="Lasix 40 mg.", output_text="A water pill.")
    assert isinstance(result, SafetyResult)
    assert result.missing_dicts() == [{"kind": "dose", "text": "40 mg"}, {"kind": "drug", "text": "Lasix"}]
    assert result.missing_counts() == {"dose": 1, "drug": 1}
    assert all(re.fullmatch(r"[a-z]+", kind) for kind in result.missing_counts())
