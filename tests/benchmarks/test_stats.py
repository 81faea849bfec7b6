"""bench.stats.report_write: a benchmark's figures and readable report side by side."""

from __future__ import annotations

import json

from bench.stats import report_write


def test_a_report_is_written_as_json_and_markdown_in_a_new_folder(tmp_path):
    out = tmp_path / "new" / "folder"
    report = {"model": "m.gguf", "rows": [{"ttft_ms": 12.5, "shape": "beside 3 — row by row"}]}
    path = report_write(out, "batch-invariance", report, "# Title\n\n| a |\n")
    assert path == out / "batch-invariance.md"
    assert path.read_text(encoding="utf-8") == "# Title\n\n| a |\n"
    written = (out / "batch-invariance.json").read_text(encoding="utf-8")
    assert json.loads(written) == report and written.endswith("\n")
