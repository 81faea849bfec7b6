"""The quality benchmark (bench/quality.py) end to end on three laymaker
sentences and one Cochrane abstract with the fake engine: outputs cached,
every system column of the CSV scored, report files written."""

from __future__ import annotations

import json

import pytest

from bench import quality
from inference.prompts import PROMPT_VERSION


def test_quality_bench_writes_one_table_with_every_system_column(tmp_path):
    out = tmp_path / "quality"
    assert quality.main(["--limit", "3", "--cochrane", "1", "--engine", "fake", "--out", str(out)]) == 0

    report = json.loads(out.with_suffix(".json").read_text())
    _, columns = quality.laymaker_rows()
    assert report["laymaker_system_columns"] == columns and columns
    names = [row["system"] for row in report["laymaker"]]
    assert names[0].startswith("this system") and names[1:-2] == columns
    assert names[-2:] == ["REFERENCE (clinicians)", "identity (input copied)"]
    ours, *_, reference, identity = report["laymaker"]
    assert ours["n"] == 3 and {"sari", "fkgl", "safety_pass_pct", "rerun_pct", "low_confidence_pct"} <= set(ours)
    assert reference["sari"] > identity["sari"]  # the clinicians' own text beats copying the input
    assert "rerun_pct" not in reference
    assert [row["n"] for row in report["cochrane"]] == [1, 1, 1]

    cached = [json.loads(line) for line in (tmp_path / "quality-outputs.jsonl").read_text().splitlines()]
    assert [row["key"] for row in cached] == ["laymaker-1", "laymaker-2", "laymaker-3", "cochrane-1"]
    markdown = out.with_suffix(".md").read_text()
    assert "| this system (fake-echo) | 3 |" in markdown and all(f"| {c} | 3 |" in markdown for c in columns)
    assert f"## Cochrane val (first 1 of {report['cochrane_total']} abstracts)" in markdown
    assert "A subset, the rest still being generated" in markdown
    ours_c = report["cochrane"][0]
    assert f"* **Cochrane abstracts.** {ours_c['rerun_pct']} % would be re-run" in markdown


def test_a_report_without_cochrane_has_no_cochrane_notes(tmp_path):
    out = tmp_path / "quality"
    assert quality.main(["--limit", "1", "--cochrane", "0", "--engine", "fake", "--out", str(out)]) == 0
    markdown = out.with_suffix(".md").read_text()
    assert "## Cochrane val" not in markdown and "**Cochrane abstracts.**" not in markdown


def test_a_report_over_every_cochrane_abstract_is_not_called_a_subset(tmp_path, monkeypatch):
    every = quality.cochrane_pairs()[:2]
    monkeypatch.setattr(quality, "cochrane_pairs", lambda: every)
    out = tmp_path / "quality"
    assert quality.main(["--limit", "1", "--cochrane", "-1", "--engine", "fake", "--out", str(out)]) == 0

    markdown = out.with_suffix(".md").read_text()
    assert "## Cochrane val (all 2 abstracts)" in markdown and "subset" not in markdown
    assert "| this system (fake-echo) | 2 |" in markdown


def test_a_resumed_run_reuses_cached_outputs(tmp_path):
    out = tmp_path / "quality"
    args = ["--limit", "2", "--cochrane", "0", "--engine", "fake", "--out", str(out)]
    quality.main(args)
    quality.main([*args, "--resume"])
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["engine"]["cached_rows"] == 2 and report["cochrane"] == []
    assert len((tmp_path / "quality-outputs.jsonl").read_text().splitlines()) == 2


def test_a_resumed_run_regenerates_outputs_made_with_another_prompt(tmp_path):
    out = tmp_path / "quality"
    args = ["--limit", "2", "--cochrane", "0", "--engine", "fake", "--out", str(out)]
    quality.main(args)
    cache = tmp_path / "quality-outputs.jsonl"
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    assert {row["prompt_version"] for row in rows} == {PROMPT_VERSION}
    rows[0]["prompt_version"] = "an-older-prompt"
    cache.write_text("".join(json.dumps(row) + "\n" for row in rows))

    quality.main([*args, "--resume"])
    report = json.loads(out.with_suffix(".json").read_text())
    assert (report["engine"]["cached_rows"], report["engine"]["stale_rows_ignored"]) == (1, 1)
    assert f"prompt {PROMPT_VERSION} of" in out.with_suffix(".md").read_text()


