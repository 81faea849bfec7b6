"""FHIR R4 in and out: $plain-language on real example resources, over real
HTTP against Daphne, and the extraction rules in-process."""

from __future__ import annotations

import json

import httpx
import pytest
from fhir.resources.R4B.parameters import Parameters

from clinical.api import fhir
from clinical.models import APIClient, AuditEvent
from tests.conftest import ROOT, in_worker_thread

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


@pytest.fixture
def fhir_api(daphne_server):
    server = daphne_server(INFERENCE_ENGINE="fake")
    _, key = APIClient.objects.create_key(name="ehr-fhir")
    with httpx.Client(base_url=server.base_url, timeout=60,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": "application/fhir+json",
                               "Accept": "application/fhir+json"}) as client:
        yield client


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", sorted(EXPECTED_TEXT))
def test_plain_language_operation_answers_ai_labelled_parameters(fhir_api, name):
    response = fhir_api.post(URL, content=(FIXTURES / name).read_bytes())
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/fhir+json")
    body = response.json()
    Parameters.model_validate(body)  # valid FHIR R4(B)
    assert body["meta"]["security"] == [fhir.AI_ASSERTED]
    values = {}
    for p in body["parameter"]:
        values.setdefault(p["name"], []).append(next(v for k, v in p.items() if k.startswith("value")))
    text, refs = EXPECTED_TEXT[name]
    assert values["text"] == ["Plain words: " + text]
    assert 0 < values["confidence"][0] <= 1
    assert values["verified"] == [False] and values["verification"] == ["not-needed"]
    assert values["model"] == ["fake-echo"] and values["precision"] == ["none"]
    assert [r["reference"] for r in values.get("source", [])] == refs
    event = in_worker_thread(lambda: AuditEvent.objects.get())
    assert event.outcome == "completed" and event.actor == "api:ehr-fhir"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_fhir_gets_an_operation_outcome_400(fhir_api, name):
    response = fhir_api.post(URL, content=(FIXTURES / name).read_bytes())
    assert response.status_code == 400
    outcome = response.json()
    assert outcome["resourceType"] == "OperationOutcome"
    assert outcome["issue"][0]["code"] == INVALID[name] and outcome["issue"][0]["diagnostics"]
    assert in_worker_thread(lambda: list(AuditEvent.objects.values_list("outcome", flat=True))) == ["rejected"]


@pytest.mark.django_db(transaction=True)
def test_malformed_json_and_missing_token_are_operation_outcomes(fhir_api):
    broken = fhir_api.post(URL, content=b'{"resourceType": "Condition", ')
    assert broken.status_code == 400 and broken.json()["resourceType"] == "OperationOutcome"
    anonymous = httpx.post(str(fhir_api.base_url) + URL, content=(FIXTURES / "condition-stemi.json").read_bytes(),
                           headers={"Content-Type": "application/fhir+json"})
    assert anonymous.status_code == 401
    assert anonymous.json()["issue"][0]["code"] == "login"
