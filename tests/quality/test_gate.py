"""The confidence gate's threshold: the site's setting, the model's
calibration, or the design's 0.85; and the calibration itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clinical.quality import gate
from inference.prompts import EXAMPLES_PROMPT_VERSION, PROMPT_VERSION, SPANISH_TERMS_PROMPT_VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_an_uncalibrated_model_gets_the_designs_threshold(settings):
    settings.CONFIDENCE_THRESHOLD = None
    assert gate.gate_threshold("some-new-model.gguf", PROMPT_VERSION) == gate.DEFAULT_THRESHOLD == 0.85


@pytest.fixture
def calibration_file(settings, tmp_path, monkeypatch):
    """A calibration file of one's own, read by the gate; no site threshold.
    Call it with the ``{"models": ...}`` to write."""
    path = tmp_path / "gate.json"
    read = gate._calibrations.__wrapped__
    monkeypatch.setattr(gate, "_calibrations", lambda: read(path))
    settings.CONFIDENCE_THRESHOLD = None
    return lambda models: path.write_text(json.dumps({"models": models}))


def test_a_calibrated_model_gets_its_threshold_and_a_site_setting_wins(settings, calibration_file):
    calibration_file({"m.gguf": {PROMPT_VERSION: {"threshold": 0.42}}})
    assert gate.gate_threshold("m.gguf", PROMPT_VERSION) == 0.42
    assert gate.gate_threshold("m.gguf", "2020-01-01.1") == gate.DEFAULT_THRESHOLD  # another prompt
    settings.CONFIDENCE_THRESHOLD = 0.9
    assert gate.gate_threshold("m.gguf", PROMPT_VERSION) == 0.9


def test_the_spanish_terms_prompt_is_gated_as_the_one_example_prompt_it_extends(calibration_file):
    calibration_file({"m.gguf": {PROMPT_VERSION: {"threshold": 0.42}}})
    assert gate.gate_threshold("m.gguf", SPANISH_TERMS_PROMPT_VERSION) == 0.42
    calibration_file({"m.gguf": {PROMPT_VERSION: {"threshold": 0.42}, SPANISH_TERMS_PROMPT_VERSION: {"threshold": 0.5}}})
    assert gate.gate_threshold("m.gguf", SPANISH_TERMS_PROMPT_VERSION) == 0.5  # its own calibration first


def test_the_shipped_calibration_names_its_source_and_stays_in_the_band():
    models = json.loads(gate.CALIBRATION_FILE.read_text())["models"]
    entries = [entry for prompts in models.values() for entry in prompts.values()]
    assert entries
    for entry in entries:
        assert 0 < entry["threshold"] < 1 and entry["outputs"] >= 100
        assert 0.05 <= entry["rerun_rate"] <= 0.30 and entry["source"]
    # Both prompts the product uses are calibrated for the default model.
    default = models["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"]
    assert {PROMPT_VERSION, EXAMPLES_PROMPT_VERSION} <= set(default)


def test_calibration_takes_the_highest_threshold_within_the_rate():
    # 10 outputs: two fail a check; confidence ranks them low.
    rows = [(0.2, True), (0.3, True), (0.4, False), (0.5, False), (0.6, False),
            (0.7, False), (0.8, False), (0.85, False), (0.9, False), (0.95, False)]
    point = gate.threshold_calibrate(rows, max_rerun_rate=0.30)
    # Cut at 0.5: 0.2, 0.3 (also failing) and 0.4 are below it: 3 of 10.
    assert point.threshold == 0.5 and point.rerun_rate == pytest.approx(0.3)
    assert point.failing_caught == 1.0 and point.failing_caught_by_confidence == 1.0
    assert point.auroc == pytest.approx(1.0)


def test_the_stored_threshold_reruns_exactly_the_outputs_reported():
    # The best cut is 0.123456 (3 of 10 below it); stored rounded *up* to
    # 0.1235 it would also re-run the output at 0.12347: 4 of 10, above the rate.
    rows = [(0.1, False), (0.11, True), (0.12, False), (0.123456, False), (0.12347, False),
            (0.5, False), (0.6, False), (0.7, False), (0.8, False), (0.9, False)]
    point = gate.threshold_calibrate(rows, max_rerun_rate=0.30)
    stored = json.loads(json.dumps(point.as_dict()))["threshold"]
    rerun = sum(1 for confidence, fails in rows if confidence < stored or fails)
    assert stored == round(stored, gate.THRESHOLD_DECIMALS)
    assert rerun / len(rows) == point.rerun_rate <= 0.30
    assert point.threshold == 0.1234 and point.rerun_rate == pytest.approx(0.3)


def test_failed_checks_alone_above_the_rate_are_refused():
    with pytest.raises(ValueError, match="failed checks alone"):
        gate.threshold_calibrate([(0.9, True), (0.9, True), (0.9, False)], max_rerun_rate=0.30)


def test_the_gate_reads_the_threshold_of_the_rows_model(clinician, settings, monkeypatch, db):
    from clinical.models import Translation
    from clinical.translation import admission, finish

    settings.CONFIDENCE_THRESHOLD = None
    monkeypatch.setattr(gate, "_calibrations", lambda: {"calibrated.gguf": {
        "2026-11-22.3": {"threshold": 0.3}, "2026-11-25.1": {"threshold": 0.3},
        "2026-11-25.2+c24x8k0": {"threshold": 0.3}, "2026-11-25.2+c24x8k0h": {"threshold": 0.3},
        "2026-11-25.3+c24x8k0": {"threshold": 0.3}, "2026-11-25.3+c24x8k0h": {"threshold": 0.3}}})  # the cluster prompts' stored versions
    rows = []
    for model in ("calibrated.gguf", "other.gguf"):
        row = admission.translation_create(user=clinician, text="Hypertension.")
        Translation.objects.filter(pk=row.pk).update(model_name=model)
        rows.append(finish.translation_finish(
            translation_id=row.pk, status=Translation.Status.COMPLETED, output_text="High blood pressure.",
            figures=finish.TranslationFigures(tokens_out=3, confidence=0.5)))
    assert [row.rerun_reason for row in rows] == ["", "low_confidence"]


# -- the model's self-check as the gate's measure -------------------------------

def test_the_self_check_threshold_is_the_sites_then_the_calibrated_one_for_todays_question(
        settings, tmp_path, monkeypatch):
    path = tmp_path / "gate.json"
    path.write_text(json.dumps({"models": {"m.gguf": {
        "p1": {"threshold": 0.5, "self_check": {"threshold": 0.61, "prompt_version": gate.SELF_CHECK_PROMPT_VERSION}},
        "p2": {"threshold": 0.5, "self_check": {"threshold": 0.61, "prompt_version": "an-older-question"}},
        "p3": {"threshold": 0.5}}}}))
    read = gate._calibrations.__wrapped__
    monkeypatch.setattr(gate, "_calibrations", lambda: read(path))
    settings.SELF_CHECK, settings.SELF_CHECK_THRESHOLD = True, None
    assert gate.self_check_threshold("m.gguf", "p1") == 0.61
    # scores of another wording, or no self-check calibration: the confidence gates
    assert gate.self_check_threshold("m.gguf", "p2") is None
    assert gate.self_check_threshold("m.gguf", "p3") is None
    assert gate.self_check_threshold("other.gguf", "p1") is None
    settings.SELF_CHECK_THRESHOLD = 0.7  # a site's threshold applies to any model
    assert gate.self_check_threshold("other.gguf", "p1") == 0.7
    settings.SELF_CHECK = False
    assert gate.self_check_threshold("m.gguf", "p1") is None


def test_the_default_model_ships_a_self_check_threshold_for_the_products_prompt(settings):
    from clinical.translation.prompting import translation_prompt_version

    settings.SELF_CHECK, settings.SELF_CHECK_THRESHOLD = True, None
    version = translation_prompt_version(text="Mild left knee effusion.", language="en")
    threshold = gate.self_check_threshold("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", version)
    assert threshold is not None and 0 < threshold < 1
    entry = json.loads(gate.CALIBRATION_FILE.read_text())["models"]["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"][version]
    assert entry["self_check"]["source"].startswith("python -m bench self_check")
    assert 0.05 <= entry["self_check"]["rerun_rate"] <= 0.30


def test_the_self_check_replaces_the_confidence_where_it_ran():
    from clinical.quality.measure import rerun_reasons

    common = {"safety_passed": True, "faithfulness_passed": True, "threshold": 0.55}
    assert rerun_reasons(confidence=0.9, self_check=0.3, self_check_threshold=0.57, **common) == ["low_self_check"]
    assert rerun_reasons(confidence=0.2, self_check=0.8, self_check_threshold=0.57, **common) == []
    # the check did not run (the engine was busy): the confidence gates as before
    assert rerun_reasons(confidence=0.2, self_check=None, self_check_threshold=0.57, **common) == ["low_confidence"]
    assert rerun_reasons(confidence=0.2, self_check=0.8, self_check_threshold=None, **common) == ["low_confidence"]
    assert rerun_reasons(confidence=0.9, self_check=0.3, self_check_threshold=0.57, safety_passed=False,
                         faithfulness_passed=False, threshold=0.55) == [
        "low_self_check", "safety_failed", "faithfulness_failed"]


def test_a_self_check_threshold_outside_zero_to_one_is_refused_at_start():
    """It is a probability, stored with every translation it gated: 1.5
    would fail each translation's save instead of the start."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="clinical.settings", SELF_CHECK_THRESHOLD="1.5")
    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "SELF_CHECK_THRESHOLD must be between 0 and 1, not 1.5" in done.stderr


