"""The confidence gate's threshold: set, calibrated per model, or the
design's default.

Source of the default: the product's design, "if confidence < 0.85, re-run
in FP32". On the default 1.5B model that re-runs 99.6 % of laymaker-dev
outputs (median confidence 0.56), so the gate separates nothing and the
re-run lane competes with the clinicians for the CPU. A model's own
operating point is therefore calibrated on the dev rows
(``python -m bench gate_calibrate``, :func:`threshold_calibrate`) and
shipped in ``gate_calibration.json`` beside this module; the gate reads it
by the model's file name and the prompt version (``Translation.model_name``,
``Translation.prompt_version``: another prompt gives other confidences).

Order: ``CONFIDENCE_THRESHOLD`` when set (a site's decision), else the
threshold calibrated for the model and prompt version, else
:data:`DEFAULT_THRESHOLD`.

Where a self-check threshold exists for the model and prompt
(:func:`self_check_threshold`), the gate reads the model's own check of the
output instead of the confidence; the confidence's threshold stays for an
output whose check did not run (the engine was busy, or it gave way to a
clinician's translation).
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path

from django.conf import settings

from inference.prompts import PROMPT_VERSION, SPANISH_TERMS_PROMPT_VERSION
from inference.self_check import SELF_CHECK_PROMPT_VERSION

#: The design's threshold, for models not calibrated yet.
DEFAULT_THRESHOLD = 0.85
#: Decimals a calibrated threshold is stored with (gate_calibration.json).
THRESHOLD_DECIMALS = 4
CALIBRATION_FILE = Path(__file__).resolve().with_name("gate_calibration.json")


@functools.cache
def _calibrations(path: Path = CALIBRATION_FILE) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("models", {})
    except FileNotFoundError:
        return {}


#: Prompt versions read at the calibration of the prompt they extend: the
#: Spanish-terms prompt is the one-example prompt with one more line, and
#: Spanish output has no calibration of its own (no Spanish reference
#: rewrites to judge it by), so it is gated as the one-example prompt is.
CALIBRATED_AS = {SPANISH_TERMS_PROMPT_VERSION: PROMPT_VERSION}


def _calibration(model_name: str, prompt_version: str) -> dict | None:
    versions = _calibrations().get(model_name, {})
    return versions.get(prompt_version) or versions.get(CALIBRATED_AS.get(prompt_version, ""))


def calibrated_threshold(model_name: str, prompt_version: str) -> float | None:
    """The threshold ``python -m bench gate_calibrate --write`` stored for
    ``model_name`` and ``prompt_version`` (or the version it is read as,
    :data:`CALIBRATED_AS`) in :data:`CALIBRATION_FILE`, or
    ``None`` when that pair was never calibrated (no setting consulted)."""
    entry = _calibration(model_name, prompt_version)
    return float(entry["threshold"]) if entry else None


#: "Far below every calibrated range": a confidence under this fraction of
#: the lowest threshold ever calibrated (any model, any prompt version, and
#: :data:`DEFAULT_THRESHOLD`) is gated whatever the model's own check says.
CONFIDENCE_FLOOR_FRACTION = 0.5


def confidence_floor() -> float:
    """The confidence (geometric-mean token probability, in (0, 1]) below
    which an output goes to the re-run whatever the model's own check says:
    :data:`CONFIDENCE_FLOOR_FRACTION` of the lowest threshold in
    :data:`CALIBRATION_FILE` (0.4425 there, so 0.221). Source: the 1,411
    calibration outputs in docs/quality/quality-report*-outputs.jsonl have
    confidences from 0.256 up, so no output like those is held by the floor;
    an input the model cannot read (Arabic "mild asthma", answered about a
    headache) scored 0.209 with the self-check's yes."""
    thresholds = [float(entry["threshold"]) for prompts in _calibrations().values()
                  for entry in prompts.values() if "threshold" in entry]
    return round(CONFIDENCE_FLOOR_FRACTION * min([DEFAULT_THRESHOLD, *thresholds]), THRESHOLD_DECIMALS)


def self_check_threshold(model_name: str, prompt_version: str) -> float | None:
    """The P(yes) below which an output of ``model_name`` made with
    ``prompt_version`` is re-run (:mod:`inference.self_check`), or ``None``
    when the gate reads the confidence instead.

    Order: ``None`` when ``SELF_CHECK`` is off; ``SELF_CHECK_THRESHOLD`` when
    set (a site's decision); else the threshold ``python -m bench self_check
    --write`` stored for the pair under ``"self_check"`` in
    :data:`CALIBRATION_FILE`, only if it was measured with today's question
    (:data:`inference.self_check.SELF_CHECK_PROMPT_VERSION`: another wording
    gives other scores); else ``None``. Source of the calibrated value:
    :func:`threshold_calibrate` on the self-check scores of the cross-fitted
    laymaker-dev fast texts at the confidence gate's re-run rate
    (docs/quality/self-check.md).
    """
    if not settings.SELF_CHECK:
        return None
    if settings.SELF_CHECK_THRESHOLD is not None:
        return settings.SELF_CHECK_THRESHOLD
    entry = (_calibration(model_name, prompt_version) or {}).get("self_check")
    if not entry or entry.get("prompt_version") != SELF_CHECK_PROMPT_VERSION:
        return None
    return float(entry["threshold"])


