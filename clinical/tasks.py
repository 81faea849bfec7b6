"""Celery tasks: thin wrappers that take ids and call services."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from celery.signals import worker_ready, worker_shutdown
from django.conf import settings

from clinical import rerun
from inference.base import EngineError

logger = logging.getLogger(__name__)


class _VerifyTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """Retries exhausted or time limit hit: record the failure."""
        rerun.rerun_fail(translation_id=args[0], error_class=type(exc).__name__)


@shared_task(
    base=_VerifyTask,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(EngineError,),
    retry_backoff=settings.RERUN_RETRY_BACKOFF_S,
    retry_backoff_max=120,
    max_retries=settings.RERUN_MAX_RETRIES,
    soft_time_limit=settings.RERUN_SOFT_TIME_LIMIT_S,
    time_limit=settings.RERUN_TIME_LIMIT_S,
)
def translation_verify(self, translation_id: int) -> None:
    """Re-run translation ``translation_id`` in full precision (queue
    ``rerun``). Idempotent: a completed re-run is never run again."""
    rerun.rerun_execute(translation_id=translation_id)


@worker_ready.connect
def _load_engine(sender=None, **kwargs) -> None:
    """Load the full-precision engine before the first task, not in it. A
    failure is logged; the task then retries the load and fails cleanly."""
    if "rerun" in {q.name for q in sender.task_consumer.queues}:
        from clinical.rerun_engine import rerun_engine_get

        try:
            rerun_engine_get()
        except EngineError:
            logger.exception("the re-run engine failed to load")


@worker_shutdown.connect
def _release_engine(**kwargs) -> None:
    from clinical.rerun_engine import rerun_engine_shutdown

    rerun_engine_shutdown()
