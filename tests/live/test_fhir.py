"""FHIR R4 in and out: $plain-language on real example resources, over real
HTTP against the server (the extraction rules: tests/api/test_fhir_input.py)."""

from __future__ import annotations

import httpx
import pytest
from fhir.resources.R4B.parameters import Parameters

from clinical.api import fhir
from clinical.models import APIClient, AuditEvent
from tests.api.test_fhir_input import EXPECTED_TEXT, FIXTURES, INVALID, URL
from tests.conftest import fake_echo, in_worker_thread


@pytest.fixture
def fhir_api(shared_fake_server):
    server = shared_fake_server
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
    assert values["text"] == [fake_echo(text)]
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
