"""The confidence gate: services that request, run and record full-precision
re-runs, and tell the clinician's socket about them.

Source of the threshold: the product's design, "if confidence < 0.85,
re-run in FP32" (``settings.CONFIDENCE_THRESHOLD``). A failed safety check
(:mod:`clinical.safety`) queues the re-run too (issue 6); the translation's
``rerun_reason`` says which (:func:`clinical.quality.rerun_reasons`).

Dispatch: the re-run's Celery task is sent to the broker once the
translation's transaction commits; ``Rerun.dispatched_at`` records that the
broker took it. A broker that cannot be reached then leaves it empty, and
:func:`reruns_redispatch` (run by each replica's sweep and by ``manage.py
translations_sweep``) sends it again later, so no re-run stays ``pending``
for ever. A broker that lost its data (Redis restarted empty) loses the
tasks waiting in it; each dispatch records the broker's epoch
(:mod:`clinical.broker`), and the same sweep sends again the ``queued``
re-runs recorded under an epoch the broker no longer has.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from clinical import quality
from clinical.audit import audit_verification
from clinical.broker import broker_epoch
from clinical.log import request_id_var
from clinical.models import Rerun, Translation
from inference.base import GenerationParams, generate_text
from inference.confidence import sequence_confidence

logger = logging.getLogger(__name__)

RERUN_PRECISION = "fp32"


def translation_group(request_id) -> str:
    """Channel-layer group of one translation's sockets."""
    return f"translation-{request_id}"


def rerun_request(*, translation: Translation) -> Rerun:
    """Queue a full-precision re-run of a completed translation.

    Must run inside the transaction that completes the translation: the
    Celery task is enqueued with ``transaction.on_commit``, so a rolled-back
    translation never reaches the worker. Idempotent: an existing re-run of
    the same precision is returned as it is.

    A broker that cannot be reached at commit never undoes the completed
    translation: the re-run stays ``queued`` with ``dispatched_at`` empty
    and :func:`reruns_redispatch` sends it later.
    """
    rerun, created = Rerun.objects.get_or_create(translation=translation, precision=RERUN_PRECISION)
    if created:
        translation.verification = Translation.Verification.PENDING
        translation.save(update_fields=["verification"])
        rerun_id, translation_id, request_id = rerun.pk, translation.pk, translation.request_id
        transaction.on_commit(lambda: rerun_dispatch(
            rerun_id=rerun_id, translation_id=translation_id, request_id=request_id), robust=True)
    return rerun


def _task_send(*, translation_id: int, request_id) -> bool:
    """Send ``translation_verify(translation_id)`` to the broker.

    Returns:
        ``True`` when the broker took it; ``False`` when it could not be
        reached (after Celery's own publish retries, about 1 s), logged as a
        warning with the request id and the error's class only.
    """
    from clinical.tasks import translation_verify

    try:
        translation_verify.delay(translation_id)
    except Exception as exc:  # noqa: BLE001 - any failure leaves it to reruns_redispatch
        logger.warning("re-run of request %s not dispatched, broker unreachable (%s); "
                       "the sweep will send it again", request_id, type(exc).__name__)
        return False
    return True


def rerun_dispatch(*, rerun_id: int, translation_id: int, request_id) -> bool:
    """Send a re-run's task to the broker and record ``dispatched_at``
    (called on commit by :func:`rerun_request`). Never raises.

    Returns:
        ``True`` when the broker took the task. If the broker took it but
        ``dispatched_at`` could not be written (database gone meanwhile),
        the sweep sends it once more; the task is idempotent.
    """
    # Read before sending: a broker restart in between then errs towards
    # sending the task twice, never towards losing it.
    epoch = broker_epoch()
    if not _task_send(translation_id=translation_id, request_id=request_id):
        return False
    try:
        Rerun.objects.filter(pk=rerun_id, dispatched_at__isnull=True).update(
            dispatched_at=timezone.now(), broker_epoch=epoch or "")
    except DatabaseError as exc:
        logger.warning("re-run of request %s dispatched but not recorded (%s)", request_id, type(exc).__name__)
    return True


def reruns_redispatch(*, older_than_s: float | None = None, limit: int = 100) -> int:
    """Send again the re-runs whose task never reached the broker, or was
    lost with the broker's data.

    Candidates are ``queued`` re-runs created more than ``older_than_s``
    seconds ago (default ``settings.RERUN_REDISPATCH_GRACE_S``), oldest
    first, at most ``limit`` per call, that either have ``dispatched_at``
    empty (the broker was unreachable) or were sent under a broker epoch
    other than the current one (:func:`clinical.broker.broker_epoch`: the
    broker has lost its data since). Each is locked (``SELECT ... FOR UPDATE
    SKIP LOCKED``) while its task is sent, and ``dispatched_at`` and the
    epoch are set in the same transaction, so replicas sweeping at the same
    time send each one once: a locked row is skipped, and a committed one no
    longer matches. If the broker is still unreachable the first failure is
    logged (request id only) and the rest are left for the next round.

    Returns:
        The number of re-runs dispatched by this call.
    """
    grace_s = settings.RERUN_REDISPATCH_GRACE_S if older_than_s is None else older_than_s
    cutoff = timezone.now() - timedelta(seconds=grace_s)
    epoch = broker_epoch()
    waiting = Q(dispatched_at__isnull=True)
    if epoch:
        waiting |= Q(dispatched_at__isnull=False) & ~Q(broker_epoch="") & ~Q(broker_epoch=epoch)
    dispatched: list[int] = []
    lost = 0
    with transaction.atomic():
        candidates = list(
            Rerun.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(waiting, status=Rerun.Status.QUEUED, enqueued_at__lt=cutoff)
            .order_by("enqueued_at", "pk")
            .values_list("pk", "translation_id", "translation__request_id", "dispatched_at")[:limit])
        for rerun_id, translation_id, request_id, dispatched_at in candidates:
            if not _task_send(translation_id=translation_id, request_id=request_id):
                break
            dispatched.append(rerun_id)
            lost += dispatched_at is not None
        if dispatched:
            Rerun.objects.filter(pk__in=dispatched).update(dispatched_at=timezone.now(), broker_epoch=epoch or "")
    if dispatched:
        logger.warning("re-run sweep: %d re-run(s) dispatched again (%d never reached the broker, "
                       "%d lost with the broker's data)", len(dispatched), len(dispatched) - lost, lost)
    return len(dispatched)


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


