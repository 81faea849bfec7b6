"""Continuous batching in the llama.cpp engine against the serial engine,
on the default model and the product's cluster prompt.

    .venv/bin/python -m bench batching [--model PATH] [--levels 1,8,16] [--batch 8,16]
        [--native 8] [--equality 50] [--n-ctx 4096] [--out docs/benchmarks]

Bare engine (no web stack). Every request is what the product sends for one
sentence (:func:`inference.examples.cluster_messages` on the shipped pool's
router, ``PROMPT_CLUSTERS`` 24 x ``PROMPT_CLUSTER_EXAMPLES`` 8,
``PROMPT_RETRIEVED_K`` 0, as ``clinical.models.translation_parts`` renders
a sentence), on laymaker-dev sentences of at least 6 words that are not
one of their own cluster's worked examples (such a sentence gets a prefix
of its own, which a clinician's new text never does): 96 sentences in 15
clusters.

For the serial engine (``max_batch=1``), each batched size (``--batch``)
and each ``--native`` peer (llama.cpp's own ``llama-server --parallel N``,
:mod:`bench.llama_server`, built from the engine's llama.cpp on first use),
one after another:

1. load the model and warm the prefix of every cluster the sentences use
   (one-token background requests, as ``clinical.translation.engine`` does
   for all 24 after start), so the run sees the product's steady state
   (every prefix in a snapshot);
2. a closed-loop sweep (each client sends its next request when its previous
   one ends; ``max(8, 2 x clients)`` requests per level, the same sentences
   for every engine; ``--tokens`` output tokens, ``ignore_eos``): TTFT
   P50/P95 (ms, from send to first token, queue wait included), TPOT P50
   and aggregate output tokens/s;
3. greedy outputs (natural stop, at most 64 tokens) of the last
   ``--equality`` sentences, one at a time on the serial engine and all at
   once on a batched one, compared text for text;
4. the process's resident memory (RSS, MiB, ``psutil``) before the load,
   after the warm-up and after the run, and the snapshots' bytes.

Writes ``batching.json`` and the generated section of ``batching.md``
(between its ``bench batching`` markers; the rest of the file is kept),
with the issue's targets (issue 17) met or missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.stats import RequestResult, summarize
from bench.workloads import ROOT, short_texts

BEGIN = "<!-- bench batching: generated, begin -->"
END = "<!-- bench batching: generated, end -->"
#: The product's cluster prompt (clinical.settings defaults).
CLUSTERS, PER_CLUSTER, RETRIEVED_K = 24, 8, 0


def rss_mib() -> float:
    """Resident memory of this process (MiB)."""
    import psutil

    return round(psutil.Process().memory_info().rss / 2**20, 1)


def server_rss_mib(engine) -> float:
    """Resident memory of a :class:`bench.llama_server.NativeEngine`'s
    server process (MiB)."""
    import psutil

    return round(psutil.Process(engine.server.pid).memory_info().rss / 2**20, 1)


def uptime() -> str:
    """``uptime``'s line (the shared machine's load)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def product_sentences() -> tuple[object, list[str]]:
    """``(router, sentences)``: the shipped pool's router and the laymaker-dev
    sentences (>= 6 words) whose prompt has their cluster's shared prefix."""
    from inference.examples import default_router

    router = default_router(CLUSTERS, PER_CLUSTER)
    texts = []
    for text in short_texts(250):
        cluster, fixed = router.route(text)
        if len(fixed) == len(router.fixed[cluster]):
            texts.append(text)
    return router, texts


async def one(engine, request_id: str, messages, max_tokens: int, ignore_eos: bool):
    from inference.base import GenerationParams

    result = RequestResult(sent_s=time.perf_counter())
    pieces, logprobs = [], []
    try:
        async for delta in engine.generate(request_id, messages,
                                           GenerationParams(max_tokens=max_tokens, ignore_eos=ignore_eos)):
            if delta.token_logprobs or delta.text:
                result.token_times_s.append(time.perf_counter())
            result.output_tokens += len(delta.token_logprobs)
            pieces.append(delta.text)
            logprobs.extend(delta.token_logprobs)
            if delta.prompt_tokens is not None:
                result.prompt_tokens = delta.prompt_tokens
    except Exception as exc:  # noqa: BLE001 - counted
        result.error = type(exc).__name__
    result.end_s = time.perf_counter()
    return result, "".join(pieces), logprobs


