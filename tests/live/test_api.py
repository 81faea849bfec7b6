"""The REST API for EHR systems, over real HTTP against a real Daphne."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from clinical.models import APIClient, AuditEvent, Translation
from tests.conftest import in_worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = "Mild degenerative joint disease of the left knee without effusion."


@pytest.fixture
def make_client():
    def make(name: str = "ehr-main", **fields) -> str:
        _, key = APIClient.objects.create_key(name=name, **fields)
        return key
    return make


@pytest.fixture
def api(shared_fake_server):
    server = shared_fake_server
    return httpx.Client(base_url=server.base_url + "/api", timeout=60)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def poll(api: httpx.Client, location: str, key: str, *, until, timeout_s: float = 60) -> dict:
    """GET ``location`` as a well-behaved EHR client does: wait the answer's
    ``Retry-After`` between GETs, until ``until(body)`` holds. Every answer
    must be 200: a client that follows ``Retry-After`` is never throttled."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = api.get(location, headers=bearer(key))
        assert response.status_code == 200, (response.status_code, response.text)
        body = response.json()
        if until(body):
            assert "Retry-After" not in response.headers or body["verification"] in ("pending", "running")
            return body
        assert time.monotonic() < deadline, body
        assert int(response.headers["Retry-After"]) >= 1, body
        time.sleep(int(response.headers["Retry-After"]))


def test_no_token_is_401_with_a_bearer_challenge(api):
    response = api.post("/v1/translations/", json={"text": TEXT})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Bearer nope.nope", "Bearer", "Token abc", "Basic Zm9vOmJhcg=="])
def test_a_bad_token_is_401(api, header):
    assert api.post("/v1/translations/", json={"text": TEXT},
                    headers={"Authorization": header}).status_code == 401


def test_revoked_and_expired_tokens_are_401(api, make_client):
    from django.utils import timezone

    revoked = make_client("revoked", revoked=True)
    expired = make_client("expired", expiry_date=timezone.now() - timezone.timedelta(days=1))
    for key in (revoked, expired):
        assert api.post("/v1/translations/", json={"text": TEXT}, headers=bearer(key)).status_code == 401


def test_a_token_without_the_scope_is_403(api, make_client):
    read_only = make_client("reader", scope_translate=False)
    translate_only = make_client("writer", scope_read=False)
    assert api.post("/v1/translations/", json={"text": TEXT}, headers=bearer(read_only)).status_code == 403
    created = api.post("/v1/translations/", json={"text": TEXT}, headers=bearer(translate_only))
    assert created.status_code == 201
    assert api.get(created.headers["Location"].removeprefix("/api"),
                   headers=bearer(translate_only)).status_code == 403


def test_post_waits_for_the_fast_result_and_audits_the_client(api, make_client):
    key = make_client()
    response = api.post("/v1/translations/", json={"text": TEXT}, headers=bearer(key))
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "completed" and body["text"] == "Plain words: " + TEXT
    assert body["verified"] is False and body["verification"] == "not_needed"
    assert 0 < body["confidence"] <= 1 and body["ai_generated"] is True
    assert body["timings"]["ttft_ms"] <= body["timings"]["total_ms"]
    assert response.headers["Location"] == f"/api/v1/translations/{body['id']}/"
    assert "Retry-After" not in response.headers  # nothing more to come
    event = in_worker_thread(lambda: AuditEvent.objects.select_related("actor_client").get())
    assert event.actor_client.name == "ehr-main" and event.actor == "api:ehr-main"
    assert event.source == "api" and str(event.request_id) == body["id"]


def test_wait_false_returns_202_and_a_location_to_poll(api, make_client):
    key = make_client()
    response = api.post("/v1/translations/?wait=false", json={"text": TEXT}, headers=bearer(key))
    assert response.status_code == 202 and response.json()["status"] == "pending"
    assert int(response.headers["Retry-After"]) >= 1
    location = response.headers["Location"].removeprefix("/api")
    body = poll(api, location, key, until=lambda body: body["status"] != "pending")
    assert body["status"] == "completed" and body["text"] == "Plain words: " + TEXT


@pytest.mark.parametrize("wait", ["true", "false"])
def test_the_work_after_the_response_runs_on_the_server_make_run_starts(daphne_server, make_client, wait):
    """The work that follows the answer (the whole run with ``wait=false``,
    the stream's close with ``wait=true``) outlives the request in
    ``clinical.serve``, which fails it with "CurrentThreadExecutor already
    quit" when it runs in the request's context; the glossary comes with the
    translation, from the vocabularies, each entry naming its source."""
    answer = "High blood pressure."
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_ANSWER=answer, FAKE_ENGINE_TOKEN_DELAY_S="0.05")
    api = httpx.Client(base_url=server.base_url + "/api", timeout=60)
    key = make_client()
    created = api.post(f"/v1/translations/?wait={wait}", json={"text": "Hypertension, started on furosemide."},
                       headers=bearer(key))
    assert created.status_code == (201 if wait == "true" else 202), created.text
    location = created.headers["Location"].removeprefix("/api")

    deadline = time.monotonic() + 30
    while True:
        body = api.get(location, headers=bearer(key)).json()
        if body["status"] != "pending" or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert body["status"] == "completed" and body["text"] == answer
    glossary = {term["term"].lower(): term for term in body["glossary"]}
    assert glossary["hypertension"]["definition"] == "High blood pressure."
    assert glossary["hypertension"]["source_name"].startswith("Human Phenotype Ontology (lay synonym), release ")
    assert glossary["furosemide"]["definition"] == "A medicine (no vetted plain definition)."
    assert glossary["furosemide"]["source_name"].startswith("drug dictionary (drug-named-entity-recognition ")
    assert "CurrentThreadExecutor" not in server.logs()


