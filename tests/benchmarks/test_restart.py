"""``python -m bench restart``'s report: each server's row, and the restart
held against its targets (ready within 60 s, first TTFT within 1.5x the warm
P50 of the first start)."""

from __future__ import annotations

from bench.restart import render, summary


def result(server: str, ready_s: float, ttfts: list[float | None]) -> dict:
    return {"server": server, "ready_s": ready_s, "warming_from_s": 9.5 if server == "first start" else None,
            "warming_answers": 3, "warm_up_log": "example cluster prefixes warmed clusters=24 of=24",
            "rows": [{"ttft_ms": t, "error": None if t is not None else "error:busy"} for t in ttfts]}


def test_the_summary_counts_errors_and_takes_the_first_ttft_as_sent():
    row = summary(result("restart", 12.0, [900.0, None, 700.0, 800.0]))
    assert row["first_ttft_ms"] == 900.0
    assert (row["n"], row["errors"]) == (4, 1)
    assert row["ttft_p50"] == 800.0


def test_the_report_holds_the_restart_against_the_warm_p50_of_the_first_start():
    report = {"command": "python -m bench restart", "engine": "llama.cpp, model.gguf", "sentences": 3,
              "first_sentence_warm_ttft_ms": 1100.0,
              "summary": [summary(result("first start", 300.0, [1000.0, 1000.0, 1000.0])),
                          summary(result("restart", 20.0, [1200.0, 1000.0, 1000.0]))]}
    text = render(report)
    assert "| first start | 300.0 | 9.5 |" in text
    assert "| restart | 20.0 | – |" in text
    assert "`/readyz` 200 after 20.0 s (target: at most 60 s)" in text
    assert "TTFT is 1.20x the warm P50" in text
    assert "and 1.09x the same sentence's TTFT on the warm first start (1100.0 ms)" in text