async def warm(engine, router, clusters: set[int]) -> float:
    """The prefixes of ``clusters`` read once, largest cluster first (seconds)."""
    from inference.base import GenerationParams
    from inference.examples import cluster_prefix_messages

    started = time.perf_counter()
    for cluster in sorted(clusters, key=lambda c: (-router.sizes[c], c)):
        async for _ in engine.generate(f"warm-{cluster}", cluster_prefix_messages(cluster, router=router),
                                       GenerationParams(max_tokens=1, background=True)):
            pass
    return round(time.perf_counter() - started, 1)


async def sweep(engine, label: str, prompts: list, levels: list[int], tokens: int) -> list[dict]:
    runs, used = [], 0
    for clients in levels:
        n = max(8, 2 * clients)
        batch = prompts[used:used + n]
        used += n
        queue = list(enumerate(batch))
        results: list[RequestResult] = []

        async def client():
            while queue:
                i, messages = queue.pop(0)
                result, _, _ = await one(engine, f"{label}-{clients}-{i}", messages, tokens, True)
                results.append(result)

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - started
        summary = summarize(results, wall)
        runs.append({"engine": label, "clients": clients, **summary})
        print(f"[{time.strftime('%H:%M:%S')}] {label} c={clients} n={n}: TTFT P50 {summary['ttft_ms']['p50']} "
              f"P95 {summary['ttft_ms']['p95']} ms, TPOT P50 {summary['tpot_ms']['p50']} ms, "
              f"{summary['output_tokens_per_s']} tok/s", flush=True)
    return runs


async def run(args) -> dict:
    from inference.examples import cluster_messages
    from inference.llamacpp_engine import LlamaCppEngine
    from inference.models import default_gguf_path

    model = args.model or str(default_gguf_path())
    router, texts = product_sentences()
    prompts = [cluster_messages(t, router=router, k=RETRIEVED_K) for t in texts]
    needed = sum(max(8, 2 * c) for c in args.levels)
    if needed > len(prompts):
        raise SystemExit(f"the sweep needs {needed} sentences, there are {len(prompts)}")
    eq = list(range(len(prompts)))[-args.equality:] if args.equality else []
    report: dict = {"model": os.path.basename(model), "levels": args.levels, "batch": args.batch,
                    "native": args.native,
                    "threads": args.threads or os.cpu_count(), "cpus": os.cpu_count(), "n_ctx": args.n_ctx,
                    "output_tokens": args.tokens, "prompt": f"cluster {CLUSTERS}x{PER_CLUSTER}, k {RETRIEVED_K}",
                    "sentences": len(prompts), "clusters_used": len({router.route(t)[0] for t in texts}),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "uptime_before": uptime(), "runs": [], "engines": {}}
    print(report["uptime_before"], flush=True)
    outputs: dict[str, list] = {}
    for label, max_batch in ([("serial", 1)] + [(f"batched-{b}", b) for b in args.batch]
                             + [(f"llama-server-{n}", n) for n in args.native]):
        native = label.startswith("llama-server")
        before = rss_mib()
        started = time.perf_counter()
        if native:
            from bench.llama_server import NativeEngine

            engine = NativeEngine(model, slots=max_batch, n_ctx=args.n_ctx, threads=args.threads or os.cpu_count(),
                                  log_path=Path(tempfile.gettempdir()) / f"bench-{label}.log")
            rss = (lambda: server_rss_mib(engine))  # noqa: E731 - the server's process, not this one
        else:
            engine = LlamaCppEngine(model, n_ctx=args.n_ctx, n_threads=args.threads or None, max_batch=max_batch,
                                    precision="q4_k_m")
            rss = rss_mib
        await engine.start()
        if native:
            before = rss()
        info = {"max_batch": max_batch, "rss_before_mib": before, "load_s": round(time.perf_counter() - started, 1)}
        try:
            info["warm_s"] = await warm(engine, router, {router.route(t)[0] for t in texts})
            info["rss_warm_mib"] = rss()
            print(f"[{time.strftime('%H:%M:%S')}] {label}: loaded {info['load_s']} s, warmed {info['warm_s']} s, "
                  f"RSS {info['rss_warm_mib']} MiB", flush=True)
            report["runs"] += await sweep(engine, label, prompts, args.levels, args.tokens)
            if eq:
                t0 = time.perf_counter()
                if max_batch == 1:
                    got = [await one(engine, f"eq-{i}", prompts[i], 64, False) for i in eq]
                else:
                    got = await asyncio.gather(*(one(engine, f"eq-{i}", prompts[i], 64, False) for i in eq))
                info["equality_s"] = round(time.perf_counter() - t0, 1)
                outputs[label] = [(text, lps) for _, text, lps in got]
            info["rss_after_mib"] = rss()
            if native:
                info["prompt_tokens_evaluated"] = engine.prompt_tokens_evaluated
                info["prompt_tokens_sent"] = engine.prompt_tokens_sent
            else:
                info["snapshots"] = len(engine.prefix_snapshots)
                info["snapshot_mib"] = round(engine.prefix_snapshots.nbytes / 2**20, 1)
                info["prefix_evaluations"] = engine.prefix_evaluations
                info["prefixes_restored"] = engine.prefix_snapshots.restored
        finally:
            await engine.shutdown()
        report["engines"][label] = info
    if eq:
        report["equality"] = {}
        for label in outputs:
            if label == "serial":
                continue
            pairs = list(zip(outputs["serial"], outputs[label]))
            same = [a[0] == b[0] for a, b in pairs]
            conf = [abs(sum(a[1]) / max(1, len(a[1])) - sum(b[1]) / max(1, len(b[1]))) for a, b in pairs]
            report["equality"][label] = {
                "sentences": len(pairs), "equal": sum(same), "percent": round(100 * sum(same) / len(pairs), 1),
                "max_mean_logprob_diff": round(max(conf), 6),
                "differing": [{"input": texts[i], "serial": a[0], "batched": b[0]}
                              for i, (a, b), s in zip(eq, pairs, same) if not s]}
    report["uptime_after"] = uptime()
    report["targets"] = targets(report)
    return report


