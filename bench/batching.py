"""Continuous batching in the llama.cpp engine against the serial engine,
on the default model.

    .venv/bin/python -m bench batching [--model PATH] [--levels 1,8,16] [--batch 8]
        [--equality 24] [--out docs/benchmarks]

Bare engine (no web stack), the product's prompt
(:func:`inference.prompts.build_messages`) on laymaker-dev sentences: for
the serial engine (``max_batch=1``) and the batched one, a closed-loop
sweep (each client sends its next request when the previous one ends;
every request a sentence of its own, 32 output tokens, ``ignore_eos``) with
TTFT P50/P95 and aggregate output tokens/s; then greedy outputs (natural
stop, at most 64 tokens) of ``--equality`` sentences run one at a time on
the serial engine and all at once on the batched one, compared text for
text. Writes ``batching.json`` and ``batching.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from bench.stats import RequestResult, summarize
from bench.workloads import ROOT, short_texts


async def one(engine, request_id: str, text: str, max_tokens: int, ignore_eos: bool):
    from inference.base import GenerationParams
    from inference.prompts import build_messages

    result = RequestResult(sent_s=time.perf_counter())
    pieces, logprobs = [], []
    try:
        async for delta in engine.generate(request_id, build_messages(text),
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


async def sweep(engine, label: str, texts: list[str], levels: list[int], tokens: int) -> list[dict]:
    runs, used = [], 0
    for clients in levels:
        n = max(clients, 6) if clients == 1 else clients
        batch = texts[used:used + n]
        used += n
        queue = list(enumerate(batch))
        results: list[RequestResult] = []

        async def client():
            while queue:
                i, text = queue.pop(0)
                result, _, _ = await one(engine, f"{label}-{clients}-{i}", text, tokens, True)
                results.append(result)

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - started
        summary = summarize(results, wall)
        runs.append({"engine": label, "clients": clients, "requests": n, **summary})
        print(f"[{time.strftime('%H:%M:%S')}] {label} c={clients}: TTFT P50 {summary['ttft_ms']['p50']} "
              f"P95 {summary['ttft_ms']['p95']} ms, {summary['output_tokens_per_s']} tok/s", flush=True)
    return runs


async def run(args) -> dict:
    from inference.llamacpp_engine import LlamaCppEngine
    from inference.models import default_gguf_path

    model = args.model or str(default_gguf_path())
    texts = short_texts(200)
    eq_texts = texts[-args.equality:] if args.equality else []
    report: dict = {"model": os.path.basename(model), "levels": args.levels, "batch": args.batch,
                    "threads": args.threads or os.cpu_count(), "output_tokens": args.tokens,
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "load_before": [round(x, 2) for x in os.getloadavg()], "runs": []}
    outputs: dict[str, list] = {}
    for label, max_batch in (("serial", 1), ("batched", args.batch)):
        engine = LlamaCppEngine(model, n_ctx=args.n_ctx, n_threads=args.threads or None, max_batch=max_batch)
        await engine.start()
        try:
            await one(engine, f"{label}-warm", texts[-args.equality - 1], 4, True)  # instructions read
            report["runs"] += await sweep(engine, label, texts, args.levels, args.tokens)
            if eq_texts:
                if max_batch == 1:
                    got = [await one(engine, f"eq-{i}", t, 64, False) for i, t in enumerate(eq_texts)]
                else:
                    got = await asyncio.gather(*(one(engine, f"eq-{i}", t, 64, False)
                                                 for i, t in enumerate(eq_texts)))
                outputs[label] = [(text, lps) for _, text, lps in got]
        finally:
            await engine.shutdown()
    if eq_texts:
        pairs = list(zip(outputs["serial"], outputs["batched"]))
        same = [a[0] == b[0] for a, b in pairs]
        conf = [abs(sum(a[1]) / max(1, len(a[1])) - sum(b[1]) / max(1, len(b[1]))) for a, b in pairs]
        report["equality"] = {
            "sentences": len(pairs), "equal": sum(same), "percent": round(100 * sum(same) / len(pairs), 1),
            "max_mean_logprob_diff": round(max(conf), 6),
            "differing": [{"input": t, "serial": a[0], "batched": b[0]}
                          for t, (a, b), s in zip(eq_texts, pairs, same) if not s]}
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return report


def write_md(report: dict, out: Path) -> Path:
    lines = [
        "# Continuous batching in the llama.cpp engine", "",
        f"Generated by `python -m bench batching` on {report['started']} on {os.cpu_count()} CPU cores "
        f"(shared with other work: load average {report['load_before']} before, {report['load_after']} after, "
        "so absolute times are noisy). Model {model}, bare engine (no web stack), the product's prompt on "
        "laymaker-dev sentences, {tok} output tokens per request (`ignore_eos`), {thr} threads; closed loop "
        "(each client sends its next request when its previous one ends). Batched engine: `max_batch` "
        "{batch}.".format(model=report["model"], tok=report["output_tokens"], thr=report["threads"],
                          batch=report["batch"]), "",
        "| engine | clients | requests | TTFT P50 ms | TTFT P95 ms | TPOT P50 ms | E2E P95 ms | out tok/s |",
        "|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        lines.append(f"| {r['engine']} | {r['clients']} | {r['requests']} | {r['ttft_ms']['p50']} | "
                     f"{r['ttft_ms']['p95']} | {r['tpot_ms']['p50']} | {r['e2e_ms']['p95']} | "
                     f"{r['output_tokens_per_s']} |")
    by = {(r["engine"], r["clients"]): r for r in report["runs"]}
    lines += ["", "Aggregate output tokens/s relative to one client of the same engine:", ""]
    for label in ("serial", "batched"):
        base = by.get((label, 1))
        if base:
            ratios = ", ".join(f"{c} clients {by[(label, c)]['output_tokens_per_s'] / base['output_tokens_per_s']:.2f}×"
                               for c in report["levels"] if (label, c) in by and c != 1)
            lines.append(f"* {label}: {ratios}")
    eq = report.get("equality")
    if eq:
        lines += ["", "## Greedy outputs", "",
                  f"{eq['equal']} of {eq['sentences']} laymaker-dev sentences ({eq['percent']} %) give the same "
                  "text from the batched engine (all sentences at once) as from the serial engine (one at a time), "
                  f"at most 64 tokens, natural stop; largest difference of mean token log-probability "
                  f"(the confidence input) {eq['max_mean_logprob_diff']}."]
        for d in eq["differing"]:
            lines += ["", f"* input: {d['input']}", f"  * serial: {d['serial']}", f"  * batched: {d['batched']}"]
    path = out / "batching.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench batching", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="GGUF file (default: the product's default model)")
    parser.add_argument("--levels", default="1,8,16")
    parser.add_argument("--batch", type=int, default=8, help="max_batch of the batched engine")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--equality", type=int, default=24, help="sentences compared (0 = none)")
    parser.add_argument("--threads", type=int, default=0, help="0 = all cores")
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",") if x]
    report = asyncio.run(run(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "batching.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(write_md(report, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
