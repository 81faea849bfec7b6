"""Choose and build the engine from plain settings (no Django here)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from inference import weights
from inference.base import Engine
from inference.llamacpp_prefix import DEFAULT_PREFIX_SNAPSHOTS
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
        device: ``auto`` (CUDA when torch sees a device, else CPU),
            ``cuda`` or ``cpu``; see :func:`resolve_device`.
        tensor_parallel_size: GPUs one vLLM engine spans.
        gpu_memory_utilization: fraction (0, 1] of each GPU's memory vLLM
            may take for weights, activations and KV cache.
        gpu_memory_setting: the setting ``gpu_memory_utilization`` came
            from (``INFERENCE_GPU_MEMORY_UTILIZATION`` or
            ``RERUN_GPU_MEMORY_UTILIZATION``), named when it does not fit.
        max_model_len: vLLM context length in tokens; 0 = ``n_ctx``.
        prefix_caching: vLLM automatic prefix caching (the shared system
            prompt's KV cache is reused).
        enforce_eager: ``None`` = eager on CPU, CUDA graphs on GPU.
        speculative_model: vLLM speculative decoding: a draft model's HF
            folder or name, or ``"ngram"`` (prompt lookup); empty = off.
        num_speculative_tokens: tokens the draft proposes per step.
        max_batch: llama.cpp requests decoded together (continuous
            batching); 1 = one request at a time (the serial engine); 0 =
            the engine's measured default
            (:data:`inference.llamacpp_engine.DEFAULT_MAX_BATCH`). Read
            from ``ENGINE_MAX_BATCH`` when not given.
        prefix_snapshots: llama.cpp KV-cache snapshots of instruction
            prefixes kept (:mod:`inference.llamacpp_prefix`): one per
            instruction set in use (each example cluster's prefix, the
            one-example prompt per grade and language, the self-check's).
            Each takes about 28 KiB per prefix token for Qwen2.5-1.5B in
            f16 (a 600-token cluster prefix: about 16 MiB; 32 of them about
            0.5 GiB). Read from ``INFERENCE_PREFIX_SNAPSHOTS`` when not
            given; default
            :data:`inference.llamacpp_prefix.DEFAULT_PREFIX_SNAPSHOTS`.
        prefix_state_dir: folder where llama.cpp writes its prefix snapshots
            and reads them back after a restart (a warm restart:
            :mod:`inference.llamacpp_prefix`); empty = memory only. Read
            from ``INFERENCE_PREFIX_STATE_DIR`` when not given; default
            ``$CLINICAL_CACHE/prefix-states``.
    """

    engine: str = "auto"
    model: str = ""
    precision: str = ""
    n_ctx: int = 4096
    threads: int = 0
    quantization: str = "default"
    dtype: str = ""
    max_queue: int | None = None
    device: str = "auto"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    gpu_memory_setting: str = "INFERENCE_GPU_MEMORY_UTILIZATION"
    max_model_len: int = 0
    prefix_caching: bool = True
    enforce_eager: bool | None = None
    speculative_model: str = ""
    num_speculative_tokens: int = 5
    max_batch: int = field(default_factory=lambda: env_max_batch())
    prefix_snapshots: int = field(default_factory=lambda: env_prefix_snapshots())
    prefix_state_dir: str = field(default_factory=lambda: env_prefix_state_dir())


def env_max_batch() -> int:
    """``ENGINE_MAX_BATCH`` from the environment (0 = engine default).

    Raises:
        ValueError: not a whole number >= 0.
    """
    raw = os.environ.get("ENGINE_MAX_BATCH", "").strip() or "0"
    value = int(raw)
    if value < 0:
        raise ValueError(f"ENGINE_MAX_BATCH must be >= 0, not {raw!r}")
    return value


def env_prefix_snapshots() -> int:
    """``INFERENCE_PREFIX_SNAPSHOTS`` from the environment (default
    :data:`DEFAULT_PREFIX_SNAPSHOTS`; 0 = keep none).

    Raises:
        ValueError: not a whole number >= 0.
    """
    raw = os.environ.get("INFERENCE_PREFIX_SNAPSHOTS", "").strip() or str(DEFAULT_PREFIX_SNAPSHOTS)
    value = int(raw)
    if value < 0:
        raise ValueError(f"INFERENCE_PREFIX_SNAPSHOTS must be >= 0, not {raw!r}")
    return value


def env_prefix_state_dir() -> str:
    """``INFERENCE_PREFIX_STATE_DIR`` from the environment: unset = the
    ``prefix-states`` folder of the model cache
    (:func:`inference.weights.cache_dir`); empty or ``off`` = none."""
    raw = os.environ.get("INFERENCE_PREFIX_STATE_DIR")
    if raw is None:
        return str(weights.cache_dir() / "prefix-states")
    return "" if raw.strip().lower() in ("", "off") else raw.strip()


DEVICE_CHOICES = ("auto", "cuda", "cpu")


