"""The exit of a translation: its row put in its final state exactly once,
the output measured (readability, safety, faithfulness), the confidence
gate decided, the audit event written and, where the gate doubts the text,
the full-precision re-run dispatched, all in one transaction
(:func:`translation_finish`); and what a translation that ended in
``error`` is called for the client (:func:`translation_failure`).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from clinical import audit
from clinical.models import Translation
from clinical.quality import gate, glossary
from clinical.quality import measure as quality
from clinical.rerun import dispatch
from clinical.translation.admission import ENGINE_RESTART_RETRY_AFTER_S
from inference.self_check import SELF_CHECK_PROMPT_VERSION


@dataclass
class TranslationFigures:
    """Measured figures of one run (ms from the server receiving the request)."""

    queue_wait_ms: float | None = None
    ttft_ms: float | None = None
    total_ms: float | None = None
    tokens_in: int | None = None
    tokens_out: int = 0
    confidence: float | None = None
    finish_reason: str = ""
    #: The model's own check of the output (P(yes)), ``None`` when it did not run.
    self_check: float | None = None
    #: A note of several sentences checked sentence by sentence
    #: (:attr:`clinical.models.Translation.sentence_checks`); ``self_check`` is their lowest P(yes).
    sentence_checks: list[dict] | None = None


@transaction.atomic
def translation_finish(*, translation_id: int, status: str, output_text: str,
                       figures: TranslationFigures, error_class: str = "") -> Translation:
    """Put a pending translation in its final state, exactly once, with its
    audit event in the same transaction.

    A completed output is measured (readability, safety and faithfulness
    checks: :func:`clinical.quality.measure.output_quality`, about 10 ms). A
    completed translation whose self-check (``figures.self_check``, P(yes))
    is below its threshold, or, where it did not run, whose confidence is
    below the threshold (:func:`clinical.quality.measure.rerun_reasons`), whose
    safety check failed (unless ``SAFETY_RERUN`` is off) or whose
    faithfulness check flagged a statement (unless ``FAITHFULNESS_RERUN`` is
    off) gets a full-precision
    re-run queued in the same transaction
    (:func:`clinical.rerun.dispatch.rerun_request`); ``rerun_reason`` says which.

    The first call wins: a translation that is already final is returned
    unchanged, so a late or repeated call can never overwrite an outcome.

    Raises:
        ValueError: ``status`` is not a final status.
        Translation.DoesNotExist: unknown id.
    """
    if status not in Translation.FINAL_STATUSES:
        raise ValueError(f"not a final status: {status}")
    row = Translation.objects.select_for_update().get(pk=translation_id)
    if row.status != Translation.Status.PENDING:
        return row
    row.status = status
    row.output_text = output_text
    row.error_class = error_class[:120]
    row.finished_at = timezone.now()
    row.queue_wait_ms = figures.queue_wait_ms
    row.ttft_ms = figures.ttft_ms
    row.total_ms = figures.total_ms
    row.tokens_in = figures.tokens_in
    row.tokens_out = figures.tokens_out
    row.confidence = figures.confidence
    row.finish_reason = figures.finish_reason
    reasons = []
    if status == Translation.Status.COMPLETED:
        _quality_store(row)
        if figures.self_check is not None:
            row.self_check, row.self_check_version = figures.self_check, SELF_CHECK_PROMPT_VERSION
        row.sentence_checks = figures.sentence_checks
        row.self_check_threshold = gate.self_check_threshold(row.model_name, row.prompt_version)
        reasons = quality.rerun_reasons(confidence=row.confidence, safety_passed=row.safety_passed,
                                        threshold=gate.gate_threshold(row.model_name, row.prompt_version),
                                        safety_gate=settings.SAFETY_RERUN,
                                        faithfulness_passed=row.faithfulness_passed,
                                        faithfulness_gate=settings.FAITHFULNESS_RERUN,
                                        self_check=row.self_check,
                                        self_check_threshold=row.self_check_threshold,
                                        confidence_floor=gate.confidence_floor())
        row.rerun_reason = ",".join(reasons)
    row.save()
    audit.audit_translation(translation=row)
    if reasons:
        dispatch.rerun_request(translation=row)
    return row


def _quality_store(row: Translation) -> None:
    """Set the readability, safety and faithfulness fields of a completed
    row (unsaved)."""
    measured = quality.output_quality(input_text=row.input_text, output_text=row.output_text,
                                      language=row.language)
    r = measured.readability
    row.input_fkgl, row.output_fkgl, row.output_readability = r.input_fkgl, r.output_fkgl, r.output_score
    row.readability_measure, row.readability_note = r.measure, r.note[:200]
    row.safety_passed = measured.safety.passed
    row.safety_missing = measured.safety.missing_dicts()
    row.faithfulness_passed = measured.faithfulness.passed
    row.faithfulness_flags = measured.faithfulness.flag_dicts()
    row.glossary = [term.as_dict() for term in
                    glossary.glossary_terms(row.input_text, max_terms=settings.GLOSSARY_MAX_TERMS)]


#: ``error_class`` recorded on a translation that the engine's death ended.
ENGINE_DEAD_CLASS = "EngineDead"


@dataclass(frozen=True)
class TranslationFailure:
    """Why a translation's row ended ``error``, in the words every transport
    uses (the socket's ``error`` frame, the REST API, its server-sent
    events and FHIR, :mod:`clinical.api.errors`).

    Attributes:
        code: ``engine_restarting`` (the engine died under it and the
            replica rebuilds it) or ``engine_error`` (any other failure).
        message: for the clinician or the calling system; no patient text.
        retry_after_s: seconds to wait before retrying (``None``: no advice).
    """

    code: str
    message: str
    retry_after_s: int | None = None


def translation_failure(translation: Translation) -> TranslationFailure:
    """The :class:`TranslationFailure` of a translation whose row ended
    ``error``: ``engine_restarting`` with
    :data:`~clinical.translation.admission.ENGINE_RESTART_RETRY_AFTER_S`
    when its ``error_class`` is ``EngineDead``, else ``engine_error``."""
    if translation.error_class == ENGINE_DEAD_CLASS:
        return TranslationFailure(
            "engine_restarting", "The translation engine stopped while writing this explanation and is "
            "restarting. The partial text was recorded as failed; please do not use it. Try again "
            "shortly.", retry_after_s=ENGINE_RESTART_RETRY_AFTER_S)
    return TranslationFailure("engine_error", "The translation failed and was recorded. Please try again.")
