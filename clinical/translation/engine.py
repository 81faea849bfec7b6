"""The process-wide engine: built from settings once, started lazily.

The engine is created and started inside the running event loop on first
use (never once per request); every consumer and command in the process
shares it.

After it starts, the prompt's prefixes are warmed: the shared instructions
at once, and (llama.cpp, serial) each example cluster's prefix as
background work (:func:`_warm_cluster_prefixes`), so that a clinician's
request restores a cached prefix instead of reading it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from dataclasses import dataclass

from django.conf import settings

from clinical.quality import measure as quality
from clinical.runtime.metrics import ENGINE_QUEUE_DEPTH, ENGINE_REBUILDS, ENGINE_UP
from clinical.translation import text_checks
from inference.base import Engine, EngineError, EnginePreempted, GenerationParams
from inference.examples import cluster_prefix_messages, default_router
from inference.factory import EngineConfig, create_engine
from inference.prompts import build_messages
from inference.supervisor import EngineSupervisor, SupervisorStatus

logger = logging.getLogger(__name__)

_supervisor: EngineSupervisor | None = None
_words_loaded = False
_warmup: asyncio.Task | None = None
#: While the example clusters' prefixes are warmed: how far it got.
_warmup_progress: WarmupProgress | None = None
#: Prefix snapshots left free by the cluster warm-up, for the other
#: instruction sets (the one-example prompt, the self-check, other grades).
SNAPSHOTS_KEPT_FREE = 4


@dataclass
class WarmupProgress:
    """The cluster warm-up of this process's engine, while it runs:
    ``prefixes_done`` of ``prefixes`` (``None`` until the clusters are known)."""

    prefixes_done: int = 0
    prefixes: int | None = None


def warmup_progress() -> WarmupProgress | None:
    """The cluster warm-up's progress while it runs (``/readyz`` then
    answers ``warming``); ``None`` when it has ended or none was wanted.
    Safe from any thread; changes nothing."""
    return _warmup_progress


def engine_config_from_settings() -> EngineConfig:
    """The :class:`EngineConfig` described by Django settings."""
    return EngineConfig(
        engine=settings.INFERENCE_ENGINE,
        model=settings.INFERENCE_MODEL,
        precision=settings.INFERENCE_PRECISION,
        n_ctx=settings.INFERENCE_N_CTX,
        threads=settings.INFERENCE_THREADS,
        quantization=settings.INFERENCE_QUANTIZATION,
        dtype=settings.INFERENCE_DTYPE,
        max_queue=settings.ENGINE_MAX_QUEUE or None,
        device=settings.INFERENCE_DEVICE,
        tensor_parallel_size=settings.INFERENCE_TENSOR_PARALLEL_SIZE,
        gpu_memory_utilization=settings.INFERENCE_GPU_MEMORY_UTILIZATION,
        max_model_len=settings.INFERENCE_MAX_MODEL_LEN,
        prefix_caching=settings.INFERENCE_PREFIX_CACHING,
        enforce_eager=settings.INFERENCE_ENFORCE_EAGER,
        speculative_model=settings.INFERENCE_SPECULATIVE_MODEL,
        num_speculative_tokens=settings.INFERENCE_NUM_SPECULATIVE_TOKENS,
    )


def _supervisor_new(engine: Engine | None = None) -> EngineSupervisor:
    return EngineSupervisor(lambda: create_engine(engine_config_from_settings()), warm=_warm, engine=engine,
                            backoff_s=settings.ENGINE_REBUILD_BACKOFF_S,
                            backoff_max_s=settings.ENGINE_REBUILD_BACKOFF_MAX_S)


async def engine_get() -> Engine:
    """The started, live engine of this process (loads it on the first
    call and prefills the shared prompt; concurrent first callers wait for
    the same load).

    A dead engine (vLLM's engine-core process exited, llama.cpp failed in
    a decode) is rebuilt in the background with backoff
    (:class:`inference.supervisor.EngineSupervisor`,
    ``ENGINE_REBUILD_BACKOFF_S`` doubling up to ``ENGINE_REBUILD_BACKOFF_MAX_S``);
    until it is back, callers are refused at once. A watchdog checks the
    engine every ``ENGINE_HEALTH_INTERVAL_S`` seconds, so a replica with no
    traffic heals too.

    Raises:
        inference.base.EngineDead: the engine is dead or being rebuilt
            (``retry_after_s``: seconds to the next attempt).
        inference.EngineError: the first load failed (the next attempt
            waits for the backoff).
    """
    global _supervisor
    if _supervisor is None:
        _supervisor = _supervisor_new()
    supervisor = _supervisor
    engine = await supervisor.get()
    if settings.ENGINE_HEALTH_INTERVAL_S > 0:
        supervisor.watch(settings.ENGINE_HEALTH_INTERVAL_S)
    return engine


def engine_status() -> SupervisorStatus | None:
    """The process engine's state (``ready``, ``dead``, ``rebuilding`` ...,
    with the reason and the deaths and rebuilds so far), or ``None`` before
    the first :func:`engine_get`. Safe from any thread; changes nothing."""
    return _supervisor.status() if _supervisor is not None else None


async def _warm(engine: Engine) -> None:
    """Run on each newly started engine: prefill the shared prompt; on the
    first, the readability and safety word lists and the example clusters
    load (a few seconds, once per process) while it does. Then the cluster
    prefixes are warmed in the background (:func:`_warm_cluster_prefixes`)."""
    global _words_loaded
    words = None
    if not _words_loaded:
        words = asyncio.ensure_future(_in_daemon_thread(_quality_warm))
    await _prefill_shared_prompt(engine)
    if words is not None:
        await words
        _words_loaded = True
    global _warmup, _warmup_progress
    _warmup_cancel()
    if _cluster_warmup_wanted(engine):
        _warmup_progress = WarmupProgress()  # before the task runs: ready only once it has ended
        _warmup = asyncio.get_running_loop().create_task(_warm_cluster_prefixes(engine))


async def _prefill_shared_prompt(engine: Engine) -> None:
    """Run one 1-token request so the shared system prompt is in the KV
    cache before the first clinician asks (prefix caching); its text is a
    fixed phrase, not patient data."""
    params = GenerationParams(max_tokens=1)
    async for _ in engine.generate(f"warmup-{uuid.uuid4()}", build_messages("No acute distress."), params):
        pass


def _cluster_warmup_wanted(engine: Engine) -> bool:
    """Warm the cluster prefixes: examples by cluster are on, and the
    engine is llama.cpp's keeping prefix snapshots (serial or batched: both
    keep ``INFERENCE_PREFIX_SNAPSHOTS`` of them; vLLM caches prefixes itself)."""
    info = engine.info
    return bool(settings.PROMPT_EXAMPLES and settings.PROMPT_CLUSTERS > 0 and settings.PROMPT_CLUSTER_WARMUP
                and info.engine == "llamacpp"
                and info.settings.get("prefix_snapshots", 0) > SNAPSHOTS_KEPT_FREE)


async def _warm_cluster_prefixes(engine: Engine, *, retries: int = 3, retry_after_s: float = 1.0) -> int:
    """Evaluate the prefix of each example cluster (English, the default
    grade: the prompt of ``PROMPT_CLUSTERS`` x ``PROMPT_CLUSTER_EXAMPLES``)
    with a one-token background request on a fixed phrase, largest
    clusters first, as many as the engine keeps snapshots of (less
    :data:`SNAPSHOTS_KEPT_FREE`). The engine saves each prefix as a KV
    snapshot (:mod:`inference.llamacpp_prefix`), so the first clinician
    whose sentence falls in a cluster does not read its prefix (about 300
    to 700 tokens: seconds on two cores).

    Background requests run only when no clinician's request is queued; a
    clinician who arrives waits at most for the prefix being evaluated
    (llama.cpp cannot stop a prompt evaluation), and the request stopped
    for them is tried again (``retries`` times, ``retry_after_s`` apart).

    With a prefix state folder (``INFERENCE_PREFIX_STATE_DIR``) the engine
    reads a prefix saved by an earlier run instead of evaluating it, so a
    restarted server is warm in seconds.

    While it runs, :func:`warmup_progress` counts the prefixes done.

    Returns:
        The prefixes warmed. Engine failures end the warm-up (logged).
    """
    global _warmup_progress
    progress = _warmup_progress or WarmupProgress()
    try:
        return await _warm_clusters(engine, progress, retries=retries, retry_after_s=retry_after_s)
    finally:
        if _warmup_progress is progress:
            _warmup_progress = None


async def _warm_clusters(engine: Engine, progress: WarmupProgress, *, retries: int, retry_after_s: float) -> int:
    settings_now = (settings.PROMPT_CLUSTERS, settings.PROMPT_CLUSTER_EXAMPLES)
    try:
        router = await asyncio.to_thread(default_router, *settings_now)
    except ValueError as exc:
        logger.error("example clusters not warmed: %s", exc)
        return 0
    budget = max(0, int(engine.info.settings.get("prefix_snapshots", 0)) - SNAPSHOTS_KEPT_FREE)
    order = sorted(range(router.n_clusters), key=lambda c: (-router.sizes[c], c))[:budget]
    progress.prefixes = len(order)
    snapshots = getattr(engine, "prefix_snapshots", None)
    read_before = snapshots.read_from_disk if snapshots is not None else 0
    started, warmed = asyncio.get_running_loop().time(), 0
    params = GenerationParams(max_tokens=1, background=True)
    for cluster in order:
        messages = cluster_prefix_messages(cluster, router=router)
        for _attempt in range(retries + 1):
            try:
                async for _ in engine.generate(f"warmup-cluster-{cluster}-{uuid.uuid4()}", messages, params):
                    pass
            except EnginePreempted:
                await asyncio.sleep(retry_after_s)
                continue
            except EngineError as exc:
                logger.error("example cluster warm-up stopped: %s", type(exc).__name__)
                return warmed
            warmed += 1
            break
        progress.prefixes_done += 1
    from_disk = (snapshots.read_from_disk - read_before) if snapshots is not None else 0
    logger.info("example cluster prefixes warmed clusters=%d of=%d from_disk=%d seconds=%.1f",
                warmed, router.n_clusters, from_disk, asyncio.get_running_loop().time() - started)
    return warmed


async def _in_daemon_thread(work) -> None:
    """Run ``work()`` in a daemon thread and wait for it. Not the loop's
    executor (``asyncio.to_thread``): its threads are joined at interpreter
    exit, so a replica stopped during the word lists' load (about 5 s after
    start) waited for it after the drain had ended."""
    loop = asyncio.get_running_loop()
    finished = loop.create_future()

    def run() -> None:
        try:
            work()
        finally:
            try:
                loop.call_soon_threadsafe(lambda: finished.done() or finished.set_result(None))
            except RuntimeError:  # the loop closed first: the process is stopping
                pass

    threading.Thread(target=run, name="quality-warm", daemon=True).start()
    await finished


def _quality_warm() -> None:
    try:
        quality.warm()
    except Exception as exc:  # noqa: BLE001 - the first measurement will report it
        logger.error("quality word lists failed to load: %s", type(exc).__name__)
    try:
        text_checks.warm()
    except Exception as exc:  # noqa: BLE001 - the first diagnosis's language check will report it
        logger.error("language identifier failed to load: %s", type(exc).__name__)
    if settings.PROMPT_EXAMPLES and settings.PROMPT_CLUSTERS > 0:
        try:
            default_router(settings.PROMPT_CLUSTERS, settings.PROMPT_CLUSTER_EXAMPLES)
        except ValueError as exc:
            logger.error("example clusters failed to fit: %s", exc)


def _warmup_cancel() -> None:
    global _warmup, _warmup_progress
    if _warmup is not None and not _warmup.done():
        _warmup.cancel()
    _warmup = None
    _warmup_progress = None


def engine_set(engine: Engine | None) -> None:
    """Replace the process engine (tests install a fake one; ``None``
    forgets it, and the next :func:`engine_get` builds one from settings);
    a cluster warm-up of the engine replaced is stopped."""
    global _supervisor
    _warmup_cancel()
    if _supervisor is not None and _supervisor._watchdog is not None:
        try:
            _supervisor._watchdog.cancel()
        except RuntimeError:  # its event loop is closed already (a finished test)
            pass
    _supervisor = _supervisor_new(engine) if engine is not None else None


def engine_current() -> Engine | None:
    """The process engine if one was created (started, dead or not), else
    ``None``; never creates one (shutdown and metrics use it)."""
    return _supervisor.engine if _supervisor is not None else None


async def engine_shutdown() -> None:
    """Stop the watchdog and the cluster warm-up, and shut the process
    engine down (server exit)."""
    _warmup_cancel()
    if _supervisor is not None:
        await _supervisor.shutdown()


def _queue_depth() -> float:
    engine = engine_current()
    return float(engine.queue_depth()) if engine is not None else 0.0


def _engine_up() -> float:
    status = engine_status()
    return 1.0 if status is not None and status.alive else 0.0


def _engine_rebuilds() -> float:
    status = engine_status()
    return float(status.rebuilds) if status is not None else 0.0


ENGINE_QUEUE_DEPTH.set_function(_queue_depth)
ENGINE_UP.set_function(_engine_up)
ENGINE_REBUILDS.set_function(_engine_rebuilds)
