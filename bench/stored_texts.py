"""Reports over the stored texts (the committed output caches of ``bench
quality``, the corpora), no model run: two commands.

``python -m bench faithfulness_rates``: flag rates of the faithfulness check
(:mod:`clinical.quality.faithfulness`) on laymaker-dev: the clinicians' rewrites (REFERENCE, faithful by
definition: every flag there is a false positive or a liberty the
clinician took), the four published systems, and this system's committed
outputs (``--outputs``, default ``docs/quality/quality-report-examples-outputs.jsonl``,
keys ``laymaker-<ID>``, the rows of ``--prompt-version``, default the
cluster prompt users get); and the 411 Cochrane plain-language summaries
of cochrane-val against their abstracts (``COCHRANE-PLS``: written for lay
readers by the reviews' authors, mostly faithful, but they may state what
the abstract does not, such as a search date). Also times the check per
laymaker sentence after warm-up.

    .venv/bin/python -m bench faithfulness_rates [--out docs/quality/faithfulness-rates]
        [--outputs FILE] [--prompt-version VERSION]

writes ``<out>.json`` (rates by kind and every flag with its row) and
prints a Markdown summary.

``python -m bench hand_sample``: the hand-judged samples
(docs/quality/hand-judged.md). The first: 40 changed laymaker-dev sentences drawn by a fixed seed, 20 from each cross-fit half,
with today's output and the retrieval method's output side by side for a
person to mark correct / lossy / wrong.

    .venv/bin/python -m bench hand_sample > /tmp/sample.md
    .venv/bin/python -m bench hand_sample --held-out > /tmp/sample2.md
    .venv/bin/python -m bench hand_sample --third > /tmp/sample3.md
    .venv/bin/python -m bench hand_sample --sample 4 > /tmp/sample4.md
    .venv/bin/python -m bench hand_sample --rest > /tmp/rest.md
    .venv/bin/python -m bench hand_sample --unchanged > /tmp/unchanged.md

Reads the committed output caches (``docs/quality/quality-report-outputs.jsonl``
and ``...-examples-outputs.jsonl``); the judgements are written by hand.

``--held-out`` draws a second sample of 40 (seed :data:`HELD_OUT_SEED`, 20
changed rows per half, none of the first 40, whose rows several check rules
were written from) and prints each row's fast text (the cluster prompt's
cross-fitted output) and the text delivered after the re-run lane
(``docs/quality/rerun-fix-rows.jsonl``, the rows of the gate's calibrated
threshold, :func:`rerun_threshold`), as a Markdown table with empty verdict cells.
``--third`` draws a third 40 the same way (seed :data:`THIRD_SEED`, none of
the first two samples': rules were written from rows of the second too),
and ``--sample 4`` a fourth (:data:`FOURTH_SEED`, none of the first 120:
rules were written from rows of the third). ``--rest``: the changed rows
in none of the four (15: the four samples took 160 of the 175).
``--unchanged``: the rows the clinicians left as written (75), which the
product may still change, and so damage: judged for what a text adds or
changes, since the input was plain already.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from bench.quality import CROSSFIT_CLUSTER_VERSION, cochrane_pairs, laymaker_outputs, laymaker_rows
from inference.examples import crossfit_folds, normalise

# -- faithfulness_rates -------------------------------------------------------------
SYSTEMS = ("REFERENCE", "REDDIT-NGRAM", "REDDIT-GPT1", "GENERAL-GPT2", "NTS")
OURS = "this system"
COCHRANE = "COCHRANE-PLS"
DEFAULT_OUTPUTS = "docs/quality/quality-report-examples-outputs.jsonl"


def faithfulness_rates_main(argv: list[str] | None = None) -> int:
    from clinical.quality import faithfulness

    parser = argparse.ArgumentParser(prog="python -m bench faithfulness_rates",
                                     description="Flag rates of the faithfulness check over the stored texts.")
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


# -- hand_sample ------------------------------------------------------------------
SEED = 40
HELD_OUT_SEED = 2611
THIRD_SEED = 2612
FOURTH_SEED = 2613
#: The samples' seeds in the order drawn; each sample excludes the rows of those before it.
SEEDS = (SEED, HELD_OUT_SEED, THIRD_SEED, FOURTH_SEED)
PER_FOLD = 20
#: The cross-fitted rows of the product's prompt (headings copied).
CLUSTER_VERSION = CROSSFIT_CLUSTER_VERSION
#: The product's prompt version, whose calibrated threshold the stored re-runs were gated with.
PRODUCT_VERSION = "2026-11-25.2+c24x8k0h"
MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
RERUN_VARIANT = [12, 8, 0, "h"]


def rerun_threshold() -> float:
    """The gate's calibrated threshold for the product's prompt
    (``clinical/quality/gate_calibration.json``): the re-run records of
    ``docs/quality/rerun-fix-rows.jsonl`` that stand are those made at it.

    Raises:
        LookupError: the product's prompt has no calibration."""
    from clinical.quality.gate import calibrated_threshold

    threshold = calibrated_threshold(MODEL, PRODUCT_VERSION)
    if threshold is None:
        raise LookupError(f"no calibrated threshold for {MODEL} {PRODUCT_VERSION}")
    return threshold


