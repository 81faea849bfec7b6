"""``python -m bench unseen_sample post`` against a real Daphne: each
sentence is posted as an EHR would and read back as the patient gets it."""

from __future__ import annotations

import pytest

from bench.unseen_sample import main, rows_read, rows_write
from clinical.models import APIClient, AuditEvent
from tests.conftest import in_worker_thread


@pytest.mark.django_db(transaction=True)
def test_post_reads_back_what_the_patient_gets_and_carries_on_after_a_stop(daphne_server, tmp_path, capsys):
    server = daphne_server(INFERENCE_ENGINE="fake")
    _, key = in_worker_thread(lambda: APIClient.objects.create_key(name="unseen-sample"))
    path = tmp_path / "sample.jsonl"
    done = {"n": 0, "line": 7, "input": "Already posted.", "delivered": "kept as it was"}
    rows_write(path, [done, {"n": 1, "line": 9, "input": "Mild left knee effusion without fracture."}])

    assert main(["post", str(path), "--url", server.base_url, "--token", key]) == 0

    first, second = rows_read(path)
    assert first == done  # a row read back before is not posted again
    assert second["delivered"] == second["fast"] == "Plain words: Mild left knee effusion without fracture."
    assert second["verification"] == "not_needed" and second["rerun_reason"] == ""
    assert second["safety"]["passed"] is True and second["faithfulness"]["passed"] is True
    assert second["seconds"] > 0
    assert "[1] not_needed" in capsys.readouterr().out
    assert in_worker_thread(lambda: AuditEvent.objects.filter(actor="api:unseen-sample").count()) == 1
