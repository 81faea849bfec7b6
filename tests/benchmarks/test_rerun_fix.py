"""``python -m bench rerun_fix``: re-run records made at another gate
threshold stand where the row and the checks' verdict are unchanged."""

from __future__ import annotations

import json

from bench.rerun_fix import rerun_records_reused, verdicts_count

VARIANT = [12, 8, 0, "h"]


def record(row_id: str, *, threshold: float, fast: str, text: str, passed: bool = True, variant=VARIANT) -> dict:
    return {"id": row_id, "variant": variant, "threshold": threshold, "fast": fast, "fast_failed": False,
            "kept": "retrieved_examples", "text": text, "passed": passed, "s": 1.0, "candidates": []}


def test_a_rerun_made_at_another_threshold_is_reused_only_for_the_same_fast_text_and_verdict(tmp_path):
    cache = tmp_path / "rerun-fix-rows.jsonl"
    lines = [record("1", threshold=0.5, fast="fast one", text="kept one"),
             record("2", threshold=0.5, fast="an older fast text", text="kept two"),
             record("3", threshold=0.5, fast="fast three", text="kept three, which fails now"),
             record("4", threshold=0.6, fast="fast four", text="kept four"),
             record("5", threshold=0.5, fast="fast five", text="kept five", variant=[12, 8, 0])]
    cache.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    fast = {i: {"output": f"fast {w}"} for i, w in (("1", "one"), ("2", "two"), ("3", "three"), ("4", "four"),
                                                    ("5", "five"))}

    def passes(row_id: str, text: str) -> bool:
        return "fails now" not in text

    reused = rerun_records_reused(cache, variant=VARIANT, threshold=0.6, fast=fast, passes=passes)
    assert list(reused) == ["1"]
    assert reused["1"]["threshold"] == 0.6 and reused["1"]["reused_from"] == 0.5
    assert reused["1"]["text"] == "kept one"
    assert rerun_records_reused(tmp_path / "none.jsonl", variant=VARIANT, threshold=0.6, fast=fast,
                                passes=passes) == {}


def test_the_delivered_texts_are_split_by_whether_the_model_doubts_them(tmp_path):
    """A re-run row's kept text is judged by its own check, a row not
    re-run by the fast text's; a text without a score is not doubted."""
    judged = tmp_path / "hand-judged.md"
    judged.write_text("| ID | text | verdict |\n|---|---|---|\n| 1 | fast one | correct |\n"
                      "| 2 | kept two | wrong |\n| 3 | fast three | lossy |\n| 4 | fast four | wrong |\n",
                      encoding="utf-8")
    data = [{"ID": i} for i in ("1", "2", "3", "4")]
    fast = {i: {"output": f"fast {w}"} for i, w in (("1", "one"), ("2", "two"), ("3", "three"), ("4", "four"))}
    done = {"2": {"text": "kept two", "self_check": 0.4}}
    counts = verdicts_count({}, data, fast, done, judged, self_checks={"1": 0.9, "2": 0.3, "3": 0.5},
                            check_threshold=0.6)
    assert counts["doubted"] == {"wrong": 1, "lossy": 1} and counts["doubted_ids"] == ["2", "3"]
    assert counts["trusted"] == {"correct": 1, "wrong": 1}
    assert counts["delivered"] == {"correct": 1, "wrong": 2, "lossy": 1}
    assert "doubted" not in verdicts_count({}, data, fast, done, judged)
