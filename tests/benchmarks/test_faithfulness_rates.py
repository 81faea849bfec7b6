"""``python -m bench faithfulness_rates`` reports the faithfulness check's
flags on laymaker-dev for the clinicians' rewrites, the published systems
this system's committed outputs of one prompt version, and the Cochrane
plain-language summaries against their abstracts."""

from __future__ import annotations

import json

from bench import stored_texts
from clinical.quality.faithfulness import KINDS


def test_the_report_reads_the_outputs_of_the_prompt_asked_for(tmp_path):
    out = tmp_path / "rates"
    assert stored_texts.faithfulness_rates_main(["--out", str(out), "--prompt-version", "2026-11-25.2+c12x8k0"]) == 0
    report = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    systems = report["systems"]
    assert set(systems) == {*stored_texts.SYSTEMS, stored_texts.OURS, stored_texts.COCHRANE}
    assert all(system["rows"] == 250 for name, system in systems.items() if name != stored_texts.COCHRANE)
    assert systems[stored_texts.COCHRANE]["rows"] == 411
    assert report["prompt_version"] == "2026-11-25.2+c12x8k0"
    for system in systems.values():
        assert set(system["rows_by_kind"]) <= set(KINDS)
        assert system["flagged_rows"] == len(system["flagged"])
    # the clinicians' rewrites are faithful by definition: a rule that flags them is a false alarm
    assert systems["REFERENCE"]["flagged_rate"] <= 0.01
    # a claim of organ failure is rare in faithful text: none of the clinicians' rewrites or the
    # published systems' outputs makes one the input does not ground (docs/quality/faithfulness.md)
    assert all(systems[name]["rows_by_kind"].get("organ_function", 0) == 0 for name in stored_texts.SYSTEMS)


def test_an_unknown_prompt_version_is_an_error_that_writes_nothing(tmp_path, capsys):
    out = tmp_path / "rates"
    assert stored_texts.faithfulness_rates_main(["--out", str(out), "--prompt-version", "no-such-prompt"]) == 2
    assert "no-such-prompt" in capsys.readouterr().out
    assert not out.with_suffix(".json").exists()
