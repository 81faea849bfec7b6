"""The Celery worker's full-precision engine, loaded once per worker process.

The worker is synchronous; the engine is asyncio-based. One private event
loop per process runs every engine call (``run_in_engine_loop``), so the
engine and its background tasks always live on the same loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import TypeVar

from django.conf import settings

from inference.base import Engine
from inference.factory import EngineConfig, create_engine

logger = logging.getLogger(__name__)
T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_engine: Engine | None = None


def run_in_engine_loop(coro: Coroutine[object, object, T]) -> T:
    """Run ``coro`` to completion on the process's engine loop."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(coro)


def rerun_engine_config() -> EngineConfig:
    """Full precision: ``RERUN_DTYPE`` (float32) and no quantization."""
    from inference import models

    model = settings.RERUN_MODEL
    if not model and settings.RERUN_ENGINE == "vllm":
        model = str(models.default_hf_path())
    return EngineConfig(engine=settings.RERUN_ENGINE, model=model, dtype=settings.RERUN_DTYPE,
                        quantization="none", n_ctx=settings.INFERENCE_N_CTX)


def rerun_engine_get() -> Engine:
    """The worker's started engine (loaded on the first call).

    Raises:
        inference.EngineError: the model failed to load.
    """
    global _engine
    if _engine is None:
        started = time.perf_counter()
        engine = create_engine(rerun_engine_config())
        run_in_engine_loop(engine.start())
        _engine = engine
        logger.info("re-run engine ready engine=%s model=%s precision=%s in %.0f ms",
                    engine.info.engine, engine.info.model, engine.info.precision,
                    (time.perf_counter() - started) * 1000)
    return _engine


def rerun_engine_shutdown() -> None:
    """Release the engine (worker shutdown)."""
    global _engine
    if _engine is not None:
        run_in_engine_loop(_engine.shutdown())
        _engine = None