def targets(report: dict) -> dict:
    """The issue's targets for each batched engine: ``{label: [(target,
    figure, met)]}``. Throughput ratios are against one client of the same
    engine (and, in the figure's text, of the serial one)."""
    by = {(r["engine"], r["clients"]): r for r in report["runs"]}
    serial1 = by.get(("serial", 1))
    out: dict = {}
    for b in report["batch"]:
        label = f"batched-{b}"
        rows = []
        one_client = by.get((label, 1))
        if (label, 8) in by:
            p95 = by[(label, 8)]["ttft_ms"]["p95"]
            rows.append(("TTFT P95 at 8 clients <= 1.0 s", f"{p95:.0f} ms", p95 <= 1000))
        for clients, goal in ((8, 1.4), (16, 2.2)):
            if (label, clients) in by and one_client and serial1:
                tps = by[(label, clients)]["output_tokens_per_s"]
                own, ser = tps / one_client["output_tokens_per_s"], tps / serial1["output_tokens_per_s"]
                rows.append((f"output tokens/s at {clients} clients >= {goal}x one client",
                             f"{own:.2f}x its one client ({ser:.2f}x the serial one)", own >= goal))
        if one_client and serial1:
            for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
                ratio = one_client[key]["p50"] / serial1[key]["p50"]
                rows.append((f"one client {name} P50 within 10 % of serial",
                             f"{one_client[key]['p50']:.0f} ms against {serial1[key]['p50']:.0f} ms "
                             f"({100 * (ratio - 1):+.1f} %)", ratio <= 1.10))
        peer = by.get((f"llama-server-{b}", 8))
        if peer and (label, 8) in by:
            ratio = by[(label, 8)]["output_tokens_per_s"] / peer["output_tokens_per_s"]
            rows.append(("output tokens/s at 8 clients >= 0.9x llama-server with the same slots",
                         f"{ratio:.2f}x ({by[(label, 8)]['output_tokens_per_s']} against "
                         f"{peer['output_tokens_per_s']} tok/s)", ratio >= 0.9))
        eq = report.get("equality", {}).get(label)
        if eq:
            rows.append(("greedy outputs equal on >= 98 %", f"{eq['equal']} / {eq['sentences']} ({eq['percent']} %)",
                         eq["percent"] >= 98))
        out[label] = rows
    return out