def test_a_client_never_reads_another_clients_translation(api, make_client):
    mine, theirs = make_client("a"), make_client("b")
    location = api.post("/v1/translations/", json={"text": TEXT},
                        headers=bearer(mine)).headers["Location"].removeprefix("/api")
    assert api.get(location, headers=bearer(mine)).status_code == 200
    assert api.get(location, headers=bearer(theirs)).status_code == 404
    unknown = "/v1/translations/00000000-0000-4000-8000-000000000000/"
    assert api.get(unknown, headers=bearer(mine)).status_code == 404


@pytest.mark.parametrize("payload", [{"text": ""}, {"text": "   "}, {}, {"text": "x" * 8001},
                                     {"text": ["a"]}, {"text": "pain\x00"}])
def test_bad_input_is_400_and_audited_as_rejected(api, make_client, payload):
    key = make_client()
    response = api.post("/v1/translations/", json=payload, headers=bearer(key))
    assert response.status_code == 400 and response.json()
    assert in_worker_thread(lambda: list(AuditEvent.objects.values_list("outcome", flat=True))) == ["rejected"]
    assert in_worker_thread(Translation.objects.count) == 0


def test_malformed_json_is_400(api, make_client):
    key = make_client()
    response = api.post("/v1/translations/", content=b"{not json",
                        headers={**bearer(key), "Content-Type": "application/json"})
    assert response.status_code == 400


def test_each_client_has_its_own_throttle(api, make_client):
    slow, other = make_client("slow", throttle_rate="2/min"), make_client("other")
    codes = [api.post("/v1/translations/", json={"text": TEXT}, headers=bearer(slow)).status_code
             for _ in range(3)]
    assert codes == [201, 201, 429]
    assert api.post("/v1/translations/", json={"text": TEXT}, headers=bearer(other)).status_code == 201


def test_the_schema_and_local_docs_are_served(api):
    schema = api.get("/schema/", headers={"Accept": "application/vnd.oai.openapi+json"})
    assert schema.status_code == 200
    spec = schema.json()
    assert spec["openapi"].startswith("3.")
    assert {"/api/v1/translations/", "/api/v1/translations/{request_id}/"} <= set(spec["paths"])
    assert spec["components"]["securitySchemes"]["clientToken"]["scheme"] == "bearer"
    docs = api.get("/docs/")
    assert docs.status_code == 200
    assert "drf_spectacular_sidecar/swagger-ui-dist" in docs.text and "cdn" not in docs.text.lower()


@pytest.mark.slow
def test_polling_reaches_the_verified_full_precision_text(daphne_server, celery_worker_process, make_client):
    """Below the threshold the API returns the fast text at once, then a GET
    shows the re-run's text once a real Celery worker has verified it."""
    server = daphne_server(INFERENCE_ENGINE="fake", CONFIDENCE_THRESHOLD="1.01")
    celery_worker_process(RERUN_ENGINE="fake")
    key = make_client()
    with httpx.Client(base_url=server.base_url + "/api", timeout=60) as api:
        created = api.post("/v1/translations/", json={"text": TEXT}, headers=bearer(key))
        assert created.status_code == 201
        first = created.json()
        # The worker may already have picked the re-run up (it is enqueued
        # before the answer is sent); the fast text is what came back.
        assert first["verification"] in ("pending", "running", "verified"), first
        if not first["verified"]:
            assert first["text"] == first["fast_text"] == "Plain words: " + TEXT
            assert int(created.headers["Retry-After"]) >= 1
        location = created.headers["Location"].removeprefix("/api")
        body = poll(api, location, key, until=lambda body: body["verified"])
    assert body["verification"] == "verified"
    assert body["text"] == body["verified_text"] and body["fast_text"] == "Plain words: " + TEXT
    assert body["timings"]["rerun_ms"] > 0 and body["verified_confidence"] is not None


