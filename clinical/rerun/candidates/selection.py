"""The re-run's measured candidates and the choice among them: each
candidate measured the way the product measures an output
(:func:`candidate_measure`, :class:`Candidate`), ranked
(:func:`candidate_tier`, :func:`candidate_select`), the early stop
(:func:`candidate_good_enough`), the fast text a candidate must beat
(:class:`Incumbent`, :func:`incumbent_for`) and the diagnosis as written
where the text is still doubted (:func:`candidate_as_written`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from django.conf import settings

from clinical.models import Translation
from clinical.quality import measure as quality
from clinical.quality.gate import gate_threshold
from clinical.rerun.candidates.plan import AS_WRITTEN, FULL_PRECISION, SPAN_REPLACEMENT
from inference.confidence import sequence_confidence
from inference.examples import normalise


@dataclass(frozen=True)
class Candidate:
    """One candidate's output, measured.

    Attributes:
        name: one of :data:`CANDIDATE_NAMES`.
        input_text: the translation's input it was measured against.
        text: the output text (stripped).
        logprobs: natural-log probability of each generated token; for
            ``span_replacement``, those of its term list.
        ms: generation time (ms).
        prompt_version: the version of the messages it was generated from.
        quality: the product's measures of ``text`` against the input.
        replaced: ``span_replacement`` only: ``[(term, plain words)]`` kept.
        copied: the text was built from the input, not written by the model
            (``span_replacement``).
        self_check: the model's own check of ``text`` against the input
            (P(yes), :func:`inference.self_check.self_check_run`), ``None``
            where the gate reads the confidence (no self-check threshold) or
            it did not run.
    """

    name: str
    input_text: str
    text: str
    logprobs: tuple[float, ...]
    ms: float
    prompt_version: str
    quality: quality.OutputQuality
    replaced: tuple[tuple[str, str], ...] = ()
    copied: bool = False
    self_check: float | None = None
    confidence: float | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "confidence", sequence_confidence(self.logprobs))

    @property
    def passed(self) -> bool:
        """Both checks pass: nothing of the input lost, nothing added."""
        return self.quality.safety.passed and self.quality.faithfulness.passed

    @property
    def problems(self) -> int:
        """Facts the safety check finds missing plus statements the
        faithfulness check flags (0 when :attr:`passed`)."""
        return len(self.quality.safety.missing) + len(self.quality.faithfulness.flags)

    def record(self) -> dict:
        """The compact record stored on ``Rerun.candidates`` and in the audit
        event, no clinical text: ``{"name", "safety_passed",
        "faithfulness_passed", "safety_missing": {kind: n},
        "faithfulness_flags": {kind: n}, "confidence", "tokens", "ms",
        "fkgl", "prompt_version", "self_check"}`` (+ ``"replaced": n`` for
        span replacement)."""
        record = {
            "name": self.name,
            "safety_passed": self.quality.safety.passed,
            "faithfulness_passed": self.quality.faithfulness.passed,
            "safety_missing": self.quality.safety.missing_counts(),
            "faithfulness_flags": self.quality.faithfulness.counts_by_kind(),
            "confidence": None if self.confidence is None else round(self.confidence, 4),
            "tokens": len(self.logprobs),
            "ms": round(self.ms, 1),
            "fkgl": self.quality.readability.output_fkgl,
            "prompt_version": self.prompt_version,
            "self_check": None if self.self_check is None else round(self.self_check, 4),
        }
        if self.copied:
            record["replaced"] = len(self.replaced)
        return record


def candidate_measure(*, translation: Translation, name: str, text: str, logprobs: list[float], ms: float,
                      prompt_version: str, replaced: list[tuple[str, str]] | None = None,
                      self_check: float | None = None) -> Candidate:
    """Measure one candidate's ``text`` against the translation's input
    (:func:`clinical.quality.measure.output_quality`, about 10 ms);
    ``self_check`` is its P(yes) when the model checked it."""
    measured = quality.output_quality(input_text=translation.input_text, output_text=text.strip(),
                                      language=translation.language)
    return Candidate(name=name, input_text=translation.input_text, text=text.strip(), logprobs=tuple(logprobs),
                     ms=ms, prompt_version=prompt_version, quality=measured, replaced=tuple(replaced or ()), copied=name == SPAN_REPLACEMENT,
                     self_check=self_check)


def candidate_tier(candidate: Candidate) -> int:
    """2: a text the model wrote that is not the input again; 1: the input
    with at least one term replaced; 0: the input unchanged (same words and
    punctuation, any case or spacing: :func:`inference.examples.normalise`),
    or a question where the input asks none ("how often does the patient
    urinate?" for "UROLOGICAL : Frequency ."): like the input unchanged it
    passes every check and explains nothing, since it states no finding."""
    if normalise(candidate.text) == normalise(candidate.input_text) or _asks(candidate):
        return 0
    return 1 if candidate.copied else 2


def _asks(candidate: Candidate) -> bool:
    """The candidate asks a question and the input asks none."""
    return "?" in candidate.text and "?" not in candidate.input_text


def _fkgl_within(candidate: Candidate, reading_level: int) -> bool:
    fkgl = candidate.quality.readability.output_fkgl
    return fkgl is not None and fkgl <= reading_level


def candidate_select(candidates: list[Candidate], *, reading_level: int,
                     incumbent: Incumbent | None = None,
                     self_check_threshold: float | None = None) -> Candidate | None:
    """The candidate that replaces the fast text, or ``None`` when the fast
    text stands.

    Rule: among the candidates that pass both the safety and the
    faithfulness check (with an ``incumbent``, the fast text that passed both
    checks, :func:`incumbent_for`: only those it allows,
    :meth:`Incumbent.allows`), the best by, in order,

    1. what it is (:func:`candidate_tier`): a text the model wrote that
       differs from the input, above the input with some terms replaced
       (``span_replacement``, the safety net: on 120 sentences the prompt
       had not seen it scored SARI 35.4 against 40.4 for retrieved
       examples, and its confidence is that of a term list, not of the
       text), above the input unchanged (it passes every check but
       explains nothing; the rule's record: docs/decisions/rerun-candidates.md);
    2. the model's own check (P(yes), :attr:`Candidate.self_check`) rounded
       to 0.01 when every candidate that passed has one: it ranks a wrong
       text below a correct or lossy one of the same sentence in 61 of 77
       hand-judged pairs (docs/quality/self-check.md); else confidence
       rounded to 0.01 (geometric-mean token probability: higher is the
       model's more certain reading. It is a weak ranker of failing outputs
       (AUROC 0.57, clinical/quality/gate_calibration.json), so it only
       orders outputs that already passed both checks; across these
       candidates it also follows the measured order, retrieved examples
       above the plain prompt above sampling, which draws less likely
       tokens by design);
    3. FKGL at or under ``reading_level`` (the grade the clinician asked for);
    4. lower FKGL;
    5. earlier in ``RERUN_CANDIDATES``.

    When none passes: with an ``incumbent``, ``None`` (the fast text
    stands); else the one with the fewest failed checks, then the fewest
    problems (missing facts plus flagged statements), then the highest
    confidence, then the earliest: the caller records it and its failed
    checks, so the clinician is told to review it.

    Then, with ``self_check_threshold``: where the text this rule delivers
    (the fast text when it stands) is under it, the model doubts it, and a
    candidate that is the input unchanged (same words, :func:`inference.examples.normalise`),
    passes both checks and is checked at or above the threshold is
    delivered instead (the highest P(yes), then the earliest): a wrong text
    is worse than none, and the clinician is told it is the diagnosis as
    written. Measured on laymaker-dev (docs/decisions/deliver-as-written.md,
    every candidate of the 62 gated rows replayed, cross-fitted folds,
    hand-judged): on fold A wrong texts 9 -> 6, correct 7 -> 10; on fold B
    wrong 1 -> 1, correct 17 -> 16; SARI of the gated rows 36.9 -> 36.1 and
    46.4 -> 41.4 (a copy explains nothing). Letting the input with terms
    replaced (tier 1) replace a doubted text as well made 2 more texts
    wrong on fold B, so it does not. Off with ``SELF_CHECK_COPY=off``.

    Args:
        candidates: measured candidates in the order they were generated.
        reading_level: the US grade asked for.
        incumbent: the fast text, when it passed both checks.
        self_check_threshold: the threshold the translation was gated by
            (:attr:`clinical.models.Translation.self_check_threshold`), or
            ``None`` where the confidence gated it.

    Raises:
        ValueError: ``candidates`` is empty.
    """
    if not candidates:
        raise ValueError("no candidate to select from")
    chosen = _select(candidates, reading_level=reading_level, incumbent=incumbent)
    if self_check_threshold is None:
        return chosen
    delivered = chosen.self_check if chosen is not None else incumbent.self_check
    if not quality.self_check_doubted(delivered, self_check_threshold):
        return chosen
    order = {id(c): index for index, c in enumerate(candidates)}
    copies = [c for c in candidates if c.passed and normalise(c.text) == normalise(c.input_text)
              and c.self_check is not None and not quality.self_check_doubted(c.self_check, self_check_threshold)]
    if not copies:
        return chosen
    return max(copies, key=lambda c: (round(c.self_check, 2), -order[id(c)]))


def candidate_as_written(*, translation: Translation, chosen: Candidate | None,
                         self_check_threshold: float | None) -> Candidate | None:
    """The diagnosis as written (:data:`AS_WRITTEN`, the input unchanged,
    no logprobs, not checked by the model), where the text the re-run would
    deliver is still doubted: ``chosen``'s P(yes), or the fast text's
    (``translation.self_check``) where ``chosen`` is ``None`` and the fast
    text stands, is under ``self_check_threshold``. ``None`` where it is not
    doubted, where no threshold applies, or where that P(yes) is unknown
    (the check did not run: nothing says the text is wrong).

    A wrong text is worse than none for a patient: measured on laymaker-dev
    (the 62 gated rows' every candidate replayed, docs/decisions/deliver-as-written.md,
    one reader's verdicts over the 235 judged rows as delivered), this rule
    after :func:`candidate_select`'s trusted copy gives wrong texts 12 -> 6,
    correct 130 -> 125 (the model's check also doubts some correct texts,
    and a copy of a sentence the clinicians changed counts as lossy),
    SARI 36.6 -> 35.0 (a copy explains nothing). The clinician is told
    (:func:`clinical.rerun.change_note.rerun_change_note`) and the page keeps the
    doubted text as the fast draft to read. ``SELF_CHECK_COPY=trusted``
    keeps only the trusted copy of :func:`candidate_select`.
    """
    p_yes = chosen.self_check if chosen is not None else translation.self_check
    if not quality.self_check_doubted(p_yes, self_check_threshold):
        return None
    return candidate_measure(translation=translation, name=AS_WRITTEN, text=translation.input_text, logprobs=[],
                             ms=0.0, prompt_version=translation.prompt_version)


def _select(candidates: list[Candidate], *, reading_level: int, incumbent: Incumbent | None) -> Candidate | None:
    """:func:`candidate_select` before its self-check fallback."""
    order = {id(c): index for index, c in enumerate(candidates)}
    if incumbent is not None:
        candidates = [c for c in candidates if incumbent.allows(c)]
    passing = [c for c in candidates if c.passed]
    if passing:
        checked = all(c.self_check is not None for c in passing)
        return max(passing, key=lambda c: (
            candidate_tier(c),
            _score(c, checked),
            _fkgl_within(c, reading_level),
            -(c.quality.readability.output_fkgl if c.quality.readability.output_fkgl is not None else math.inf),
            -order[id(c)]))
    if incumbent is not None:
        return None
    return min(candidates, key=lambda c: (
        (not c.quality.safety.passed) + (not c.quality.faithfulness.passed),
        c.problems,
        -(c.confidence or 0.0),
        order[id(c)]))


def _score(candidate: Candidate, checked: bool) -> float:
    """The candidate's rank score rounded to 0.01: its self-check when
    ``checked``, else its confidence (-1 when missing)."""
    value = candidate.self_check if checked else candidate.confidence
    return round(value, 2) if value is not None else -1.0


def candidate_good_enough(candidate: Candidate, *, model_name: str, incumbent: Incumbent | None = None,
                          self_check_threshold: float | None = None) -> bool:
    """Stop generating further candidates: ``candidate`` was written by the
    model and is not the input again (:func:`candidate_tier` 2), passes both
    checks, and the gate itself would not have re-run it: its self-check is
    at or above ``self_check_threshold`` where both are known
    (:func:`clinical.quality.gate.self_check_threshold` of the translation),
    else its confidence is at or above the gate's threshold for
    ``model_name`` and its prompt version
    (:func:`clinical.quality.gate.gate_threshold`); with an ``incumbent``,
    it may also replace the fast text (:meth:`Incumbent.allows`). Saves the
    CPU the re-run lane shares with the clinicians."""
    if not (candidate.passed and candidate_tier(candidate) == 2
            and (incumbent is None or incumbent.allows(candidate))):
        return False
    if self_check_threshold is not None and candidate.self_check is not None:
        return not quality.self_check_doubted(candidate.self_check, self_check_threshold)
    return (candidate.confidence is not None
            and candidate.confidence >= gate_threshold(model_name, candidate.prompt_version))


@dataclass(frozen=True)
class Incumbent:
    """The fast text, when it passed both checks and was re-run for a low
    self-check or low confidence alone: a candidate must be clearly better
    to replace it. Where both it and the candidate carry a self-check
    (:attr:`Candidate.self_check`), "better" is a higher P(yes) by more than
    ``margin``; else the confidence rule below.

    Confidence (geometric-mean token probability) ranks failing outputs
    weakly on this model (AUROC 0.638, docs/decisions/confidence-gate.md), and a
    candidate from other messages (other examples, sampling) is another
    text, not a more exact reading of the same one; so such a candidate
    replaces a passing fast text only when it passes both checks, was
    written by the model (:func:`candidate_tier` 2) and its confidence is
    more than ``margin`` above the fast text's (a tie keeps the fast text).
    ``full_precision`` (the same messages in full precision: the design's
    re-run) is always allowed. The margin (``RERUN_REPLACE_MARGIN``, default
    0) was measured on both cross-fit halves of laymaker-dev
    (docs/decisions/rerun-candidates.md): a margin chosen on one half lowered SARI
    on the other, so the default only keeps a passing fast text against a
    candidate that is not more confident than it.

    Attributes:
        confidence: the fast text's confidence (0-1), ``None`` if unknown
            (then only ``full_precision`` may replace it).
        margin: confidence (or P(yes)) a candidate must add beyond a tie
            (0-1; ``math.inf``: none but ``full_precision`` may).
        self_check: the fast text's self-check (P(yes)), ``None`` if it did
            not run.
    """

    confidence: float | None
    margin: float
    self_check: float | None = None

    def allows(self, candidate: Candidate) -> bool:
        """``candidate`` may replace the fast text (if it passes the checks)."""
        if candidate.name == FULL_PRECISION:
            return True
        if not (candidate.passed and candidate_tier(candidate) == 2):
            return False
        if self.self_check is not None and candidate.self_check is not None:
            return candidate.self_check > self.self_check + self.margin
        return (self.confidence is not None and candidate.confidence is not None
                and candidate.confidence > self.confidence + self.margin)


def incumbent_for(translation: Translation, *, margin: float | None = None) -> Incumbent | None:
    """The fast text as :class:`Incumbent` when it was re-run for a low
    self-check or low confidence alone (``rerun_reason`` is
    ``low_self_check`` or ``low_confidence``: it passed both checks);
    ``None`` when it failed a check (any candidate that passes may replace
    it). ``margin`` defaults to ``settings.RERUN_REPLACE_MARGIN``."""
    reasons = [r for r in (translation.rerun_reason or "").split(",") if r]
    if reasons not in ([quality.LOW_CONFIDENCE], [quality.LOW_SELF_CHECK]):
        return None
    return Incumbent(confidence=translation.confidence,
                     margin=settings.RERUN_REPLACE_MARGIN if margin is None else margin,
                     self_check=translation.self_check)
