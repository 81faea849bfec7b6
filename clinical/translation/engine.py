"""The process-wide engine: built from settings once, started lazily.

The engine is created and started inside the running event loop on first
use (never once per request); every consumer and command in the process
shares it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from django.conf import settings

from clinical.quality import measure as quality
from clinical.runtime.metrics import ENGINE_QUEUE_DEPTH
from inference.base import Engine, GenerationParams
from inference.factory import EngineConfig, create_engine
from inference.prompts import build_messages

logger = logging.getLogger(__name__)

_engine: Engine | None = None
_ready: asyncio.Future | None = None


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


async def engine_get() -> Engine:
    """The started engine of this process (loads it on the first call and
    prefills the shared prompt).

    Concurrent first callers wait for the same load.

    Raises:
        inference.EngineError: the model failed to load (the next call
            tries again).
    """
    global _engine, _ready
    if _ready is None or (_ready.done() and _ready.exception() is not None):
        loop = asyncio.get_running_loop()
        _ready = loop.create_future()
        try:
            if _engine is None:
                _engine = create_engine(engine_config_from_settings())
            # The readability and safety word lists load (a few seconds,
            # once per process) while the model does.
            words = asyncio.ensure_future(asyncio.to_thread(_quality_warm))
            await _engine.start()
            await _prefill_shared_prompt(_engine)
            await words
        except BaseException as exc:
            _ready.set_exception(exc)
            _ready.exception()  # mark retrieved; callers get the raise below
            raise
        _ready.set_result(_engine)
        return _engine
    return await asyncio.shield(_ready)


async def _prefill_shared_prompt(engine: Engine) -> None:
    """Run one 1-token request so the shared system prompt is in the KV
    cache before the first clinician asks (prefix caching); its text is a
    fixed phrase, not patient data."""
    params = GenerationParams(max_tokens=1)
    async for _ in engine.generate(f"warmup-{uuid.uuid4()}", build_messages("No acute distress."), params):
        pass


def _quality_warm() -> None:
    try:
        quality.warm()
    except Exception as exc:  # noqa: BLE001 - the first measurement will report it
        logger.error("quality word lists failed to load: %s", type(exc).__name__)


def engine_set(engine: Engine | None) -> None:
    """Replace the process engine (tests use it to install a fake engine)."""
    global _engine, _ready
    _engine, _ready = engine, None


def engine_current() -> Engine | None:
    """The process engine if one was created (started or not), else
    ``None``; never creates one (shutdown and metrics use it)."""
    return _engine


async def engine_shutdown() -> None:
    """Shut the process engine down if one was created (server exit)."""
    if _engine is not None:
        await _engine.shutdown()


def _queue_depth() -> float:
    return float(_engine.queue_depth()) if _engine is not None else 0.0


ENGINE_QUEUE_DEPTH.set_function(_queue_depth)