def sample_ids(seed: int = SEED, per_fold: int = PER_FOLD, exclude: frozenset[str] = frozenset()
               ) -> list[tuple[str, str]]:
    """``[(fold, ID)]``: ``per_fold`` changed rows from each half, none in
    ``exclude``, drawn by ``random.Random(seed)`` from the sorted IDs, in ID
    order per fold."""
    rows, _ = laymaker_rows()
    half_a, _ = crossfit_folds(r["ID"] for r in rows)
    changed = sorted((r["ID"] for r in rows if normalise(r["ORIGINAL"]) != normalise(r["REFERENCE"])
                      and r["ID"] not in exclude), key=int)
    rng = random.Random(seed)
    picked = []
    for fold in ("A", "B"):
        ids = [i for i in changed if (i in half_a) == (fold == "A")]
        picked += [(fold, i) for i in sorted(rng.sample(ids, per_fold), key=int)]
    return picked


def _outputs(path: Path) -> dict[str, str]:
    rows = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            rows[row["key"]] = row["output"]
    return rows


def nth_sample_ids(n: int) -> list[tuple[str, str]]:
    """Sample ``n`` (1 to ``len(SEEDS)``): 40 changed rows drawn with
    ``SEEDS[n - 1]``, none of the samples before it.

    Raises:
        ValueError: no such sample."""
    if not 1 <= n <= len(SEEDS):
        raise ValueError(f"samples are numbered 1 to {len(SEEDS)}")
    seen: frozenset[str] = frozenset()
    for seed in SEEDS[:n]:
        ids = sample_ids(seed, exclude=seen)
        seen |= {i for _, i in ids}
    return ids


def _rows_by_fold(keep) -> list[tuple[str, str]]:
    """``[(fold, ID)]``: the laymaker rows for which ``keep(row)`` is true,
    fold A first, in ID order per fold."""
    rows, _ = laymaker_rows()
    half_a, _ = crossfit_folds(r["ID"] for r in rows)
    kept = [r["ID"] for r in rows if keep(r)]
    return ([("A", i) for i in sorted((i for i in kept if i in half_a), key=int)]
            + [("B", i) for i in sorted((i for i in kept if i not in half_a), key=int)])


def rest_ids() -> list[tuple[str, str]]:
    """``[(fold, ID)]``: every changed row in none of the samples of
    :data:`SEEDS` (the last few never read), fold A first, in ID order per
    fold."""
    seen = {row_id for n in range(1, len(SEEDS) + 1) for _, row_id in nth_sample_ids(n)}
    return _rows_by_fold(lambda r: normalise(r["ORIGINAL"]) != normalise(r["REFERENCE"]) and r["ID"] not in seen)


def unchanged_ids() -> list[tuple[str, str]]:
    """``[(fold, ID)]``: every row whose clinicians' rewrite is the input
    as written (:func:`inference.examples.normalise` equal), fold A first,
    in ID order per fold."""
    return _rows_by_fold(lambda r: normalise(r["ORIGINAL"]) == normalise(r["REFERENCE"]))


