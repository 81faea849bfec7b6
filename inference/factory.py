"""Choose and build the engine from plain settings (no Django here)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from inference.base import Engine
from inference.vllm_engine import cuda_available

logger = logging.getLogger(__name__)

ENGINE_CHOICES = ("auto", "vllm", "llamacpp", "fake")


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings, usually read from the environment by the caller.

    Attributes:
        engine: ``auto`` (vLLM when CUDA is present, else llama.cpp),
            ``vllm``, ``llamacpp`` or ``fake`` (tests only).
        model: GGUF path for llama.cpp; HF folder or name for vLLM. Empty
            means the engine's default model.
        precision: label recorded for llama.cpp outputs (GGUF quantization).
        n_ctx: context window in tokens.
        threads: CPU threads for llama.cpp (0 = all cores).
        quantization: vLLM quantization, ``"default"`` = fp8 on GPU, none on
            CPU; ``"none"`` = never quantize (full precision of ``dtype``).
        dtype: vLLM dtype, empty = fp32 on CPU, auto on GPU.
        max_queue: most requests queued or running before new ones are
            refused as busy; ``None`` = unbounded.
    """

    engine: str = "auto"
    model: str = ""
    precision: str = ""
    n_ctx: int = 4096
    threads: int = 0
    quantization: str = "default"
    dtype: str = ""
    max_queue: int | None = None


def resolve_engine_name(name: str) -> str:
    """Map ``auto`` to ``vllm`` or ``llamacpp``; validate the others.

    Raises:
        ValueError: unknown engine name.
    """
    if name not in ENGINE_CHOICES:
        raise ValueError(f"INFERENCE_ENGINE must be one of {ENGINE_CHOICES}, not {name!r}")
    if name == "auto":
        return "vllm" if cuda_available() else "llamacpp"
    return name


def create_engine(config: EngineConfig) -> Engine:
    """Build (not start) the configured engine.

    Raises:
        ValueError: unknown engine name.
        inference.models.ModelError: the default model is not installed.
    """
    from inference import models

    name = resolve_engine_name(config.engine)
    logger.info("inference engine selected: %s (configured %s)", name, config.engine)
    if name == "fake":
        import os

        from inference.fake_engine import FakeEngine

        # Tests of the web stack slow the fake engine down to exercise cancel.
        engine = FakeEngine(token_delay_s=float(os.environ.get("FAKE_ENGINE_TOKEN_DELAY_S", "0")),
                            answer=os.environ.get("FAKE_ENGINE_ANSWER") or None)
        engine.max_queue = config.max_queue
        return engine
    if name == "llamacpp":
        from inference.llamacpp_engine import LlamaCppEngine

        model = config.model or str(models.default_gguf_path())
        precision = config.precision or (
            "q4_k_m" if not config.model else _gguf_precision(model)
        )
        return LlamaCppEngine(model, n_ctx=config.n_ctx, n_threads=config.threads or None,
                              precision=precision, max_queue=config.max_queue)
    from inference.vllm_engine import VllmEngine

    model = config.model or str(models.default_hf_path())
    quantization = None if config.quantization == "none" else (config.quantization or "default")
    return VllmEngine(model, quantization=quantization,
                      dtype=config.dtype or None, max_model_len=config.n_ctx,
                      max_queue=config.max_queue)


def _gguf_precision(path: str) -> str:
    """Guess the quantization label from a GGUF file name (``...Q4_1.gguf``)."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".gguf")
    tail = stem.rsplit(".", 1)[-1] if "." in stem else stem.rsplit("-", 1)[-1]
    return tail.lower() if tail.lower().startswith(("q", "f", "bf", "iq")) else "gguf"