def rerun_execute(*, translation_id: int) -> Rerun | None:
    """The task body: run the re-run on the worker's engine and record it.

    Returns:
        The completed re-run, or ``None`` if there was nothing to do.

    Raises:
        inference.EngineError: generation failed (the task retries).
    """
    from clinical.rerun_engine import rerun_engine_get, run_in_engine_loop
    from clinical.generation import translation_messages  # imports services, which imports this module

    rerun = rerun_start(translation_id=translation_id)
    if rerun is None:
        logger.info("re-run of translation %s has nothing to do", translation_id)
        return None
    translation = rerun.translation
    request_id_var.set(str(translation.request_id))
    rerun_notify(translation=translation)
    engine = rerun_engine_get()
    started = time.perf_counter()
    text, logprobs = run_in_engine_loop(generate_text(
        engine, f"{translation.request_id}-{RERUN_PRECISION}-{rerun.attempts}",
        translation_messages(translation),
        GenerationParams(max_tokens=settings.MAX_OUTPUT_TOKENS)))
    duration_ms = (time.perf_counter() - started) * 1000
    done = rerun_complete(rerun_id=rerun.pk, output_text=text.strip(), token_logprobs=logprobs,
                          duration_ms=duration_ms, engine=engine.info.engine, model_name=engine.info.model)
    logger.info("re-run completed precision=%s tokens=%d duration_ms=%.0f attempt=%d",
                RERUN_PRECISION, len(logprobs), duration_ms, done.attempts)
    return done


REASON_MESSAGES = {
    quality.LOW_CONFIDENCE: "Low confidence",
    quality.SAFETY_FAILED: "Safety check: facts missing",
}

VERIFICATION_MESSAGES = {
    Translation.Verification.PENDING: "Low confidence: queued for verification in full precision…",
    Translation.Verification.RUNNING: "Verifying in full precision…",
    Translation.Verification.FAILED: "Full-precision verification failed; the fast text is unverified.",
}


def verification_frame(translation: Translation) -> dict | None:
    """The socket frame describing a translation's verification state, or
    ``None`` when no verification was needed. Every frame carries a
    ``message`` for the clinician.

    Frames: ``{"type": "verifying", "id", "state": "queued"|"running",
    "reason"?}`` (``reason``, on ``queued``: the translation's
    ``rerun_reason``), ``{"type": "verified", "id", "text", "confidence",
    "precision", "engine", "model", "queue_wait_ms", "rerun_ms",
    "tokens_out", "reason", "readability", "safety"}`` (the re-run output's
    own readability and safety check, see
    :func:`clinical.quality.rerun_quality_payload`) and
    ``{"type": "verification_failed", "id"}``.
    """
    request_id = str(translation.request_id)
    state = translation.verification
    message = VERIFICATION_MESSAGES.get(state, "")
    reasons = [r for r in (translation.rerun_reason or "").split(",") if r]
    if state == Translation.Verification.PENDING:
        if reasons:
            message = " and ".join(REASON_MESSAGES.get(r, r) for r in reasons) + \
                ": queued for verification in full precision…"
        return {"type": "verifying", "id": request_id, "state": "queued", "message": message,
                "reason": translation.rerun_reason}
    if state == Translation.Verification.RUNNING:
        return {"type": "verifying", "id": request_id, "state": "running", "message": message}
    if state == Translation.Verification.FAILED:
        return {"type": "verification_failed", "id": request_id, "message": message}
    if state == Translation.Verification.VERIFIED:
        rerun = Rerun.objects.get(translation=translation, precision=RERUN_PRECISION)
        return {"type": "verified", "id": request_id, "text": rerun.output_text,
                "confidence": rerun.confidence, "precision": rerun.precision,
                "engine": rerun.engine, "model": rerun.model_name,
                "queue_wait_ms": rerun.queue_wait_ms, "rerun_ms": rerun.duration_ms,
                "tokens_out": rerun.tokens_out, "reason": translation.rerun_reason,
                **quality.rerun_quality_payload(rerun),
                "message": f"Verified in full precision ({rerun.precision}), confidence "
                           f"{rerun.confidence or 0:.2f}, re-run {rerun.duration_ms or 0:,.0f} ms."
                           + ("" if rerun.safety_passed is not False else
                              " The safety check still finds facts missing; check the text.")}
    return None


def rerun_notify(*, translation: Translation) -> None:
    """Send the current verification frame to the translation's sockets
    (any web replica) through the channel layer."""
    frame = verification_frame(translation)
    if frame is not None:
        async_to_sync(get_channel_layer().group_send)(
            translation_group(translation.request_id),
            {"type": "translation.verification", "frame": frame})
