"""The confidence gate's dispatch: request a full-precision re-run and send
its Celery task to the broker, again if it never arrived or was lost.

Source of the threshold: the product's design, "if confidence < 0.85,
re-run in FP32" (``settings.CONFIDENCE_THRESHOLD``). A failed safety check
(:mod:`clinical.quality.safety`) queues the re-run too; the translation's
``rerun_reason`` says which (:func:`clinical.quality.measure.rerun_reasons`).

The re-run's Celery task is sent to the broker once the translation's
transaction commits; ``Rerun.dispatched_at`` records that the broker took
it. A broker that cannot be reached then leaves it empty, and
:func:`reruns_redispatch` (run by each replica's sweep and by ``manage.py
translations_sweep``) sends it again later, so no re-run stays ``pending``
for ever. A broker that lost its data (Redis restarted empty) loses the
tasks waiting in it; each dispatch records the broker's epoch
(:mod:`clinical.rerun.broker`), and the same sweep sends again the
``queued`` re-runs recorded under an epoch the broker no longer has.

The worker side is :mod:`clinical.rerun.execute`; the socket frames are
:mod:`clinical.rerun.notify`.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from clinical.models import RERUN_PRECISION, Rerun, Translation
from clinical.rerun.broker import broker_epoch
from clinical.rerun.tasks import translation_verify

logger = logging.getLogger(__name__)


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
    other than the current one (:func:`clinical.rerun.broker.broker_epoch`: the
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
