"""The re-run worker's CPU priority (``RERUN_CPU_PRIORITY``).

On a CPU host the re-run worker's engine (vLLM in float32) and the
clinicians' engine share the same cores: at normal priority a re-run takes
half of a 2-core machine while clinicians wait for their first word. At
``idle`` priority the kernel runs the worker only when no normal-priority
thread wants the CPU, so the clinicians' engine gets the cores first and
re-runs use the idle time; a verification arrives later under load.

* ``auto`` (default): ``idle`` when the re-run engine runs on the CPU,
  ``normal`` when it runs on a GPU (it then barely uses the CPU, and
  starving its host thread would only slow the GPU down);
* ``idle``: Linux ``SCHED_IDLE``; where that is refused (a container's
  seccomp policy, not Linux) the lowest nice value, 19;
* ``normal``: the policy is left as it is.

:func:`cpu_priority_apply` runs once in the worker's main thread at
``worker_init`` (:mod:`clinical.rerun.tasks`), before the engine loads. A
Linux scheduling policy and nice value belong to a thread and are inherited
by the threads and processes it creates afterwards (the engine's threads,
vLLM's ``VLLM::EngineCore`` process); threads that already exist then (an
import may start one) are lowered too, one by one.
"""

from __future__ import annotations

import logging
import os
import threading

from django.conf import settings

from clinical.rerun.worker_engine import rerun_engine_device

logger = logging.getLogger(__name__)

CHOICES = ("auto", "idle", "normal")

#: What :func:`cpu_priority_apply` returns.
SCHED_IDLE = "sched_idle"
NICE_19 = "nice_19"
NORMAL = "normal"

IDLE_NICE = 19


def cpu_priority_resolve(setting: str, device: str | None = None) -> str:
    """``idle`` or ``normal`` for the setting ``setting``; ``auto`` looks at
    ``device`` (``cpu`` or ``cuda``; ``None``: where the re-run engine runs,
    :func:`clinical.rerun.worker_engine.rerun_engine_device`).

    Raises:
        ValueError: ``setting`` is not one of :data:`CHOICES`.
    """
    if setting not in CHOICES:
        raise ValueError(f"RERUN_CPU_PRIORITY must be one of {CHOICES}, not {setting!r}")
    if setting != "auto":
        return setting
    if device is None:
        device = rerun_engine_device()
    return "normal" if device == "cuda" else "idle"


def _thread_ids() -> list[int]:
    """Native ids of this process's threads other than the calling one."""
    me = threading.get_native_id()
    try:
        return [tid for tid in map(int, os.listdir("/proc/self/task")) if tid != me]
    except OSError:  # no /proc (not Linux): the calling thread alone
        return []


def _sched_idle(tid: int) -> None:
    os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))


def _nice_19(tid: int) -> None:
    os.setpriority(os.PRIO_PROCESS, tid, IDLE_NICE)  # Linux: per thread, as nice(19) from nice 0


def _lower() -> str:
    """Lower the calling thread, then every other thread of the process,
    with ``SCHED_IDLE`` or, where refused, nice 19. Returns which, or
    ``normal`` when both were refused."""
    try:
        _sched_idle(0)
        applied, lower = SCHED_IDLE, _sched_idle
    except (AttributeError, OSError) as refused:  # AttributeError: no SCHED_IDLE on this OS
        try:
            _nice_19(0)
        except OSError as exc:
            logger.warning("re-run worker CPU priority left normal: SCHED_IDLE refused (%s), nice 19 refused (%s)",
                           type(refused).__name__, type(exc).__name__)
            return NORMAL
        logger.info("SCHED_IDLE refused (%s): nice 19 instead", type(refused).__name__)
        applied, lower = NICE_19, _nice_19
    for tid in _thread_ids():
        try:
            lower(tid)
        except OSError:  # the thread ended meanwhile
            pass
    return applied


def cpu_priority_apply(setting: str | None = None, device: str | None = None) -> str:
    """Give this process the CPU priority ``setting`` asks for (default
    ``RERUN_CPU_PRIORITY``) and log the choice once.

    Call it from the main thread before any engine thread or process
    exists: those created later inherit it.

    Returns:
        :data:`SCHED_IDLE`, :data:`NICE_19` or :data:`NORMAL` (asked for,
        or both ways of lowering were refused).

    Raises:
        ValueError: unknown ``setting``.
    """
    if setting is None:
        setting = settings.RERUN_CPU_PRIORITY
    if setting == "auto" and device is None:
        device = rerun_engine_device()
    wanted = cpu_priority_resolve(setting, device)
    applied = _lower() if wanted == "idle" else NORMAL
    logger.info("re-run worker CPU priority: %s (RERUN_CPU_PRIORITY=%s%s)", applied, setting,
                f", re-run engine on {device}" if setting == "auto" else "")
    return applied
