"""The reading level, safety check and glossary as the clinician sees them
on the detail and handout pages (the measures are clinical.quality.measure's)."""

from __future__ import annotations

import re

import pytest
from django.conf import settings

from clinical.models import Rerun, Translation
from clinical.quality import measure as quality
from clinical.quality.display import (
    FLAG_LABELS,
    NOT_MEASURED,
    SAFETY_PASSED,
    faithfulness_display,
    readability_display,
    safety_display,
    translation_quality_display,
)
from clinical.quality.faithfulness import KINDS as FAITHFULNESS_KINDS
from clinical.quality.faithfulness import faithfulness_check
from tests.data import laymaker_sentences

LIVER = 47  # "The liver edge is palpable 4 cm below right costal margin ."


def measured_translation(user, *, output: str, language: str = "en", **fields) -> Translation:
    """A completed translation with the real readability and safety check
    of ``output`` stored, as clinical.translation.finish does."""
    text = laymaker_sentences()[LIVER]
    measured = quality.output_quality(input_text=text, output_text=output, language=language)
    return Translation.objects.create(
        user=user, input_text=text, output_text=output, language=language,
        status=Translation.Status.COMPLETED, input_fkgl=measured.readability.input_fkgl,
        output_fkgl=measured.readability.output_fkgl, output_readability=measured.readability.output_score,
        readability_measure=measured.readability.measure, readability_note=measured.readability.note,
        safety_passed=measured.safety.passed, safety_missing=measured.safety.missing_dicts(), **fields)


def test_readability_is_said_per_measure_and_plainly_when_there_is_none():
    english = readability_display(readability={"input_fkgl": 11.04, "measure": "fkgl", "score": 5.96,
                                               "note": "n"}, reading_level=6)
    assert english == {"input": "grade 11.0 (FKGL)", "output": "grade 6.0 (FKGL; asked for grade 6)", "note": "n"}
    spanish = readability_display(readability={"input_fkgl": 9.0, "measure": "szigriszt_pazos", "score": 78.8,
                                               "note": ""}, reading_level=4)
    assert spanish["output"] == "78.8 of 100 (Szigriszt-Pazos; higher is easier)"
    none = readability_display(readability={"input_fkgl": None, "measure": "", "score": None,
                                            "note": "No readability measure for language 'fr'."}, reading_level=6)
    assert none["output"] == NOT_MEASURED and none["input"] == "not measured (no words) (FKGL)"


def test_safety_lists_each_missing_fact_with_its_kind():
    failed = safety_display(safety={"passed": False, "missing": [{"kind": "laterality", "text": "right"},
                                                                  {"kind": "dose", "text": "5 mg"}]})
    assert failed["state"] == "failed" and failed["summary"].startswith("Missing from the explanation (2)")
    assert failed["missing"] == [{"label": "Side (left/right)", "text": "right"}, {"label": "Dose", "text": "5 mg"}]
    assert safety_display(safety={"passed": True, "missing": []}) == {
        "state": "passed", "summary": SAFETY_PASSED, "missing": []}
    assert safety_display(safety={"passed": None, "missing": []})["state"] == "unchecked"


def test_every_faithfulness_kind_has_a_label_on_the_page_and_in_the_browser():
    script = (settings.BASE_DIR / "static" / "clinical" / "quality.js").read_text(encoding="utf-8")
    start = script.index("const FLAG_LABELS")
    js_labels = dict(re.findall(r'(\w+): "([^"]+)"', script[start:script.index("};", start)]))
    for kind in FAITHFULNESS_KINDS:
        assert FLAG_LABELS.get(kind), kind
        assert js_labels.get(kind) == FLAG_LABELS[kind], kind


def test_a_claimed_organ_failure_is_shown_with_its_label():
    flags = faithfulness_check("Elevated liver function tests .",
                               "The liver is not working as well as it should.").flag_dicts()
    shown = faithfulness_display(faithfulness={"passed": False, "flags": flags})
    assert shown["state"] == "failed"
    assert [(f["label"], f["text"]) for f in shown["flags"]] == [("Organ function", "is not working")]


