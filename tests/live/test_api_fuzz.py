"""Property-based run of the project's own OpenAPI schema (schemathesis):
at least 500 generated requests against a real Daphne, none may get a 5xx.
100 examples an operation give about a thousand requests (the schema's
operations, each with valid, invalid and unknown-id cases)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clinical.models import APIClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_generated_requests_against_the_openapi_schema_get_no_server_error(daphne_server, tmp_path):
    server = daphne_server(INFERENCE_ENGINE="fake")
    _, key = APIClient.objects.create_key(name="fuzzer", throttle_rate="100000/min")
    har = tmp_path / "requests.har"
    result = subprocess.run(
        [str(Path(sys.executable).parent / "schemathesis"), "run",
         f"{server.base_url}/api/schema/", "--checks", "not_a_server_error",
         "--max-examples", "100", "--seed", "20261122", "--workers", "1",
         "--header", f"Authorization: Bearer {key}",
         "--report", "har", "--report-har-path", str(har)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    entries = json.loads(har.read_text())["log"]["entries"]
    statuses = [entry["response"]["status"] for entry in entries]
    assert len(statuses) >= 500, f"only {len(statuses)} requests were generated"
    assert not [s for s in statuses if s >= 500]
    assert {201, 400, 404} <= set(statuses)  # valid, invalid and unknown-id cases were all tried
