"""The Celery worker's full-precision engine, loaded once per worker process
and rebuilt in-process when it dies.

The worker is synchronous; the engine is asyncio-based. One private event
loop per process runs every engine call (``run_in_engine_loop``), so the
engine and its background tasks always live on the same loop.

**The same model as the replicas.** Empty ``RERUN_MODEL`` means the
full-precision weights of ``INFERENCE_MODEL``
(:func:`inference.weights.full_precision_model`: the Hugging Face folder a
GGUF file was converted from, or the unquantized checkpoint itself). A
``RERUN_MODEL`` whose architecture differs from ``INFERENCE_MODEL``'s
(:func:`inference.weights.architecture_mismatch`: layers, widths, heads,
vocabulary) is refused when the worker starts (:func:`rerun_model_check`,
exit status 78, ``EX_CONFIG``) unless ``RERUN_MODEL_MISMATCH_OK=1``; one that
cannot be read here (a hub name) is logged and allowed.

**A dead engine is rebuilt, not left dead**: the worker keeps its
process and rebuilds the engine with the web replica's code
(:class:`inference.supervisor.EngineSupervisor`, backoff
``ENGINE_REBUILD_BACKOFF_S`` doubling to ``ENGINE_REBUILD_BACKOFF_MAX_S``).
Rebuilding in-process works under every way the worker is started (``make
run`` has no supervisor to restart it) and keeps Celery's connection and
the unacknowledged task. When the engine dies during a task, vLLM raises
``EngineDeadError``, the engine :class:`~inference.base.EngineDead`, the task
retries (``autoretry_for=EngineError``) and its next attempt's
:func:`rerun_engine_get` waits for the rebuild. The state is published to
Redis for ``/readyz``, ``/metrics`` and the dashboard (:mod:`clinical.rerun.lane`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import TypeVar

from django.conf import settings

from clinical.rerun import lane
from inference import weights
from inference.base import Engine, EngineError
from inference.factory import EngineConfig, create_engine, engine_device
from inference.supervisor import EngineSupervisor

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Exit status of a worker refused at start (``EX_CONFIG`` of sysexits.h;
#: ``RestartPreventExitStatus=78`` in the systemd unit stops a restart loop).
EXIT_CONFIG = 78

_loop: asyncio.AbstractEventLoop | None = None
_supervisor: EngineSupervisor | None = None


class RerunModelRefused(EngineError):
    """``RERUN_MODEL`` is not the full-precision form of ``INFERENCE_MODEL``
    (or the worker cannot tell which weights that is)."""


def run_in_engine_loop(coro: Coroutine[object, object, T]) -> T:
    """Run ``coro`` to completion on the process's engine loop."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(coro)


def rerun_model() -> str:
    """The weights the worker loads: ``RERUN_MODEL``, or when empty (and
    ``RERUN_ENGINE`` is vLLM) the full-precision weights of
    ``INFERENCE_MODEL``.

    Raises:
        RerunModelRefused: ``RERUN_MODEL`` is empty and those weights cannot
            be found (a GGUF file never converted, a pre-quantized
            checkpoint); the message names the setting.
    """
    if settings.RERUN_MODEL or settings.RERUN_ENGINE != "vllm":
        return settings.RERUN_MODEL
    try:
        return weights.full_precision_model(settings.INFERENCE_MODEL)
    except weights.ModelError as exc:
        raise RerunModelRefused(str(exc)) from None


def rerun_model_check() -> str:
    """Refuse a re-run model that is not the replicas' model.

    Returns:
        The model the worker will load (:func:`rerun_model`).

    Raises:
        RerunModelRefused: the architectures differ (each differing field
            is named) and ``RERUN_MODEL_MISMATCH_OK`` is off, or
            :func:`rerun_model` refused.
    """
    model = rerun_model()
    if settings.RERUN_ENGINE == "fake" or not model:
        return model
    fast = settings.INFERENCE_MODEL or str(weights.default_gguf_path())
    differences = weights.architecture_mismatch(settings.INFERENCE_MODEL, model)
    if differences is None:
        logger.warning("re-run model %s not compared with INFERENCE_MODEL %s (not both local checkpoints)",
                       model, fast)
    elif differences:
        message = (f"RERUN_MODEL {model} is not the model the replicas run (INFERENCE_MODEL {fast}): "
                   + "; ".join(differences)
                   + ". Leave RERUN_MODEL empty for the full-precision weights of INFERENCE_MODEL, "
                   "or set RERUN_MODEL_MISMATCH_OK=1 to verify with another model on purpose.")
        if not settings.RERUN_MODEL_MISMATCH_OK:
            raise RerunModelRefused(message)
        logger.warning("%s (allowed by RERUN_MODEL_MISMATCH_OK)", message)
    return model