def held_out_ids() -> list[tuple[str, str]]:
    """The second sample: 40 changed rows, none of :func:`sample_ids`' 40."""
    return nth_sample_ids(2)


def third_ids() -> list[tuple[str, str]]:
    """The third sample: 40 changed rows, none of the first two samples' 80."""
    return nth_sample_ids(3)


def rerun_records(path: Path, *, variant: list, threshold: float | str) -> dict[str, dict]:
    """The stored re-run results in ``path`` (``docs/quality/rerun-fix-rows.jsonl``:
    one JSON line per re-run, with ``id``, ``variant``, ``threshold``,
    ``fast``, ``text``, ``kept``, ``passed``) for one cluster ``variant``
    gated at ``threshold``, by row ID (a later line wins); empty when there
    is no file."""
    found: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("variant") == variant and row.get("threshold") == threshold:
                found[row["id"]] = row
    return found


def _delivered(path: Path) -> dict[str, dict]:
    """Re-run records of the calibrated threshold, by row ID (the last one wins)."""
    return rerun_records(path, variant=RERUN_VARIANT, threshold=rerun_threshold())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def held_out_table(ids: list[tuple[str, str]]) -> str:
    """A held-out sample (``ids``, e.g. :func:`held_out_ids`) as a Markdown table: ID (fold), input, reference,
    fast text, re-run (candidate kept or "–"), delivered text, and an empty
    verdict cell."""
    fast = laymaker_outputs(Path("docs/quality/quality-report-examples-outputs.jsonl"), CLUSTER_VERSION)
    reruns = _delivered(Path("docs/quality/rerun-fix-rows.jsonl"))
    rows = {r["ID"]: r for r in laymaker_rows()[0]}
    lines = ["| ID (fold) | input | clinicians' reference | fast text | re-run kept | delivered | verdict |",
             "|---|---|---|---|---|---|---|"]
    for fold, row_id in ids:
        r, rerun = rows[row_id], reruns.get(row_id)
        delivered = rerun["text"] if rerun else fast[row_id]
        lines.append(f"| {row_id} ({fold}) | {_cell(r['ORIGINAL'])} | {_cell(r['REFERENCE'])} | {_cell(fast[row_id])} | "
                     f"{rerun['kept'] if rerun else '–'} | {_cell(delivered)} | |")
    return "\n".join(lines)


def hand_sample_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench hand_sample",
                                     description="Samples of laymaker-dev rows for hand-judging.")
    parser.add_argument("--held-out", action="store_true",
                        help="the second sample, with fast and delivered texts, as a table to judge")
    parser.add_argument("--third", action="store_true",
                        help="the third sample, none of the first two, as a table to judge")
    parser.add_argument("--sample", type=int, choices=range(2, len(SEEDS) + 1),
                        help="sample N (2 is --held-out, 3 is --third), none of the samples before it")
    parser.add_argument("--rest", action="store_true",
                        help="the changed rows in none of the samples, as a table to judge")
    parser.add_argument("--unchanged", action="store_true",
                        help="the rows the clinicians left as written, as a table to judge")
    args = parser.parse_args(argv)
    if args.rest or args.unchanged:
        print(held_out_table(rest_ids() if args.rest else unchanged_ids()))
        return 0
    number = args.sample or (3 if args.third else 2 if args.held_out else None)
    if number:
        print(held_out_table(nth_sample_ids(number)))
        return 0
    base = Path("docs/quality/quality-report")
    today = _outputs(Path(f"{base}-outputs.jsonl"))
    mine = _outputs(Path(f"{base}-examples-outputs.jsonl"))
    rows = {r["ID"]: r for r in laymaker_rows()[0]}
    for fold, row_id in sample_ids():
        r = rows[row_id]
        key = f"laymaker-{row_id}"
        print(f"### {row_id} (fold {fold})\n- input: {r['ORIGINAL']}\n- reference: {r['REFERENCE']}\n"
              f"- today: {today.get(key, '–')}\n- retrieval: {mine.get(key, '–')}\n")
    return 0
