"""``python -m bench term_rates`` reports the safety check's ``term`` kind
on laymaker-dev, split by cross-fitting half, and on the hand-judged sample."""

from __future__ import annotations

import json

from bench import term_rates


def test_the_report_covers_every_source_and_the_whole_hand_judged_sample(tmp_path):
    assert term_rates.main(["--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "term-rates.json").read_text(encoding="utf-8"))
    rewrites = report["sources"]["clinicians' rewrites (changed rows)"]
    assert rewrites["rows"] == 176
    for source in report["sources"].values():
        a, b = source["halves"]["A"], source["halves"]["B"]
        assert a[0] + b[0] == source["flagged"] == len(source["flagged_rows"]) and a[1] + b[1] == source["rows"]
        assert all(row["terms"] and row["input"] for row in source["flagged_rows"])
    assert sum(sum(counts) for counts in report["hand_judged"].values()) == 40
    assert "| wrong |" in (tmp_path / "term-rates.md").read_text(encoding="utf-8")