def rerun_engine_config() -> EngineConfig:
    """Full precision: ``RERUN_DTYPE`` (float32) and no quantization, over
    :func:`rerun_model`, at ``RERUN_GPU_MEMORY_UTILIZATION`` of its GPU, on
    the replicas' ``INFERENCE_DEVICE`` (``cpu`` keeps it off a GPU the host
    has; ``cuda`` refuses to start without one).

    A llama.cpp re-run engine keeps its prefix snapshots in memory only
    (``prefix_state_dir`` empty): the re-run's prompts may hold the fast
    text before their last message, and no state derived from clinical
    text is written to disk.

    Raises:
        RerunModelRefused: see :func:`rerun_model`.
    """
    return EngineConfig(engine=settings.RERUN_ENGINE, model=rerun_model(), dtype=settings.RERUN_DTYPE,
                        quantization="none", n_ctx=settings.INFERENCE_N_CTX, device=settings.INFERENCE_DEVICE,
                        gpu_memory_utilization=settings.RERUN_GPU_MEMORY_UTILIZATION,
                        gpu_memory_setting="RERUN_GPU_MEMORY_UTILIZATION", prefix_state_dir="")


def rerun_engine_device() -> str:
    """Where the re-run engine runs, ``cpu`` or ``cuda``, without finding
    its weights or loading it: ``RERUN_ENGINE`` on ``INFERENCE_DEVICE``, as
    :func:`rerun_engine_config` sets it and
    :func:`inference.factory.engine_device` resolves it (``auto``: CUDA when
    torch sees a device; the fake engine and llama.cpp on the CPU).

    Raises:
        ValueError: ``INFERENCE_DEVICE`` unknown, or ``cuda`` where torch
            sees no CUDA device (:func:`inference.factory.resolve_device`).
    """
    return engine_device(EngineConfig(engine=settings.RERUN_ENGINE, device=settings.INFERENCE_DEVICE))


def rerun_supervisor() -> EngineSupervisor:
    """The process's engine supervisor (created on first use)."""
    global _supervisor
    if _supervisor is None:
        _supervisor = EngineSupervisor(lambda: create_engine(rerun_engine_config()),
                                       backoff_s=settings.ENGINE_REBUILD_BACKOFF_S,
                                       backoff_max_s=settings.ENGINE_REBUILD_BACKOFF_MAX_S)
    return _supervisor


def rerun_engine_get() -> Engine:
    """The worker's started, live engine: loaded on the first call; a dead
    one is rebuilt first (waiting out the backoff: the worker has nothing
    else to do). Each load or rebuild is reported to the lane at once.

    Raises:
        inference.EngineError: the model failed to load (the task retries;
            the next call waits for the backoff before trying again).
    """
    supervisor = rerun_supervisor()
    before = (supervisor.state, supervisor.rebuilds, supervisor.deaths)
    try:
        engine = run_in_engine_loop(supervisor.get(wait=True))
    finally:
        if (supervisor.state, supervisor.rebuilds, supervisor.deaths) != before:
            lane.lane_report(rerun_lane_report())
    return engine


def rerun_lane_report() -> dict:
    """This worker's engine for :mod:`clinical.rerun.lane` (thread safe:
    reads only)."""
    supervisor = rerun_supervisor()
    report = supervisor.status().as_dict()
    engine = supervisor.engine
    if engine is not None:
        report |= {"engine": engine.info.engine, "model": engine.info.model,
                   "precision": engine.info.precision}
    return report


def rerun_engine_shutdown() -> None:
    """Release the engine (worker shutdown)."""
    global _supervisor
    if _supervisor is not None:
        run_in_engine_loop(_supervisor.shutdown())
        _supervisor = None
