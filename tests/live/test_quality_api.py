"""Readability, the safety check and the glossary in the REST API of a
real server: returned on create and poll, and documented in the OpenAPI schema."""

from __future__ import annotations

import httpx
import pytest

from clinical.models import APIClient
from tests.conftest import in_worker_thread
from tests.quality.test_quality_integration import DROPS_DOSE, NOTE


@pytest.mark.django_db(transaction=True)
def test_api_returns_reading_level_and_safety_and_documents_them(daphne_server):
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_ANSWER=DROPS_DOSE)
    _, key = in_worker_thread(lambda: APIClient.objects.create_key(name="ehr-quality"))
    client = httpx.Client(base_url=server.base_url + "/api", timeout=60,
                          headers={"Authorization": f"Bearer {key}"})
    created = client.post("/v1/translations/", json={"text": NOTE})
    assert created.status_code == 201, created.text
    polled = client.get(created.headers["Location"].removeprefix("/api")).json()
    for body in (created.json(), polled):
        assert body["safety"] == {"passed": False, "missing": [{"kind": "dose", "text": "25 mg"}]}
        assert body["rerun_reason"] == "safety_failed"
        assert body["readability"]["measure"] == "fkgl" and body["readability"]["input_fkgl"] > 0
        assert body["verified_quality"] is None
        glossary = {term["term"].lower(): term for term in body["glossary"]}
        assert glossary["metoprolol"]["definition"] == "A medicine (no vetted plain definition)."
        assert glossary["metoprolol"]["source_name"].startswith("drug dictionary (drug-named-entity-recognition ")
        assert all(term["source_name"] and term["source"] != "engine" for term in body["glossary"])
    schema = client.get("/schema/", headers={"Accept": "application/vnd.oai.openapi+json"}).json()
    properties = schema["components"]["schemas"]["Translation"]["properties"]
    assert {"readability", "safety", "rerun_reason", "glossary", "verified_quality"} <= set(properties)
    glossary_term = schema["components"]["schemas"]["GlossaryTerm"]["properties"]
    assert {"term", "definition", "source", "source_name"} <= set(glossary_term)
