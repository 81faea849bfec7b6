"""Prometheus metrics of one replica, scraped from a real Daphne after real
requests over WebSockets (fake engine), with the re-run queue read from the
real Redis broker."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from tests.conftest import in_thread
from tests.data import laymaker_sentences
from tests.frames import translate_over_socket

pytestmark = pytest.mark.django_db(transaction=True)


def scrape(server, **headers) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of a /metrics scrape."""
    response = httpx.get(server.base_url + "/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


async def test_requests_are_counted_by_outcome_with_ttft_latency_and_rerun_queue(daphne_server, clinician):
    # Every completed translation is below a threshold of 1.01, so each one
    # queues a re-run; no worker runs, so they wait in the broker's list.
    server = daphne_server(INFERENCE_ENGINE="fake", CONFIDENCE_THRESHOLD="1.01")
    session = await in_thread(server.login, clinician.username)
    for sentence in laymaker_sentences()[:2]:
        frames = await translate_over_socket(server, session, sentence)
        assert frames[-1]["type"] == "done"
    frames = await translate_over_socket(server, session, "   ")
    assert frames[-1]["code"] == "empty"

    samples = await in_thread(scrape, server)
    web = (("outcome", "completed"), ("source", "web"))
    assert samples[("clinical_translation_requests_total", web)] == 2
    assert samples[("clinical_translation_requests_total", (("outcome", "rejected"), ("source", "web")))] == 1
    assert samples[("clinical_translation_ttft_seconds_count", ())] == 2
    assert samples[("clinical_translation_latency_seconds_count", ())] == 2
    assert 0 < samples[("clinical_translation_latency_seconds_sum", ())] < 30  # seconds, not ms
    assert samples[("clinical_translation_output_tokens_total", ())] >= 2 * 3
    assert samples[("clinical_rerun_queue_length", ())] == 2
    assert samples[("clinical_engine_queue_depth", ())] == 0
    assert samples[("clinical_replica_draining", ())] == 0


async def test_queue_depth_and_inflight_show_a_running_stream(daphne_server, clinician):
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_TOKEN_DELAY_S="0.2")
    session = await in_thread(server.login, clinician.username)
    async with connect(server.ws_url + "/ws/translate/", additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        await socket.send(json.dumps({"type": "translate", "text": laymaker_sentences()[3]}))
        assert json.loads(await socket.recv())["type"] == "started"
        await socket.recv()  # a token: the stream is running
        samples = await in_thread(scrape, server)
        await socket.send(json.dumps({"type": "cancel"}))
        async with asyncio.timeout(10):
            while json.loads(await socket.recv())["type"] != "cancelled":
                pass
    assert samples[("clinical_engine_queue_depth", ())] == 1
    assert samples[("clinical_inflight_translations", ())] == 1
    after = await in_thread(scrape, server)
    assert after[("clinical_inflight_translations", ())] == 0
    assert after[("clinical_translation_requests_total", (("outcome", "cancelled"), ("source", "web")))] == 1


def test_metrics_need_the_bearer_token_when_one_is_set(daphne_server):
    server = daphne_server(INFERENCE_ENGINE="fake", METRICS_TOKEN="scrape-secret-1234")
    url = server.base_url + "/metrics"
    missing = httpx.get(url, timeout=10)
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    assert scrape(server, Authorization="Bearer scrape-secret-1234")


def test_without_a_token_only_direct_loopback_clients_are_answered(shared_fake_server):
    server = shared_fake_server
    assert scrape(server)  # the test runs on loopback
    proxied = httpx.get(server.base_url + "/metrics", headers={"X-Forwarded-For": "203.0.113.9"}, timeout=10)
    assert proxied.status_code == 403