def test_server_sent_events_arrive_in_several_chunks_as_they_are_decoded(daphne_server, make_client):
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_TOKEN_DELAY_S="0.1")
    key = make_client()
    arrivals: list[tuple[float, bytes]] = []
    with httpx.Client(base_url=server.base_url, timeout=60) as http, http.stream(
            "POST", "/api/v1/translations/", json={"text": TEXT},
            headers={**bearer(key), "Accept": "text/event-stream"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for chunk in response.iter_raw():
            arrivals.append((time.monotonic(), chunk))
    body = b"".join(chunk for _, chunk in arrivals).decode()
    events = [block.split("\n", 1)[0].removeprefix("event: ") for block in body.strip().split("\n\n")]
    words = len(("Plain words: " + TEXT).split(" "))
    assert events == ["started"] + ["token"] * words + ["done"]
    # Streamed, not buffered: many chunks, spread over the generation time.
    assert len(arrivals) >= words
    assert arrivals[-1][0] - arrivals[0][0] >= 0.1 * (words - 2)
    done = json.loads(body.strip().split("\n\n")[-1].split("data: ", 1)[1])
    assert done["status"] == "completed" and done["text"] == "Plain words: " + TEXT


def test_an_sse_client_that_disconnects_cancels_the_translation(daphne_server, make_client):
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_TOKEN_DELAY_S="0.1")
    key = make_client()
    with httpx.Client(base_url=server.base_url, timeout=60) as http, http.stream(
            "POST", "/api/v1/translations/", json={"text": " ".join(["word"] * 100)},
            headers={**bearer(key), "Accept": "text/event-stream"}) as response:
        for chunk in response.iter_raw():
            if b"event: token" in chunk:
                break
    deadline = time.monotonic() + 10
    while in_worker_thread(lambda: Translation.objects.get().status) == "pending":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    row = in_worker_thread(Translation.objects.get)
    assert row.status == "cancelled" and row.tokens_out < 100


def test_sse_errors_come_as_an_error_event(api, make_client):
    response = api.post("/v1/translations/", json={"text": ""},
                        headers={**bearer(make_client()), "Accept": "text/event-stream"})
    assert response.status_code == 400 and response.text.startswith("event: error\n")


def test_reading_level_and_language_are_accepted_and_validated(api, make_client):
    key = make_client()
    ok = api.post("/v1/translations/", json={"text": TEXT, "reading_level": 4, "language": "es"},
                  headers=bearer(key))
    assert ok.status_code == 201 and (ok.json()["reading_level"], ok.json()["language"]) == (4, "es")
    for bad in ({"reading_level": 5}, {"language": "fr"}):
        assert api.post("/v1/translations/", json={"text": TEXT, **bad}, headers=bearer(key)).status_code == 400


def test_a_full_engine_queue_is_503_with_retry_after(daphne_server, make_client):
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_TOKEN_DELAY_S="0.2", ENGINE_MAX_QUEUE="1")
    key = make_client()
    with httpx.Client(base_url=server.base_url + "/api", timeout=60) as api:
        first = api.post("/v1/translations/?wait=false", json={"text": " ".join(["word"] * 50)},
                         headers=bearer(key))
        assert first.status_code == 202
        busy = api.post("/v1/translations/", json={"text": TEXT}, headers=bearer(key))
    assert busy.status_code == 503 and int(busy.headers["Retry-After"]) >= 1
    assert "busy" in busy.json()["detail"]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deeply_nested_or_oversized_bodies_get_a_json_refusal(api, make_client):
    key = make_client()
    headers = {**bearer(key), "Content-Type": "application/json"}
    for body, code in ((nested(50_000), 400), ('{"text": ' + nested(5_000) + "}", 400),
                       (json.dumps({"text": "x" * 3_000_000}), 413)):
        response = api.post("/v1/translations/", content=body.encode(), headers=headers)
        assert response.status_code == code, (code, response.text[:300])
        assert response.headers["Content-Type"].startswith("application/json") and response.json()["detail"]
    assert in_worker_thread(Translation.objects.count) == 0


def test_a_deeply_nested_fhir_resource_gets_an_operation_outcome(api, make_client):
    key = make_client()
    headers = {**bearer(key), "Content-Type": "application/fhir+json"}
    for depth in (300, 3_000):
        extension: dict = {"url": "http://example.org/x", "valueString": "leaf"}
        for _ in range(depth):
            extension = {"url": "http://example.org/x", "extension": [extension]}
        resource = {"resourceType": "Condition", "code": {"text": "Hypertension."}, "extension": [extension]}
        try:
            body = json.dumps(resource)
        except RecursionError:  # deeper than this process's own encoder goes: write it by hand
            body = None
        if body is None:
            body = ('{"resourceType": "Condition", "code": {"text": "Hypertension."}, "extension": ['
                    + '{"url": "http://example.org/x", "extension": [' * depth
                    + '{"url": "http://example.org/x", "valueString": "leaf"}' + "]}" * depth + "]}")
        response = api.post("/fhir/Condition/$plain-language", content=body.encode(), headers=headers)
        assert response.status_code in (200, 400), (depth, response.status_code, response.text[:300])
        assert response.json()["resourceType"] == ("Parameters" if response.status_code == 200
                                                   else "OperationOutcome")
