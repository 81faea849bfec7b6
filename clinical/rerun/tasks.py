"""Celery tasks: thin wrappers that take ids and call services."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from celery.signals import worker_init, worker_ready, worker_shutdown
from django.conf import settings

from clinical.rerun import execute, lane
from clinical.rerun.cpu_priority import cpu_priority_apply
from clinical.rerun.worker_engine import (
    EXIT_CONFIG,
    RerunModelRefused,
    rerun_engine_get,
    rerun_engine_shutdown,
    rerun_lane_report,
    rerun_model_check,
)
from inference.base import EngineError

logger = logging.getLogger(__name__)


class _VerifyTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """Retries exhausted or time limit hit: record the failure."""
        execute.rerun_fail(translation_id=args[0], error_class=type(exc).__name__)


# The name is the task's identity on the wire: it stays the same across
# module moves, so messages queued by an earlier release still run.
@shared_task(
    name="clinical.tasks.translation_verify",
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
    execute.rerun_execute(translation_id=translation_id)


@worker_init.connect
def _set_cpu_priority(sender=None, **kwargs) -> None:
    """First, in the main thread, before the engine or Celery's own threads
    exist: ``RERUN_CPU_PRIORITY`` (:mod:`clinical.rerun.cpu_priority`), which
    they then inherit."""
    cpu_priority_apply()


@worker_init.connect
def _check_model(sender=None, **kwargs) -> None:
    """Before the worker takes any task: refuse a re-run model that is not
    the replicas' model (:func:`clinical.rerun.worker_engine.rerun_model_check`).
    The worker exits with status 78 (``EX_CONFIG``) and the reason in its
    log; ``SystemExit`` passes through Celery's signal dispatch, which
    catches only ``Exception``."""
    try:
        rerun_model_check()
    except RerunModelRefused as refused:
        logger.critical("re-run worker refused to start: %s", refused)
        raise SystemExit(EXIT_CONFIG) from None


@worker_ready.connect
def _load_engine(sender=None, **kwargs) -> None:
    """Load the full-precision engine before the first task, not in it, and
    start reporting its health (:mod:`clinical.rerun.lane`). A failure is
    logged; the task then retries the load and fails cleanly."""
    if "rerun" in {q.name for q in sender.task_consumer.queues}:
        lane.heartbeat_start(sender.hostname, rerun_lane_report)
        try:
            rerun_engine_get()
        except EngineError:
            logger.exception("the re-run engine failed to load")


@worker_shutdown.connect
def _release_engine(**kwargs) -> None:
    lane.lane_forget()
    rerun_engine_shutdown()
