"""How long does the safety check take on a long input?

Times :func:`clinical.quality.safety.safety_check` on the Cochrane val abstract
whose length is closest to 2,400 characters, against its own plain-language
summary (a realistic output that drops many numbers) and against itself
(every item found), after one warm-up call. For scale, the same run times
textstat's FKGL of the same input (warm).

    .venv/bin/python -m bench.safety_timing [--repeat 200] [--out docs/quality/safety-timing]

writes ``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

from bench.shared_data import shared_data_file


def _time_ms(function, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    from clinical.quality import readability, safety

    parser = argparse.ArgumentParser(prog="python -m bench.safety_timing", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--chars", type=int, default=2400, help="target input length")
    parser.add_argument("--out", default="docs/quality/safety-timing")
    args = parser.parse_args(argv)

    sources = shared_data_file("cochrane-val.source").read_text(encoding="utf-8").splitlines()
    targets = shared_data_file("cochrane-val.target").read_text(encoding="utf-8").splitlines()
    index = min(range(len(sources)), key=lambda i: abs(len(sources[i]) - args.chars))
    source, target = sources[index], targets[index]
    started = time.perf_counter()
    safety.warm()
    readability.warm()
    warm_ms = (time.perf_counter() - started) * 1000
    result = safety.safety_check(input_text=source, output_text=target)
    counter = itertools.count(1)
    rows = {
        "safety_check vs plain summary": _time_ms(lambda: safety.safety_check(input_text=source, output_text=target),
                                                  args.repeat),
        "safety_check vs itself": _time_ms(lambda: safety.safety_check(input_text=source, output_text=source),
                                           args.repeat),
        # a new text each call: textstat caches results per text
        "textstat FKGL of the same input (warm, for scale)": _time_ms(
            lambda: readability.fkgl(source + " x" * next(counter)), args.repeat),
    }
    summary = {
        "input": f"cochrane-val line {index + 1}", "input_chars": len(source), "repeat": args.repeat,
        "warm_ms": round(warm_ms, 1), "items_checked": len(result.checked), "items_missing": len(result.missing),
        "missing_by_kind": result.missing_counts(),
        "timings_ms": {name: {"median": round(statistics.median(t), 3),
                              "p95": round(statistics.quantiles(t, n=20)[-1], 3)} for name, t in rows.items()},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    lines = [
        "# Safety check timing", "",
        f"Input: {summary['input']} ({len(source):,} characters), {len(result.checked)} items found, "
        f"{len(result.missing)} missing from its plain-language summary ({result.missing_counts()}). "
        f"{args.repeat} runs each after warming the dictionaries ({warm_ms:,.0f} ms once per process). "
        "Command: `python -m bench.safety_timing`.", "",
        "| what | median (ms) | P95 (ms) |", "|---|---|---|",
        *[f"| {name} | {v['median']:.2f} | {v['p95']:.2f} |" for name, v in summary["timings_ms"].items()],
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