def section(report: dict) -> str:
    """The generated Markdown section (figures, targets, differing outputs)."""
    lines = [
        BEGIN,
        f"Generated by `python -m bench batching` on {report['started']} ({report['cpus']} CPU cores, "
        f"{report['threads']} threads, shared with other engineers: the CPU lock was held, and the load was "
        f"`{report['uptime_before']}` before and `{report['uptime_after']}` after). Model {report['model']}, "
        f"bare engine (no web stack), `n_ctx` {report['n_ctx']}; the product's prompt ({report['prompt']}, "
        f"`inference.examples.cluster_messages`) on {report['sentences']} laymaker-dev sentences in "
        f"{report['clusters_used']} clusters, their prefixes warmed first; {report['output_tokens']} "
        "output tokens per request (`ignore_eos`); closed loop, max(8, 2 x clients) requests per level.",
        "",
        "| engine | clients | requests | TTFT P50 ms | TTFT P95 ms | TPOT P50 ms | E2E P95 ms | out tok/s |",
        "|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        lines.append(f"| {r['engine']} | {r['clients']} | {r['requests']} | {r['ttft_ms']['p50']:.0f} | "
                     f"{r['ttft_ms']['p95']:.0f} | {r['tpot_ms']['p50']:.1f} | {r['e2e_ms']['p95']:.0f} | "
                     f"{r['output_tokens_per_s']} |")
    lines += ["", "| engine | load s | warm-up s | RSS before / warmed / after MiB | "
              "snapshots (MiB) | prefixes read / restored |", "|---|---|---|---|---|---|"]
    for label, e in report["engines"].items():
        if "snapshots" in e:
            cache = f"{e['snapshots']} ({e['snapshot_mib']}) | {e['prefix_evaluations']} / {e['prefixes_restored']}"
        else:  # llama-server: its prompt cache, in tokens
            sent = f" of {e['prompt_tokens_sent']} sent" if "prompt_tokens_sent" in e else ""
            cache = f"its prompt cache | prompt tokens read {e['prompt_tokens_evaluated']}{sent}"
        lines.append(f"| {label} | {e['load_s']} | {e['warm_s']} | {e['rss_before_mib']} / {e['rss_warm_mib']} / "
                     f"{e['rss_after_mib']} | {cache} |")
    for label, rows in report["targets"].items():
        lines += ["", f"Targets (issue 17), {label}:", "", "| target | figure | met |", "|---|---|---|"]
        lines += [f"| {t} | {f} | {'yes' if ok else '**no**'} |" for t, f, ok in rows]
    for label, eq in report.get("equality", {}).items():
        lines += ["", f"Greedy outputs, {label}: {eq['equal']} of {eq['sentences']} sentences ({eq['percent']} %) "
                  "give the same text all at once as the serial engine one at a time (at most 64 tokens, natural "
                  f"stop); largest difference of mean token log-probability {eq['max_mean_logprob_diff']}."]
        for d in eq["differing"]:
            lines += ["", f"* input: {d['input']}", f"  * serial: {d['serial']}", f"  * batched: {d['batched']}"]
    lines.append(END)
    return "\n".join(lines)


def write_md(report: dict, out: Path) -> Path:
    """Replace the generated section of ``out/batching.md`` (or write the
    file with only that section)."""
    path = out / "batching.md"
    text = section(report)
    if path.exists() and BEGIN in (old := path.read_text(encoding="utf-8")) and END in old:
        head, rest = old.split(BEGIN, 1)
        text = head + text + rest.split(END, 1)[1]
    else:
        text = "# Continuous batching in the llama.cpp engine\n\n" + text + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench batching", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="GGUF file (default: the product's default model)")
    parser.add_argument("--levels", default="1,8,16")
    parser.add_argument("--batch", default="8,16", help="max_batch of each batched engine, comma-separated")
    parser.add_argument("--native", default="",
                        help="llama-server --parallel N peers, comma-separated (built once: bench.llama_server)")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--equality", type=int, default=50, help="sentences compared (0 = none)")
    parser.add_argument("--threads", type=int, default=0, help="0 = all cores")
    parser.add_argument("--n-ctx", type=int, default=4096, help="the product's INFERENCE_N_CTX")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",") if x]
    args.batch = [int(x) for x in args.batch.split(",") if x]
    args.native = [int(x) for x in args.native.split(",") if x and x != "0"]
    args.out.mkdir(parents=True, exist_ok=True)
    report = asyncio.run(run(args))
    (args.out / "batching.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(write_md(report, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
