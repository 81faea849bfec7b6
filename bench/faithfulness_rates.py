"""Flag rates of the faithfulness check (:mod:`clinical.quality.faithfulness`) on
laymaker-dev: the clinicians' rewrites (REFERENCE, faithful by
definition: every flag there is a false positive or a liberty the
clinician took), the four published systems, and this system's committed
outputs (``--outputs``, default ``docs/quality/quality-report-examples-outputs.jsonl``,
keys ``laymaker-<ID>``, the rows of ``--prompt-version``, default the
cluster prompt users get); and the 411 Cochrane plain-language summaries
of cochrane-val against their abstracts (``COCHRANE-PLS``: written for lay
readers by the reviews' authors, mostly faithful, but they may state what
the abstract does not, such as a search date). Also times the check per
laymaker sentence after warm-up.

    .venv/bin/python -m bench.faithfulness_rates [--out docs/quality/faithfulness-rates]
        [--outputs FILE] [--prompt-version VERSION]

writes ``<out>.json`` (rates by kind and every flag with its row) and
prints a Markdown summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.quality import CROSSFIT_CLUSTER_VERSION, cochrane_pairs, laymaker_outputs, laymaker_rows

SYSTEMS = ("REFERENCE", "REDDIT-NGRAM", "REDDIT-GPT1", "GENERAL-GPT2", "NTS")
OURS = "this system"
COCHRANE = "COCHRANE-PLS"
DEFAULT_OUTPUTS = "docs/quality/quality-report-examples-outputs.jsonl"


def main(argv: list[str] | None = None) -> int:
    from clinical.quality import faithfulness

    parser = argparse.ArgumentParser(prog="python -m bench.faithfulness_rates", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/quality/faithfulness-rates")
    parser.add_argument("--outputs", default=DEFAULT_OUTPUTS, help="this system's outputs (JSON lines)")
    parser.add_argument("--prompt-version", default=CROSSFIT_CLUSTER_VERSION,
                        help="the outputs' prompt version to read (the file may hold several)")
    args = parser.parse_args(argv)
    rows, _ = laymaker_rows()
    ours = laymaker_outputs(Path(args.outputs), args.prompt_version)
    if not ours:
        print(f"no laymaker outputs of prompt version {args.prompt_version!r} in {args.outputs}")
        return 2
    started = time.perf_counter()
    faithfulness.warm()
    warm_ms = (time.perf_counter() - started) * 1000
    summary: dict = {"warm_ms": round(warm_ms), "outputs": args.outputs, "prompt_version": args.prompt_version,
                     "systems": {}}
    times = []
    cochrane = [{"ID": f"cochrane-{line}", "ORIGINAL": source, COCHRANE: target}
                for line, (source, target) in enumerate(cochrane_pairs(), start=1)]
    for system in (*SYSTEMS, OURS, COCHRANE):
        flagged_rows, by_kind, flags = 0, {}, []
        rows_with_kind: dict[str, int] = {}
        total = 0
        for row in cochrane if system == COCHRANE else rows:
            output = ours.get(row["ID"]) if system == OURS else row[system]
            if output is None:
                continue
            total += 1
            t0 = time.perf_counter()
            result = faithfulness.faithfulness_check(row["ORIGINAL"], output)
            if system != COCHRANE:
                times.append((time.perf_counter() - t0) * 1000)
            if result.flags:
                flagged_rows += 1
                # a Cochrane pair is a whole paragraph on each side: its line number and the flags say enough
                flags.append({"id": row["ID"], "flags": result.flag_dicts()} if system == COCHRANE else
                             {"id": row["ID"], "input": row["ORIGINAL"], "output": output,
                              "flags": result.flag_dicts()})
            for kind, n in result.counts_by_kind().items():
                by_kind[kind] = by_kind.get(kind, 0) + n
                rows_with_kind[kind] = rows_with_kind.get(kind, 0) + 1
        summary["systems"][system] = {"rows": total, "flagged_rows": flagged_rows,
                                      "flagged_rate": round(flagged_rows / total, 4),
                                      "flags_by_kind": by_kind, "rows_by_kind": rows_with_kind, "flagged": flags}
    summary["timing_ms"] = {"calls": len(times), "median": round(statistics.median(times), 3),
                            "p95": round(statistics.quantiles(times, n=20)[-1], 3), "max": round(max(times), 3)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    kinds = faithfulness.KINDS
    print("| outputs | rows | rows flagged | " + " | ".join(kinds) + " |")
    print("|---|---|---|" + "---|" * len(kinds))
    for system, s in summary["systems"].items():
        cells = [f"{s['rows_by_kind'].get(k, 0)} ({100 * s['rows_by_kind'].get(k, 0) / s['rows']:.1f} %)"
                 for k in kinds]
        print(f"| {system} | {s['rows']} | {s['flagged_rows']} ({100 * s['flagged_rate']:.1f} %) | "
              + " | ".join(cells) + " |")
    print(f"\nwarm-up {warm_ms:.0f} ms; per call median {summary['timing_ms']['median']} ms, "
          f"P95 {summary['timing_ms']['p95']} ms, max {summary['timing_ms']['max']} ms over {len(times)} calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