def resolve_device(name: str) -> str:
    """Map ``INFERENCE_DEVICE`` to the device this process will use.

    Raises:
        ValueError: unknown name, or ``cuda`` asked for where torch sees no
            CUDA device.
    """
    if name not in DEVICE_CHOICES:
        raise ValueError(f"INFERENCE_DEVICE must be one of {DEVICE_CHOICES}, not {name!r}")
    if name == "auto":
        return "cuda" if cuda_available() else "cpu"
    if name == "cuda" and not cuda_available():
        raise ValueError("INFERENCE_DEVICE=cuda, but torch sees no CUDA device (driver, "
                         "CUDA_VISIBLE_DEVICES or a CPU-only torch build?)")
    return name


def _describe_device(device: str) -> str:
    if device != "cuda":
        return "cpu"
    try:
        import torch

        count = torch.cuda.device_count()
        return f"cuda ({count} x {torch.cuda.get_device_name(0)})"
    except Exception:  # noqa: BLE001 - description only
        return "cuda"


def resolve_engine_name(name: str, device: str | None = None) -> str:
    """Map ``auto`` to ``vllm`` (on CUDA) or ``llamacpp`` (on CPU); validate
    the others. ``device`` is a resolved device; ``None`` = look for CUDA.

    Raises:
        ValueError: unknown engine name.
    """
    if name not in ENGINE_CHOICES:
        raise ValueError(f"INFERENCE_ENGINE must be one of {ENGINE_CHOICES}, not {name!r}")
    if name == "auto":
        on_gpu = cuda_available() if device is None else device == "cuda"
        return "vllm" if on_gpu else "llamacpp"
    return name


def engine_device(config: EngineConfig) -> str:
    """The device ``config``'s engine will run on, ``cpu`` or ``cuda``,
    without building it: the fake engine and llama.cpp on ``auto`` run on
    the CPU (no torch import to look for CUDA), anything else resolves
    ``config.device`` (:func:`resolve_device`).

    Raises:
        ValueError: see :func:`resolve_device`.
    """
    if config.engine in ("fake", "llamacpp") and config.device == "auto":
        return "cpu"
    return resolve_device(config.device)


def create_engine(config: EngineConfig) -> Engine:
    """Build (not start) the configured engine.

    Raises:
        ValueError: unknown engine name.
        inference.weights.ModelError: the default model is not installed.
    """
    device = engine_device(config)
    name = resolve_engine_name(config.engine, device)
    logger.info("inference engine selected: %s on %s (configured engine=%s device=%s)",
                name, _describe_device(device) if name == "vllm" else "cpu", config.engine, config.device)
    if name == "llamacpp" and device == "cuda":
        logger.warning("llama.cpp is built for the CPU here; it will not use the GPU")
    if name == "fake":
        from inference.fake_engine import FakeEngine

        # Tests of the web stack slow the fake engine down to exercise cancel
        # (FAKE_ENGINE_TOKEN_DELAY_S, seconds per token), fix its answer
        # (FAKE_ENGINE_ANSWER), or make it hang on requests whose text contains
        # FAKE_ENGINE_HANG_ON (the re-run worker's time limit, tests/live/test_rerun_hang.py),
        # or answer every self-check with one P(yes) (FAKE_ENGINE_SELF_CHECK).
        check_all = os.environ.get("FAKE_ENGINE_SELF_CHECK")
        engine = FakeEngine(token_delay_s=float(os.environ.get("FAKE_ENGINE_TOKEN_DELAY_S", "0")),
                            answer=os.environ.get("FAKE_ENGINE_ANSWER") or None,
                            hang_on=os.environ.get("FAKE_ENGINE_HANG_ON") or None,
                            check_all=float(check_all) if check_all else None)
        engine.max_queue = config.max_queue
        return engine
    if name == "llamacpp":
        from inference.llamacpp_engine import LlamaCppEngine

        model = config.model or str(weights.default_gguf_path())
        precision = config.precision or (
            "q4_k_m" if not config.model else _gguf_precision(model)
        )
        return LlamaCppEngine(model, n_ctx=config.n_ctx, n_threads=config.threads or None,
                              precision=precision, max_queue=config.max_queue,
                              max_batch=config.max_batch or None, prefix_snapshots=config.prefix_snapshots,
                              prefix_state_dir=config.prefix_state_dir or None)
    from inference.vllm_engine import VllmEngine

    model = config.model or str(weights.default_hf_path())
    quantization = None if config.quantization == "none" else (config.quantization or "default")
    return VllmEngine(model, device=device, quantization=quantization,
                      dtype=config.dtype or None, max_model_len=config.max_model_len or config.n_ctx,
                      enable_prefix_caching=config.prefix_caching,
                      gpu_memory_utilization=config.gpu_memory_utilization,
                      gpu_memory_setting=config.gpu_memory_setting,
                      tensor_parallel_size=config.tensor_parallel_size,
                      enforce_eager=config.enforce_eager,
                      speculative_model=config.speculative_model or None,
                      num_speculative_tokens=config.num_speculative_tokens,
                      max_queue=config.max_queue)


def _gguf_precision(path: str) -> str:
    """Guess the quantization label from a GGUF file name (``...Q4_1.gguf``)."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".gguf")
    tail = stem.rsplit(".", 1)[-1] if "." in stem else stem.rsplit("-", 1)[-1]
    return tail.lower() if tail.lower().startswith(("q", "f", "bf", "iq")) else "gguf"
