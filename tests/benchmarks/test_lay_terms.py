"""python -m bench lay_terms: the lay_term finding's rates over the stored
texts, and the re-runs it adds at the shipped gate."""

from __future__ import annotations

import json

from bench import lay_terms


def test_the_report_counts_the_findings_and_the_re_runs_they_add(tmp_path):
    out = tmp_path / "lay-terms"
    assert lay_terms.lay_terms_main(["--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    sets = report["sets"]
    assert sets["REFERENCE"]["n"] == 250 and sets["unseen Cochrane, delivered"]["n"] == 120
    for entry in sets.values():
        assert entry["with_lay_term"] == len(entry["texts"]) >= entry["newly_failing"]
        assert all(t["terms"] for t in entry["texts"])
    gate = report["gate"]
    assert gate["gated_after"] - gate["gated_before"] == len(gate["added"]) > 0
    assert "| this system, fast |" in out.with_suffix(".md").read_text()
    page = report["unexplained_on_the_page"]
    assert set(page) >= {"laymaker-dev"}
    for entry in page.values():
        assert 0 <= entry["unexplained_on_the_page"] == len(entry["texts"]) <= entry["unexplained_in_words"]
    assert any(e["unexplained_on_the_page"] < e["unexplained_in_words"] for e in page.values())
