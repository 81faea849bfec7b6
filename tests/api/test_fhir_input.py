"""FHIR input read without a server: the diagnosis text of a resource, and
invalid resources refused with their issue type and no clinical text."""

from __future__ import annotations

import json

import pytest

from clinical.api import fhir
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "fhir"
URL = "/api/fhir/Condition/$plain-language"

EXPECTED_TEXT = {
    "condition-stemi.json": ("Acute inferior STEMI with complete heart block\nTroponin I 12.4 ng/mL. "
                             "Given aspirin 324 mg and started on a heparin infusion.", ["Condition/stemi-1"]),
    "condition-coding-only.json": ("Lobar pneumonia, unspecified organism", ["Condition/pneumonia-2"]),
    "diagnosticreport-ct-chest.json": ("No pulmonary embolism. A 4 mm nodule in the right upper lobe; "
                                       "follow-up CT in 12 months is recommended.",
                                       ["DiagnosticReport/ct-chest-3"]),
    "bundle-discharge.json": ("Type 2 diabetes mellitus without complications\nHbA1c 8.1 %, above the target of 7 %.",
                              ["Condition/t2dm-4", "DiagnosticReport/hba1c-4"]),
}
INVALID = {
    "invalid-condition-no-subject.json": "invalid",
    "invalid-condition-bad-date.json": "invalid",
    "invalid-patient.json": "not-supported",
    "bundle-without-diagnosis.json": "required",
}


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED_TEXT))
def test_the_diagnosis_text_is_taken_from_the_resource(name):
    assert fhir.diagnosis_text(load(name)) == EXPECTED_TEXT[name]


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_fhir_is_refused_with_its_issue_type(name):
    with pytest.raises(fhir.FhirInputError) as problem:
        fhir.diagnosis_text(load(name))
    assert problem.value.code == INVALID[name]


def test_validation_messages_do_not_echo_the_clinical_text():
    with pytest.raises(fhir.FhirInputError) as problem:
        fhir.diagnosis_text(load("invalid-condition-bad-date.json"))
    assert "onsetDateTime" in problem.value.diagnostics
    assert "ankle" not in problem.value.diagnostics and "yesterday" not in problem.value.diagnostics
