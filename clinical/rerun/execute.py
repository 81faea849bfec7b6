"""The confidence gate in the worker: run a requested re-run on the
worker's full-precision engine and record its output, exactly once.

Called by :func:`clinical.rerun.tasks.translation_verify`; the dispatch side
is :mod:`clinical.rerun.dispatch`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from clinical.audit import audit_verification
from clinical.models import RERUN_PRECISION, Rerun, Translation, translation_messages
from clinical.quality import measure as quality
from clinical.rerun.engine import rerun_engine_get, run_in_engine_loop
from clinical.rerun.notify import rerun_notify
from clinical.runtime.log import request_id_var
from inference.base import GenerationParams, generate_text
from inference.confidence import sequence_confidence

logger = logging.getLogger(__name__)


@transaction.atomic
def rerun_start(*, translation_id: int) -> Rerun | None:
    """Mark the re-run as running and count the attempt.

    Returns:
        The re-run, or ``None`` when there is nothing to do (already
        completed or failed, or no re-run was requested): a redelivered task
        then ends without working.
    """
    rerun = (Rerun.objects.select_for_update().select_related("translation")
             .filter(translation_id=translation_id, precision=RERUN_PRECISION).first())
    if rerun is None or rerun.status in (Rerun.Status.COMPLETED, Rerun.Status.FAILED):
        return None
    now = timezone.now()
    if rerun.started_at is None:
        rerun.queue_wait_ms = round((now - rerun.enqueued_at).total_seconds() * 1000, 1)
    rerun.started_at = now
    rerun.status = Rerun.Status.RUNNING
    rerun.attempts += 1
    rerun.save()
    rerun.translation.verification = Translation.Verification.RUNNING
    rerun.translation.save(update_fields=["verification"])
    return rerun


@transaction.atomic
def rerun_complete(*, rerun_id: int, output_text: str, token_logprobs: list[float],
                   duration_ms: float, engine: str, model_name: str) -> Rerun:
    """Store the verified output exactly once and mark the translation
    verified; the first completion wins, later ones change nothing."""
    rerun = Rerun.objects.select_for_update().select_related("translation").get(pk=rerun_id)
    if rerun.status == Rerun.Status.COMPLETED:
        return rerun
    rerun.status = Rerun.Status.COMPLETED
    rerun.output_text = output_text
    rerun.confidence = sequence_confidence(token_logprobs)
    rerun.tokens_out = len(token_logprobs)
    rerun.duration_ms = round(duration_ms, 1)
    rerun.engine, rerun.model_name = engine, model_name
    rerun.finished_at = timezone.now()
    rerun.error_class = ""
    translation = rerun.translation
    measured = quality.output_quality(input_text=translation.input_text, output_text=output_text,
                                      language=translation.language)
    rerun.output_fkgl = measured.readability.output_fkgl
    rerun.output_readability = measured.readability.output_score
    rerun.safety_passed = measured.safety.passed
    rerun.safety_missing = measured.safety.missing_dicts()
    rerun.faithfulness_passed = measured.faithfulness.passed
    rerun.faithfulness_flags = measured.faithfulness.flag_dicts()
    rerun.save()
    _verification_conclude(rerun=rerun, state=Translation.Verification.VERIFIED)
    return rerun


@transaction.atomic
def rerun_fail(*, translation_id: int, error_class: str) -> None:
    """Record that the re-run gave up (retries exhausted or time limit);
    the fast text stays what the clinician sees, marked unverified."""
    rerun = Rerun.objects.select_for_update().filter(
        translation_id=translation_id, precision=RERUN_PRECISION).first()
    if rerun is None or rerun.status == Rerun.Status.COMPLETED:
        return
    rerun.status = Rerun.Status.FAILED
    rerun.error_class = error_class[:120]
    rerun.finished_at = timezone.now()
    rerun.save()
    _verification_conclude(rerun=rerun, state=Translation.Verification.FAILED)


def _verification_conclude(*, rerun: Rerun, state: str) -> None:
    """Set the translation's final verification state, audit it, and tell
    its sockets once the transaction commits."""
    translation = rerun.translation
    translation.verification = state
    translation.save(update_fields=["verification"])
    audit_verification(rerun=rerun)
    transaction.on_commit(lambda: rerun_notify(translation=translation))


async def _generate_bounded(engine, request_id: str, messages) -> tuple[str, list[float]]:
    """The re-run's generation, stopped at ``RERUN_SOFT_TIME_LIMIT_S``:
    Celery's solo pool (the worker's, for vLLM) enforces no time limit, so a
    hung engine would otherwise hold the lane for ever.

    Raises:
        TimeoutError: the limit passed; the engine request is aborted (the
            task then records the re-run as failed and takes the next job).
    """
    try:
        return await asyncio.wait_for(
            generate_text(engine, request_id, messages, GenerationParams(max_tokens=settings.MAX_OUTPUT_TOKENS)),
            timeout=settings.RERUN_SOFT_TIME_LIMIT_S)
    except TimeoutError:
        await engine.abort(request_id)
        logger.error("re-run stopped at its time limit of %s s", settings.RERUN_SOFT_TIME_LIMIT_S)
        raise


def rerun_execute(*, translation_id: int) -> Rerun | None:
    """The task body: run the re-run on the worker's engine and record it.

    Returns:
        The completed re-run, or ``None`` if there was nothing to do.

    Raises:
        inference.EngineError: generation failed (the task retries).
        TimeoutError: it ran past ``RERUN_SOFT_TIME_LIMIT_S`` (not retried).
    """
    rerun = rerun_start(translation_id=translation_id)
    if rerun is None:
        logger.info("re-run of translation %s has nothing to do", translation_id)
        return None
    translation = rerun.translation
    request_id_var.set(str(translation.request_id))
    rerun_notify(translation=translation)
    engine = rerun_engine_get()
    started = time.perf_counter()
    text, logprobs = run_in_engine_loop(_generate_bounded(
        engine, f"{translation.request_id}-{RERUN_PRECISION}-{rerun.attempts}", translation_messages(translation)))
    duration_ms = (time.perf_counter() - started) * 1000
    done = rerun_complete(rerun_id=rerun.pk, output_text=text.strip(), token_logprobs=logprobs,
                          duration_ms=duration_ms, engine=engine.info.engine, model_name=engine.info.model)
    logger.info("re-run completed precision=%s tokens=%d duration_ms=%.0f attempt=%d",
                RERUN_PRECISION, len(logprobs), duration_ms, done.attempts)
    return done
