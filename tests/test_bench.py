"""The benchmarks keep working: the ``python -m bench`` dispatcher and the
latency statistics."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.stats import RequestResult, summarize
from tests.conftest import ROOT


def bench(*args: str, env=None, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_dispatcher_lists_benchmarks_and_refuses_unknown_names():
    listed = bench()
    assert listed.returncode == 2 and "laymaker_sample" in listed.stdout
    unknown = bench("no_such_benchmark")
    assert unknown.returncode == 2 and "no benchmark named 'no_such_benchmark'" in unknown.stderr
    assert bench("../etc").returncode == 2


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