@pytest.mark.slow  # --engine llamacpp: the default 1.5B model
def test_a_resumed_run_counts_cached_outputs_of_another_llamacpp_build(tmp_path, capsys):
    from inference import weights

    out = tmp_path / "quality"
    args = ["--limit", "3", "--cochrane", "0", "--out", str(out)]
    quality.main([*args, "--engine", "fake"])
    cache = tmp_path / "quality-outputs.jsonl"
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    current = quality._llamacpp_version()
    for row, version in zip(rows, ("0.0.1", None, current), strict=True):  # another build, unrecorded, this one
        row.update(engine="llamacpp", model=weights.default_gguf_path().name)
        if version:
            row["engine_version"] = version
    cache.write_text("".join(json.dumps(row) + "\n" for row in rows))

    assert quality.main([*args, "--engine", "llamacpp", "--resume"]) == 0  # every row cached: no model loaded
    engine = json.loads(out.with_suffix(".json").read_text())["engine"]
    assert (engine["cached_rows"], engine["engine_version"]) == (3, current)
    assert engine["cached_rows_other_engine_version"] == 2
    assert f"2 cached outputs reused that were made by another or an unrecorded engine version than {current}" \
        in capsys.readouterr().out


def test_shards_share_one_cache_and_only_the_complete_set_is_scored(tmp_path):
    """Two ``--shard`` runs split the inputs; the report appears once every
    row exists."""
    out = tmp_path / "quality"
    args = ["--limit", "3", "--cochrane", "1", "--engine", "fake", "--out", str(out)]
    assert quality.main([*args, "--shard", "1/2"]) == 0
    cache = tmp_path / "quality-outputs.jsonl"
    assert [json.loads(line)["key"] for line in cache.read_text().splitlines()] == ["laymaker-2", "cochrane-1"]
    assert not out.with_suffix(".json").exists()

    assert quality.main([*args, "--shard", "0/2"]) == 0
    assert sorted(json.loads(line)["key"] for line in cache.read_text().splitlines()) == [
        "cochrane-1", "laymaker-1", "laymaker-2", "laymaker-3"]
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["engine"]["cached_rows"] == 2 and report["laymaker"][0]["n"] == 3


def test_a_malformed_shard_is_refused():
    with pytest.raises(SystemExit):
        quality.main(["--engine", "fake", "--shard", "2/2"])


def test_the_retrieval_method_is_cross_fitted_and_reported_beside_todays_prompt(tmp_path):
    """Every row's examples come from the other half's pool; both methods
    are scored on the same rows with TTFT and prompt tokens."""
    from inference.examples import crossfit_folds

    out = tmp_path / "quality"
    assert quality.main(["--limit", "6", "--cochrane", "0", "--engine", "fake", "--k", "3",
                         "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "quality-examples-outputs.jsonl").read_text().splitlines()]
    half_a, half_b = crossfit_folds(r["ID"] for r in quality.laymaker_rows()[0])
    assert len(rows) == 6
    for row in rows:
        row_id = row["key"].removeprefix("laymaker-")
        assert row["fold"] == ("A" if row_id in half_a else "B")
        other = half_b if row["fold"] == "A" else half_a
        assert len(row["example_ids"]) == 3 and set(row["example_ids"]) <= other
        assert row["ttft_ms"] is not None and row["prompt_tokens"] and row["k"] == 3
    section = report["crossfit"]
    assert section["self_examples"] == 0
    assert [r["system"].split(",")[0] for r in section["rows"][:2]] == ["today's prompt (2026-11-22.3)",
                                                                         "retrieved per sentence"]
    assert section["rows"][0]["n"] == section["rows"][1]["n"] == 6
    assert "## Retrieved examples, cross-fitted" in out.with_suffix(".md").read_text()


def test_a_tuning_run_scores_one_fold_with_the_retrieval_method_only(tmp_path):
    out = tmp_path / "quality"
    assert quality.main(["--limit", "8", "--cochrane", "0", "--engine", "fake", "--methods", "examples",
                         "--fold", "A", "--placement", "inline", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    assert not (tmp_path / "quality-outputs.jsonl").exists()
    ours = report["laymaker"][0]
    assert ours["system"].startswith("retrieved examples") and ours["n"] == len(quality.crossfit_plan(
        quality.laymaker_rows()[0][:8], "A"))


def test_cluster_prefixes_are_reported_beside_todays_prompt_and_per_sentence_retrieval(tmp_path):
    """With --clusters the section sets three methods on the same rows, and
    the cluster rows carry the product's version string for their settings."""
    from inference.prompts import ClusterPrompt

    out = tmp_path / "quality"
    assert quality.main(["--limit", "6", "--cochrane", "0", "--engine", "fake", "--clusters", "3",
                         "--per-cluster", "2", "--k", "0", "--placement", "inline", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    section = report["crossfit"]
    assert [m.split(" (")[0].split(",")[0] for m in section["methods"]] == [
        "today's prompt", "retrieved per sentence", "cluster prefixes"]
    rows = [json.loads(line) for line in (tmp_path / "quality-examples-outputs.jsonl").read_text().splitlines()]
    versions = {r["prompt_version"] for r in rows if r.get("clusters") == 3}
    assert versions == {ClusterPrompt(3, 2, 0).version}
    assert {r["k"] for r in rows} == {0, 6}  # the per-sentence rows were generated beside them
    assert all(r["n"] == 6 for r in section["rows"] if r["system"].endswith(", all"))
    assert "re-run (threshold)" in out.with_suffix(".md").read_text()
