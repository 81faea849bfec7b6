"""``python -m bench self_check``'s parts that read no model: the verdicts
it takes from the hand-judged tables and the report rebuilt from the
committed scores."""

from __future__ import annotations

import json
from pathlib import Path

from bench import calibrate

TABLES = """\
| ID (fold) | input | clinicians' reference | fast text | verdict | retrieved examples | verdict |
|---|---|---|---|---|---|---|
| 13 (B) | The tone is characterized by paratonia . | ref | The feeling is weak. | **wrong**: tone read as feeling | The tone is stiffness . | **lossy**: approximated |

| ID | fast (cluster prefixes) | verdict | kept by the re-run | re-run text | verdict |
|---|---|---|---|---|---|
| 44 | CC : stable speech | wrong | span_replacement | CC : loss of expressive speech . | **correct**: all said |

| ID (fold) | input | fast text | re-run kept | delivered | fast verdict | delivered verdict |
|---|---|---|---|---|---|---|
| 3 / 35 (B) | The patient denies any illness . | The patient says he is well. | – | The patient denies any illness . | **wrong**: 'he' invented | **correct**: copied |

| ID (fold) | input | clinicians' reference | fast text | re-run kept | delivered | verdict |
|---|---|---|---|---|---|---|
| 136 (B) | Headaches , full subtemporal site . | ref | headaches in the back of the head. | retrieved_examples | headaches , full head area . | fast **wrong**, delivered **lossy**: site lost |
| 13 (B) | The tone is characterized by paratonia . | ref | The feeling is weak. | – | The feeling is weak. | **lossy**: judged again, otherwise |
| 999 (A) | not a laymaker row | ref | text | – | text | **wrong**: skipped |
"""


def test_every_judged_text_gets_its_own_verdict_and_contradictions_are_dropped():
    labels = calibrate.hand_labels(TABLES, {"13", "35", "44", "136"})

    assert labels == {
        ("13", "The tone is stiffness ."): "lossy",
        ("44", "CC : stable speech"): "wrong",
        ("44", "CC : loss of expressive speech ."): "correct",
        ("35", "The patient says he is well."): "wrong",
        ("35", "The patient denies any illness ."): "correct",
        ("136", "headaches in the back of the head."): "wrong",
        ("136", "headaches , full head area ."): "lossy",
    }  # "The feeling is weak." was judged wrong, then lossy: dropped


def test_the_committed_tables_yield_wrong_texts_of_real_rows():
    markdown = (Path(calibrate.ROOT) / "docs/quality/hand-judged.md").read_text(encoding="utf-8")
    labels = calibrate.hand_labels(markdown, {str(i) for i in range(1, 251)})

    verdicts = list(labels.values())
    assert len(labels) > 300 and verdicts.count("wrong") > 40
    assert labels[("141", "the liver is not working as well as it should")] == "wrong"


def test_the_committed_report_is_what_its_committed_scores_give(tmp_path):
    committed = Path(calibrate.ROOT) / "docs/quality/self-check.json"
    (tmp_path / "self-check.json").write_text(committed.read_text(encoding="utf-8"), encoding="utf-8")

    assert calibrate.self_check_main(["--reuse", "--out", str(tmp_path)]) == 0

    rebuilt = json.loads((tmp_path / "self-check.json").read_text(encoding="utf-8"))
    before = json.loads(committed.read_text(encoding="utf-8"))
    for key in ("auroc", "difference", "gates", "within_row", "self_check_threshold", "fast_wrong"):
        assert rebuilt[key] == before[key]
    today, swapped, checks_alone = rebuilt["gates"]
    assert swapped["rerun"] <= today["rerun"] and checks_alone["rerun"] <= swapped["rerun"]
    assert set(checks_alone["sent"]) <= set(swapped["sent"]) & set(today["sent"])
