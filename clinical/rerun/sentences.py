"""A note of several sentences re-run sentence by sentence: only the
sentences the one-sentence gate would re-run (the model's own check
doubted it, or a safety or faithfulness check fails on it), each as a one-sentence
translation (the unit the re-run's candidates and the check's threshold
were measured on), the others kept as streamed.

The web process checks a note sentence by sentence and stores each
sentence's text and P(yes) (:attr:`clinical.models.Translation.sentence_checks`,
:func:`clinical.translation.checking.translation_sentences_self_check`).
The worker (:func:`clinical.rerun.execute.rerun_sentences_run`) re-runs
each such sentence as :func:`sentence_translation` makes it and joins
the texts as the fast text was joined (:func:`sentences_join`).
"""

from __future__ import annotations

from clinical.models import Translation
from clinical.quality import measure as quality
from clinical.rerun import candidates as rerun_candidates
from inference.parts import translation_parts_join, translation_units


def sentences_to_rerun(translation: Translation, threshold: float | None) -> dict[int, list[str]]:
    """``{index (from 0): reasons}`` for the note's sentences that the
    one-sentence gate would re-run, in order: the model's own check doubted it (its P(yes) under
    ``threshold``, :func:`clinical.quality.measure.self_check_doubted`), or
    its text fails the safety or faithfulness check against the sentence
    (:func:`sentence_reasons`, the reasons). Empty for a translation without
    sentence checks or of one sentence. A sentence's confidence is not kept, so a
    note gated by its confidence alone (its checks did not run) is re-run
    whole."""
    checks = translation.sentence_checks or []
    if len(checks) < 2:
        return {}
    reasons = {i: sentence_reasons(translation, i, threshold) for i in range(len(checks))}
    return {i: why for i, why in reasons.items() if why}


def sentence_reasons(translation: Translation, index: int, threshold: float | None) -> list[str]:
    """Why sentence ``index`` would be re-run on its own (``rerun_reason``
    values, :mod:`clinical.quality.measure`): ``low_self_check``,
    ``safety_failed``, ``faithfulness_failed``; empty when none applies
    (about 10 ms: the two checks on the sentence)."""
    check = translation.sentence_checks[index]
    reasons = [quality.LOW_SELF_CHECK] if quality.self_check_doubted(check.get("p_yes"), threshold) else []
    text = sentence_text(translation, index)
    measured = quality.output_quality(input_text=check["input"], output_text=text, language=translation.language)
    if text and not measured.safety.passed:
        reasons.append(quality.SAFETY_FAILED)
    if text and not measured.faithfulness.passed:
        reasons.append(quality.FAITHFULNESS_FAILED)
    return reasons


def sentence_text(translation: Translation, index: int) -> str:
    """The fast text of sentence ``index`` as the clinician read it: its
    copied heading (:func:`clinical.rerun.candidates.copied_heading` of the
    sentence) and the model's answer."""
    check = translation.sentence_checks[index]
    heading, _ = rerun_candidates.copied_heading(_unit(translation, check["input"]))
    return heading + check["answer"] if check["answer"] else ""


def sentence_translation(translation: Translation, index: int, reasons: list[str]) -> Translation:
    """An unsaved one-sentence :class:`~clinical.models.Translation` for
    sentence ``index`` of ``translation``'s note: its input is the
    sentence (with its heading), its fast text :func:`sentence_text`, its
    P(yes) the sentence's, its ``rerun_reason`` ``reasons`` (:func:`sentence_reasons`;
    so a text re-run for its check alone stands unless a candidate is
    clearly better, :func:`clinical.rerun.candidates.incumbent_for`), and
    the note's language, reading level, prompt version, model, confidence
    and self-check threshold.

    Raises:
        IndexError: no such sentence.
    """
    check = translation.sentence_checks[index]
    sentence = _unit(translation, check["input"])
    sentence.output_text = sentence_text(translation, index)
    sentence.self_check = check.get("p_yes")
    sentence.rerun_reason = ",".join(reasons)
    return sentence


def sentence_answer(sentence: Translation, text: str) -> str:
    """``text`` (a candidate's text for ``sentence``, :func:`sentence_translation`)
    without the copied heading that :func:`sentences_join` puts back."""
    heading, _ = rerun_candidates.copied_heading(sentence)
    return text[len(heading):].strip() if heading and text.startswith(heading) else text.strip()


def sentences_join(translation: Translation, answers: list[str], cuts: list[bool]) -> str:
    """The note's text from one answer per sentence (without headings) and
    whether each stopped at the token limit, joined as the fast text was
    (:func:`inference.parts.translation_parts_join`).

    Raises:
        ValueError: not one answer and one flag per sentence of the note.
    """
    return translation_parts_join(translation_units(translation), answers, cut=cuts)


def _unit(translation: Translation, text: str) -> Translation:
    return Translation(input_text=text, language=translation.language, reading_level=translation.reading_level,
                       prompt_version=translation.prompt_version, model_name=translation.model_name,
                       confidence=translation.confidence, self_check_threshold=translation.self_check_threshold)