@pytest.mark.parametrize(("value", "message"), [
    ("sometimes", "SELF_CHECK_COPY must be always, trusted or off, not 'sometimes'"),
])
def test_an_unknown_self_check_copy_rule_is_refused_at_start(value, message):
    """A typo would otherwise leave the re-run delivering texts the model
    doubts, with nothing said."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="clinical.settings", SELF_CHECK_COPY=value)
    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and message in done.stderr


def test_the_self_check_copy_rule_reads_the_old_on_and_off_values():
    code = "import django; django.setup(); from django.conf import settings; print(settings.SELF_CHECK_COPY)"
    seen = {}
    for value in ("", "1", "on", "0", "OFF", "trusted", "always"):
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="clinical.settings", SELF_CHECK_COPY=value)
        seen[value] = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                                     text=True, timeout=120, check=True).stdout.strip()
    assert seen == {"": "always", "1": "trusted", "on": "trusted", "0": "off", "OFF": "off", "trusted": "trusted",
                    "always": "always"}


def test_a_text_is_doubted_only_where_its_check_and_a_threshold_are_both_known():
    from clinical.quality.measure import self_check_doubted

    assert self_check_doubted(0.5, 0.57) and not self_check_doubted(0.57, 0.57)  # at the threshold: trusted
    assert not self_check_doubted(None, 0.57) and not self_check_doubted(0.1, None)