def gate_threshold(model_name: str, prompt_version: str) -> float:
    """The confidence below which an output of ``model_name`` (an engine's
    ``info.model``, e.g. ``qwen2.5-coder-1.5b-instruct-q4_k_m.gguf``) made
    with ``prompt_version`` is re-run; see the module docstring for the
    order."""
    if settings.CONFIDENCE_THRESHOLD is not None:
        return settings.CONFIDENCE_THRESHOLD
    calibrated = calibrated_threshold(model_name, prompt_version)
    return calibrated if calibrated is not None else DEFAULT_THRESHOLD


@dataclass(frozen=True)
class OperatingPoint:
    """The gate on a set of outputs at one threshold.

    ``rerun_rate``: share re-run (confidence below ``threshold`` or a
    failed check); ``failing_caught``: share of the outputs that fail a
    check which the gate re-runs (1.0 while failed checks are a reason of
    their own); ``failing_caught_by_confidence``: the share confidence alone
    would catch; ``auroc``: how well confidence ranks failing outputs below
    passing ones (0.5 = chance; Hanley & McNeil 1982), ``None`` with one class.
    """

    threshold: float
    outputs: int
    failing: int
    rerun_rate: float
    failing_caught: float
    failing_caught_by_confidence: float
    auroc: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def auroc(labels: list[bool], scores: list[float]) -> float | None:
    """Area under the ROC curve of ``scores`` for the ``True`` ``labels``
    (scikit-learn's ``roc_auc_score``; 0.5 = chance, Hanley & McNeil 1982),
    ``None`` when the labels hold one class only."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores)) if 0 < sum(labels) < len(labels) else None


def operating_point(rows: list[tuple[float | None, bool]], threshold: float, *,
                    checks_gate: bool = True) -> OperatingPoint:
    """The gate's figures for ``rows`` of ``(confidence, fails_a_check)``
    at ``threshold`` rounded to :data:`THRESHOLD_DECIMALS` (the value
    stored and reported is the value evaluated; a missing confidence always
    re-runs)."""
    threshold = round(threshold, THRESHOLD_DECIMALS)

    def low(confidence: float | None) -> bool:
        return confidence is None or confidence < threshold

    failing = [row for row in rows if row[1]]
    rerun = [row for row in rows if low(row[0]) or (checks_gate and row[1])]
    labels = [fails for _, fails in rows]
    scores = [-(confidence if confidence is not None else 0.0) for confidence, _ in rows]
    return OperatingPoint(
        threshold=threshold, outputs=len(rows), failing=len(failing),
        rerun_rate=len(rerun) / len(rows) if rows else 0.0,
        failing_caught=(sum(1 for c, _ in failing if low(c) or checks_gate) / len(failing)) if failing else 1.0,
        failing_caught_by_confidence=(sum(1 for c, _ in failing if low(c)) / len(failing)) if failing else 1.0,
        auroc=auroc(labels, scores))


def threshold_calibrate(rows: list[tuple[float | None, bool]], *, max_rerun_rate: float = 0.30) -> OperatingPoint:
    """The highest threshold whose re-run rate on ``rows`` stays within
    ``max_rerun_rate`` (the issue's band is 5-30 %: above it the re-run lane
    takes the CPU from the clinicians), considering each observed confidence
    as a cut. Each cut is rounded *down* to the stored decimals before it
    is evaluated: rounding up could let the stored threshold re-run outputs
    whose confidence lies between the cut and its rounding.

    Raises:
        ValueError: no rows, or the failed checks alone exceed the rate.
    """
    if not rows:
        raise ValueError("no outputs to calibrate on")
    floor = operating_point(rows, 0.0)
    if floor.rerun_rate > max_rerun_rate:
        raise ValueError(f"failed checks alone re-run {floor.rerun_rate:.1%}, above {max_rerun_rate:.0%}")
    best = floor
    for cut in sorted({_stored_floor(c) for c, _ in rows if c is not None}):
        point = operating_point(rows, cut)
        if point.rerun_rate > max_rerun_rate:
            break
        best = point
    return best


def _stored_floor(confidence: float) -> float:
    """``confidence`` rounded down to :data:`THRESHOLD_DECIMALS` decimals
    (through its shortest repr, so 0.5629 stays 0.5629)."""
    step = Decimal(1).scaleb(-THRESHOLD_DECIMALS)
    return float(Decimal(repr(confidence)).quantize(step, rounding=ROUND_FLOOR))