@pytest.mark.django_db
def test_detail_page_shows_fkgl_and_the_missing_facts_next_to_the_text(client, clinician):
    row = measured_translation(clinician, output="Your doctor felt your liver.",
                               glossary=[{"term": "costal margin", "definition": "the lower edge of the ribs",
                                          "source": "hpo"},
                                         {"term": "furosemide", "definition": "", "source": "drug",
                                          "source_name": "drug dictionary (drug-named-entity-recognition 2.0.9)"}])
    client.force_login(clinician)
    body = client.get(f"/translations/{row.request_id}/").content.decode()
    assert f"grade {row.input_fkgl:.1f} (FKGL)" in body
    assert f"grade {row.output_fkgl:.1f} (FKGL; asked for grade 6)" in body
    assert 'id="safety" class="safety" data-state="failed"' in body
    assert "<span class=\"kind\">Measurement:</span> 4 cm" in body
    assert "<span class=\"kind\">Side (left/right):</span> right" in body
    # Each glossary entry names its vocabulary (an entry stored without a
    # source_name by its source); a drug without a vetted definition says so.
    costal = ('<dt>costal margin</dt><dd><span class="glossary-definition">the lower edge of the ribs</span> '
              '<span class="glossary-source">Source: Human Phenotype Ontology (clinical definition)</span></dd>')
    drug = ('<dt>furosemide</dt><dd><span class="glossary-definition">A medicine (no vetted plain definition).'
            '</span> <span class="glossary-source">Source: drug dictionary (drug-named-entity-recognition 2.0.9)'
            '</span></dd>')
    assert costal in body and drug in body
    # The handout warns the clinician (screen only) and prints the glossary.
    handout = client.get(f"/translations/{row.request_id}/handout/").content.decode()
    assert "Safety check of the model's text" in handout and "Side (left/right):" in handout
    assert "Words you may hear" in handout and costal in handout and drug in handout


@pytest.mark.django_db
def test_spanish_output_shows_its_own_measure(client, clinician):
    row = measured_translation(clinician, language="es",
                               output="El médico palpó el hígado 4 cm por debajo del borde costal derecho.")
    client.force_login(clinician)
    body = client.get(f"/translations/{row.request_id}/").content.decode()
    assert f"{row.output_readability:.1f} of 100 (Szigriszt-Pazos; higher is easier)" in body
    assert 'data-state="passed"' in body and 'lang="es"' in body


@pytest.mark.django_db
def test_a_spanish_explanation_asks_for_a_spanish_reader_on_the_detail_and_handout_pages(client, clinician):
    spanish = measured_translation(clinician, language="es", output="El médico palpó el hígado.")
    english = measured_translation(clinician, output="Your doctor felt your liver.")
    client.force_login(clinician)
    for path in ("/translations/{}/", "/translations/{}/handout/"):
        body = client.get(path.format(spanish.request_id)).content.decode()
        assert "Have a colleague who reads Spanish check it before giving it to a patient." in body
        assert "Have a colleague" not in client.get(path.format(english.request_id)).content.decode()
    # The translate page carries the note for the language selector.
    page = client.get("/").content.decode()
    assert '<script id="language-notes" type="application/json">{"es": "Spanish explanations' in page


@pytest.mark.django_db
def test_no_language_needs_a_reader_when_the_setting_is_emptied(client, clinician, settings):
    settings.LANGUAGE_REVIEW_REQUIRED = []
    spanish = measured_translation(clinician, language="es", output="El médico palpó el hígado.")
    assert translation_quality_display(translation=spanish)["language_note"] == ""


@pytest.mark.django_db
def test_once_verified_the_panels_describe_the_verified_text(clinician):
    row = measured_translation(clinician, output="Your doctor felt your liver.",
                               verification=Translation.Verification.VERIFIED)
    Rerun.objects.create(translation=row, status=Rerun.Status.COMPLETED, output_fkgl=4.2, output_readability=4.2,
                         output_text="Your doctor felt your liver 4 cm below the right ribs.",
                         safety_passed=True, safety_missing=[])
    shown = translation_quality_display(translation=Translation.objects.get(pk=row.pk))
    assert shown["verified"] and shown["safety"]["state"] == "passed"
    assert shown["readability"]["output"] == "grade 4.2 (FKGL; asked for grade 6)"


@pytest.mark.django_db
def test_no_panels_before_the_output_completed(client, clinician):
    row = Translation.objects.create(user=clinician, input_text=laymaker_sentences()[LIVER],
                                     status=Translation.Status.CANCELLED)
    assert translation_quality_display(translation=row) is None
    client.force_login(clinician)
    body = client.get(f"/translations/{row.request_id}/").content.decode()
    assert 'id="safety" class="safety" data-state="" hidden' in body
