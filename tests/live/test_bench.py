"""The benchmarks keep working: the ``python -m bench`` dispatcher, the
latency statistics and a ``--quick`` run of the latency benchmark over every
driver on llama.cpp (real models, real Daphne, real servers).

The latency smoke run leaves vLLM out: its three vLLM drivers starting
together on two cores took 129 of the run's 177 s (2026-11-27), while the
product's vLLM paths are run elsewhere: the engine class in
``tests/inference/test_vllm_engine.py`` and the server ``make run`` starts on vLLM in
``tests/live/test_gpu_check.py`` and ``tests/live/test_engine_death.py``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.profiling import summarize_collapsed
from bench.stats import RequestResult, summarize
from tests.conftest import ROOT

DRIVERS = ("bare", "stack", "server")


def bench(*args: str, env=None, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_dispatcher_lists_benchmarks_and_refuses_unknown_names():
    listed = bench()
    assert listed.returncode == 2 and "latency" in listed.stdout
    unknown = bench("no_such_benchmark")
    assert unknown.returncode == 2 and "no benchmark named 'no_such_benchmark'" in unknown.stderr
    assert bench("../etc").returncode == 2


def test_the_dispatcher_passes_arguments_to_the_module():
    result = bench("latency", "--engines", "tpu")
    assert result.returncode == 2 and "--engines takes llamacpp,vllm" in result.stderr


def test_summary_gives_ttft_tpot_itl_e2e_and_throughput():
    # Two requests sent at t=0: tokens at 0.1, 0.3, 0.6 s and 0.2, 0.4 s.
    first = RequestResult(sent_s=0.0, token_times_s=[0.1, 0.3, 0.6], end_s=0.6, output_tokens=3)
    second = RequestResult(sent_s=0.0, token_times_s=[0.2, 0.4], end_s=0.5, output_tokens=2)
    failed = RequestResult(sent_s=0.0, end_s=0.1, error="HTTP 500")

    summary = summarize([first, second, failed])

    assert (summary["requests"], summary["errors"], summary["error_samples"]) == (3, 1, ["HTTP 500"])
    assert summary["output_tokens"] == 5 and summary["wall_s"] == pytest.approx(0.6)
    assert summary["output_tokens_per_s"] == pytest.approx(5 / 0.6, rel=1e-3)
    assert summary["ttft_ms"]["p50"] == pytest.approx(150) and summary["ttft_ms"]["p99"] == pytest.approx(199)
    assert summary["tpot_ms"]["mean"] == pytest.approx((250 + 300) / 2)  # (600-100)/2, (500-200)/1
    assert sorted([200, 300, 200]) == sorted(round(g) for r in (first, second) for g in r.itl_ms())
    assert summary["itl_ms"]["p50"] == pytest.approx(200)
    assert summary["e2e_ms"]["p50"] == pytest.approx(550)


def test_profile_summary_attributes_samples_to_components():
    collapsed = "\n".join([
        "process 1:\"daphne\";thread (0x1);run (asyncio/events.py:80);_decode (inference/llamacpp_engine.py:200) 60",
        "thread (0x2);receive (clinical/web/consumers.py:90);execute (django/db/backends/utils.py:100) 30",
        "thread (0x2);receive (clinical/web/consumers.py:90) 5",
        "thread (0x3);_bootstrap (threading.py:1002);_worker (concurrent/futures/thread.py:81) 5",
    ])
    summary = summarize_collapsed(collapsed)
    assert summary["samples"] == 100
    assert summary["components"] == {"llama.cpp (model)": 60.0, "database (Django ORM, driver)": 30.0,
                                     "product code (clinical/)": 5.0,
                                     "waiting (idle worker threads, event loop select)": 5.0}
    assert summary["top_self"][0] == {"function": "_decode (inference/llamacpp_engine.py:200)", "percent": 60.0}


@pytest.mark.slow
def test_quick_latency_run_reports_every_driver_on_llamacpp(stack_env, tmp_path):
    result = bench("latency", "--quick", "--engines", "llamacpp", "--out", str(tmp_path), env=stack_env,
                   timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]

    report = json.loads((tmp_path / "latency.json").read_text())
    markdown = (tmp_path / "latency.md").read_text()
    assert {(r["driver"], r["engine"]) for r in report["runs"]} == (
        {(d, "llamacpp") for d in DRIVERS} | {("naive", "transformers")})
    for run in report["runs"]:
        label = f"{run['driver']}/{run['engine']}/{run['workload']}/{run['mode']}"
        assert run["errors"] == 0, (label, run["error_samples"])
        assert run["output_tokens"] == run["requests"] * run["max_tokens"], label  # fixed output length
        ttft, e2e = run["ttft_ms"], run["e2e_ms"]
        assert 0 < ttft["p50"] <= ttft["p95"] <= ttft["p99"], label
        assert e2e["p50"] >= ttft["p50"] and e2e["p99"] >= ttft["p99"], label
        assert run["tpot_ms"]["p50"] > 0 and run["output_tokens_per_s"] > 0, label
        if run["mode"] == "closed" and run["concurrency"] == 1:
            # one request at a time: the wall time (tokens/s) holds the requests alone, no
            # Daphne restart for another output length
            assert run["wall_s"] <= run["requests"] * e2e["p99"] / 1000 + 1.0, label
        if run["workload"] == "long" and run["prompt_tokens_mean"] is not None:
            assert run["prompt_tokens_mean"] > 300, label  # a Cochrane abstract plus the prompt
    stack_requests = sum(r["requests"] for r in report["runs"] if r["driver"] == "stack")
    rows = report["stack_rows"]
    assert rows["translations"] == rows["completed"] == rows["audit_events"] >= stack_requests

    assert set(report["ratios"]) == {"llamacpp"}
    for engine, items in report["ratios"].items():
        assert set(items) == {"ttft_overhead_ms", "stack_vs_server_e2e_p95", "tokens_per_s_8_vs_1",
                              "fast_vs_naive_e2e_p50"}
        assert items["ttft_overhead_ms"]["value"] is not None, engine
        assert items["fast_vs_naive_e2e_p50"]["value"] > 0, engine
    for text in ("bare engine", "full stack", "engine's own server", "naive (transformers FP32)",
                 "llama.cpp", "TTFT overhead of the web stack", "## Engine settings"):
        assert text in markdown, text
    assert (tmp_path / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
