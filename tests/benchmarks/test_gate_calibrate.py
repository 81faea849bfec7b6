"""``python -m bench gate_calibrate`` reads the dev outputs and writes the
operating point that the gate reads."""

from __future__ import annotations

import json

from bench import calibrate
from clinical.quality import gate
from tests.conftest import ROOT


def test_calibration_writes_the_operating_point_the_gate_reads(tmp_path, monkeypatch, settings, capsys):
    target = tmp_path / "gate_calibration.json"
    monkeypatch.setattr(gate, "CALIBRATION_FILE", target)
    report = tmp_path / "report.md"
    # The one-example prompt's outputs fail a check on 32.4 % of the rows: the cap leaves room above that.
    assert calibrate.gate_calibrate_main(["--outputs", str(ROOT / "docs/quality/quality-report-outputs.jsonl"),
                                "--max-rerun-rate", "0.40", "--write", "--report", str(report)]) == 0
    entry = json.loads(target.read_text())["models"]["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"]["2026-11-22.3"]
    assert entry["outputs"] == 250 and entry["rerun_rate"] <= 0.40 and entry["failing_caught"] == 1.0
    assert "half A | half B" in report.read_text()
    read = gate._calibrations.__wrapped__
    monkeypatch.setattr(gate, "_calibrations", lambda: read(target))
    settings.CONFIDENCE_THRESHOLD = None
    assert gate.gate_threshold("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "2026-11-22.3") == entry["threshold"]


def test_halves_are_fixed_and_disjoint():
    ids = [str(n) for n in range(1, 251)]
    a, b = calibrate.halves(ids)
    assert a.isdisjoint(b) and a | b == set(ids) and len(a) == 125
    from inference.examples import crossfit_folds

    assert (a, b) == crossfit_folds(ids)  # the project's one split
    assert calibrate.halves(ids) == (a, b)
