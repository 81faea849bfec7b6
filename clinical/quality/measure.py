"""What the clinician is shown about an output besides its text: reading
level (:mod:`clinical.quality.readability`), the safety check (what the
output lost: :mod:`clinical.quality.safety`) and the faithfulness check
(what the output states that the input does not:
:mod:`clinical.quality.faithfulness`); plus the frames and API fields that
carry them.

Computed for every completed output (the fast one in
:func:`clinical.translation.finish.translation_finish`, the full-precision re-run's in
:func:`clinical.rerun.execute.rerun_complete`); about 10 ms once the word lists are
loaded (:func:`warm`, at engine load).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from clinical.quality import faithfulness, glossary, readability, safety
from inference.self_check import SELF_CHECK_PROMPT_VERSION

logger = logging.getLogger(__name__)

LOW_CONFIDENCE = "low_confidence"
LOW_SELF_CHECK = "low_self_check"
SAFETY_FAILED = "safety_failed"
FAITHFULNESS_FAILED = "faithfulness_failed"


@dataclass(frozen=True)
class OutputQuality:
    """Readability, safety and faithfulness of one output."""

    readability: readability.Readability
    safety: safety.SafetyResult
    faithfulness: faithfulness.FaithfulnessResult


def output_quality(*, input_text: str, output_text: str, language: str) -> OutputQuality:
    """Measure one output against its input (see the module docstring)."""
    return OutputQuality(
        readability=readability.readability_measure(input_text=input_text, output_text=output_text,
                                                    language=language),
        safety=safety.safety_check(input_text=input_text, output_text=output_text, language=language),
        faithfulness=faithfulness.faithfulness_check(input_text, output_text, language=language),
    )


def rerun_reasons(*, confidence: float | None, safety_passed: bool | None, threshold: float,
                  safety_gate: bool = True, faithfulness_passed: bool | None = None,
                  faithfulness_gate: bool = True, self_check: float | None = None,
                  self_check_threshold: float | None = None,
                  confidence_floor: float | None = None) -> list[str]:
    """Why an output needs the full-precision re-run, in this order:

    - ``low_self_check``: the model's own check (``self_check``, P(yes)) is
      below ``self_check_threshold``; with both given the confidence is not
      read (it ranks wrong texts worse: docs/quality/self-check.md) unless
      it is below ``confidence_floor`` (far below every calibrated range,
      :func:`clinical.quality.gate.confidence_floor`): ``low_confidence``;
    - else ``low_confidence``: ``confidence`` below ``threshold``, or no tokens;
    - ``safety_failed``: a fact of the input is missing;
    - ``faithfulness_failed``: the output states something the input does not.
    """
    reasons = []
    if self_check is not None and self_check_threshold is not None:
        if self_check_doubted(self_check, self_check_threshold):
            reasons.append(LOW_SELF_CHECK)
        elif confidence_floor is not None and (confidence is None or confidence < confidence_floor):
            reasons.append(LOW_CONFIDENCE)
    elif confidence is None or confidence < threshold:
        reasons.append(LOW_CONFIDENCE)
    if safety_gate and safety_passed is False:
        reasons.append(SAFETY_FAILED)
    if faithfulness_gate and faithfulness_passed is False:
        reasons.append(FAITHFULNESS_FAILED)
    return reasons


def readability_payload(*, input_fkgl, output_fkgl, score, measure: str, note: str) -> dict:
    """``{"input_fkgl", "output_fkgl", "measure", "score", "note"}``."""
    return {"input_fkgl": input_fkgl, "output_fkgl": output_fkgl, "measure": measure, "score": score,
            "note": note}


def safety_payload(*, passed: bool | None, missing: list[dict] | None) -> dict:
    """``{"passed", "missing": [{"kind", "text"}]}``."""
    return {"passed": passed, "missing": list(missing or [])}


def faithfulness_payload(*, passed: bool | None, flags: list[dict] | None) -> dict:
    """``{"passed", "flags": [{"kind", "text", "detail"}]}`` (``kind``: one
    of :data:`clinical.quality.faithfulness.KINDS`)."""
    return {"passed": passed, "flags": [{"kind": f["kind"], "text": f["text"], "detail": f.get("detail", "")}
                                        for f in flags or []]}


def self_check_doubted(p_yes: float | None, threshold: float | None) -> bool:
    """The model's own check doubts a text: its P(yes) is known and under
    ``threshold`` (the gate's, :func:`clinical.quality.gate.self_check_threshold`,
    as stored with the translation). ``False`` where either is unknown: the
    check did not run, or the confidence gated the text."""
    return p_yes is not None and threshold is not None and p_yes < threshold


def self_check_payload(*, p_yes: float | None, version: str, threshold: float | None = None,
                       sentences: list[dict] | None = None) -> dict | None:
    """``{"p_yes", "version", "threshold", "passed"}`` (P(yes) in [0, 1]
    rounded to 3 decimals; the self-check question's version; the gate's
    threshold the text was held to, :attr:`clinical.models.Translation.self_check_threshold`,
    or ``None`` where the gate read the confidence; ``passed``: P(yes) at or
    above it, ``None`` without one), ``None`` when the check did not run.
    A note checked sentence by sentence (``sentences``:
    :attr:`clinical.models.Translation.sentence_checks`) adds
    ``"sentences": [P(yes) or None]`` in order; ``p_yes`` is their lowest.

    ``passed`` false on a delivered text means the model doubts even the
    text it kept: on laymaker-dev (cross-fitted, the default model) 28 of
    250 delivered texts were below the threshold and held 7 of the 14
    hand-judged wrong ones (docs/decisions/deliver-as-written.md)."""
    if p_yes is None:
        return None
    payload = {"p_yes": round(p_yes, 3), "version": version, "threshold": threshold,
               "passed": None if threshold is None else not self_check_doubted(p_yes, threshold)}
    if sentences and len(sentences) > 1:
        payload["sentences"] = [None if c.get("p_yes") is None else round(c["p_yes"], 3) for c in sentences]
    return payload


def translation_quality_payload(translation) -> dict:
    """The fast output's quality for frames and the API:
    ``{"readability", "safety", "faithfulness", "self_check", "rerun_reason",
    "glossary"}`` (``self_check``: :func:`self_check_payload`, ``None`` when
    the model's own check did not run; ``glossary``:
    :func:`clinical.quality.glossary.glossary_display`, each entry naming its
    vocabulary)."""
    return {
        "readability": readability_payload(
            input_fkgl=translation.input_fkgl, output_fkgl=translation.output_fkgl,
            score=translation.output_readability, measure=translation.readability_measure,
            note=translation.readability_note),
        "safety": safety_payload(passed=translation.safety_passed, missing=translation.safety_missing),
        "faithfulness": faithfulness_payload(passed=translation.faithfulness_passed,
                                             flags=translation.faithfulness_flags),
        "self_check": self_check_payload(p_yes=translation.self_check, version=translation.self_check_version,
                                         threshold=translation.self_check_threshold,
                                         sentences=translation.sentence_checks),
        "rerun_reason": translation.rerun_reason,
        "glossary": glossary.glossary_display(translation.glossary),
    }


def rerun_quality_payload(rerun) -> dict:
    """The re-run output's quality: ``{"readability", "safety",
    "faithfulness", "self_check"}`` (input FKGL and measure are the
    translation's; ``self_check`` as :func:`self_check_payload`, from the
    worker's engine)."""
    translation = rerun.translation
    return {
        "readability": readability_payload(
            input_fkgl=translation.input_fkgl, output_fkgl=rerun.output_fkgl, score=rerun.output_readability,
            measure=translation.readability_measure, note=translation.readability_note),
        "safety": safety_payload(passed=rerun.safety_passed, missing=rerun.safety_missing),
        "faithfulness": faithfulness_payload(passed=rerun.faithfulness_passed, flags=rerun.faithfulness_flags),
        "self_check": self_check_payload(p_yes=rerun.self_check, version=SELF_CHECK_PROMPT_VERSION,
                                         threshold=translation.self_check_threshold),
    }


def warm() -> float:
    """Load the CMU dictionary, the drug dictionary and the HPO ontology
    now (about 5-10 s once per process). Returns the time taken in ms."""
    started = time.perf_counter()
    readability.warm()
    safety.warm()
    glossary.warm()
    faithfulness.warm()
    elapsed = (time.perf_counter() - started) * 1000
    logger.info("quality word lists loaded in %.0f ms", elapsed)
    return elapsed
