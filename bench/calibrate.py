"""The gate's calibrations, per model and prompt version, on the
laymaker-dev sentences: two commands.

``python -m bench gate_calibrate``: the confidence gate's operating point
for one model, from its outputs on the laymaker-dev sentences.

Reads an output cache of ``python -m bench quality`` (JSON lines with
``key`` ``laymaker-<ID>``, ``output``, ``confidence``, ``model``,
``prompt_version``), checks each output against its input (safety and
faithfulness: :func:`clinical.quality.measure.output_quality`), and picks
the highest threshold whose re-run rate stays within ``--max-rerun-rate``
(:func:`clinical.quality.gate.threshold_calibrate`).

Honest figures: the sentences are split once by a fixed seed into halves A
and B; the threshold chosen on A is reported on B and the other way round
(cross-fitted), beside the threshold chosen on all rows, which is the one
shipped in ``clinical/quality/gate_calibration.json`` (with ``--write``).
A report goes to ``docs/quality/gate-calibration.md``.

``python -m bench self_check``: does the model itself, asked whether a
rewrite keeps the clinical sentence's meaning, rank wrong rewrites below
the rest, and would that make a better gate than the confidence?

The gate re-runs an output that fails a check or whose confidence (the
mean token probability, :mod:`inference.confidence`) is below the
calibrated threshold. The hand-judged tables find wrong texts the checks
miss (a term given a wrong meaning, a finding reversed) and the confidence
ranks them poorly. This benchmark asks the default model, through
the product's llama.cpp engine, the product's yes/no question per (input,
rewrite) pair (:func:`inference.self_check.self_check_run`: one greedy
answer token, ``P(yes)`` from its logprob).

Rows, both from the committed files (no translation is generated here):

* every (input, text, verdict) the hand-judged tables hold
  (``docs/quality/hand-judged.md``, :func:`hand_labels`), whichever prompt
  made the text;
* the cross-fitted fast texts of ``--prompt-version`` (``--outputs``),
  with the verdict their text was given, where the tables judged it.

Reported: the AUROC of wrong against correct or lossy
(:func:`clinical.quality.gate.auroc`) for the self-check and for the
confidence, per fold of the one cross-fitting split; and the gate on the fast texts as it is
(failed check or confidence below the calibrated threshold) beside a gate
that replaces the confidence with the self-check: failed check or
``P(yes)`` below the highest threshold whose re-run rate stays within
the current gate's (chosen from the rates alone, no verdict read). The
verdicts then say how many wrong fast texts each gate sends to the re-run.
The failed checks come from the stored re-run rows of the calibrated
threshold (``--rerun-rows``, ``docs/quality/rerun-fix-rows.jsonl``).
``--write-for VERSION...`` stores the chosen threshold for those prompt
versions in ``clinical/quality/gate_calibration.json``.

Writes ``<out>/self-check.json`` and ``.md``.

    .venv/bin/python -m bench self_check
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

from bench.quality import CROSSFIT_CLUSTER_VERSION, laymaker_rows
from bench.stats import report_write

ROOT = Path(__file__).resolve().parent.parent


# -- gate_calibrate: the confidence gate's threshold ------------------------------
def halves(ids: list[str]) -> tuple[frozenset[str], frozenset[str]]:
    """Laymaker IDs in the project's one cross-fitting split
    (:func:`inference.examples.crossfit_folds`, fixed seed)."""
    from inference.examples import crossfit_folds

    return crossfit_folds(ids)


def gate_calibrate_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench gate_calibrate",
                                     description="The confidence gate's threshold for one model and prompt.")
    parser.add_argument("--outputs", default="docs/quality/quality-report-outputs.jsonl",
                        help="an output cache of python -m bench quality")
    parser.add_argument("--max-rerun-rate", type=float, default=0.30)
    parser.add_argument("--write", action="store_true", help="ship the threshold in gate_calibration.json")
    parser.add_argument("--report", default="docs/quality/gate-calibration-{prompt}.md")
    parser.add_argument("--prompt-version", default="",
                        help="key the operating point under this prompt version instead of the rows' own (the "
                             "cross-fitted rows of a cluster prompt stand for the product's settings on the full pool)")
    parser.add_argument("--rows-prompt-version", default="",
                        help="read only the cached rows made with this prompt version (a cache may hold several)")
    parser.add_argument("--measure", choices=("mean", "content"), default="mean",
                        help="mean: geometric-mean token probability (the cached 'confidence'); content: "
                             "a low percentile of content-word probabilities, from the cached 'deltas' "
                             "(inference.confidence.content_word_confidence; rows without deltas are left out)")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")
    import django

    django.setup()
    from clinical.quality import gate
    from clinical.quality import measure as quality

    sources = {row["ID"]: row["ORIGINAL"] for row in laymaker_rows()[0]}
    cached = [json.loads(line) for line in Path(args.outputs).read_text(encoding="utf-8").splitlines() if line]
    outputs = {row["key"].removeprefix("laymaker-"): row for row in cached if row["key"].startswith("laymaker-")
               and (not args.rows_prompt_version or row["prompt_version"] == args.rows_prompt_version)}
    if args.measure == "content":
        from inference.confidence import content_word_confidence

        outputs = {i: dict(row, confidence=content_word_confidence(row["deltas"]))
                   for i, row in outputs.items() if row.get("deltas") is not None}
    ids = sorted(set(outputs) & set(sources), key=int)
    if not ids:
        raise SystemExit(f"no laymaker outputs in {args.outputs}")
    models = {outputs[i]["model"] for i in ids}
    prompts = {outputs[i]["prompt_version"] for i in ids}
    if len(models) != 1 or len(prompts) != 1:
        raise SystemExit(f"one model and one prompt version expected, found {models} / {prompts}")
    verdicts = {}
    for i in ids:
        measured = quality.output_quality(input_text=sources[i], output_text=outputs[i]["output"], language="en")
        verdicts[i] = (outputs[i]["confidence"], measured.safety.passed is False or
                       measured.faithfulness.passed is False)
    half_a, half_b = halves(list(sources))  # the one split of all 250, whichever rows are here
    rows = [verdicts[i] for i in ids]
    chosen = gate.threshold_calibrate(rows, max_rerun_rate=args.max_rerun_rate)
    crossfit = {}
    for name, fit, held in (("A→B", half_a, half_b), ("B→A", half_b, half_a)):
        fitted = gate.threshold_calibrate([verdicts[i] for i in ids if i in fit], max_rerun_rate=args.max_rerun_rate)
        crossfit[name] = gate.operating_point([verdicts[i] for i in ids if i in held], fitted.threshold).as_dict()
    design = gate.operating_point(rows, gate.DEFAULT_THRESHOLD)
    model, prompt = models.pop(), args.prompt_version or prompts.pop()
    entry = {**chosen.as_dict(), "prompt_version": prompt, "measure": args.measure,
             "max_rerun_rate": args.max_rerun_rate,
             "source": f"python -m bench gate_calibrate --outputs {args.outputs}"
                       + (f" --rows-prompt-version {args.rows_prompt_version}" if args.rows_prompt_version else "")
                       + f" (laymaker-dev, {len(ids)} rows)"}
    if args.write:
        path = gate.CALIBRATION_FILE
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"models": {}}
        previous = data["models"].setdefault(model, {}).get(prompt, {})
        if "self_check" in previous:  # written by python -m bench self_check --write-for; not this measure's
            entry["self_check"] = previous["self_check"]
        data["models"][model][prompt] = entry
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    Path(args.report.format(prompt=prompt)).write_text(_render(model, prompt, design, chosen, crossfit, args), encoding="utf-8")
    print(json.dumps({"model": model, "design_0.85": design.as_dict(), "chosen": chosen.as_dict(),
                      "crossfit": crossfit}, indent=2))
    return 0


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def _render(model, prompt, design, chosen, crossfit, args) -> str:
    lines = [
        "# Confidence gate: operating point", "",
        f"Model `{model}`, prompt `{prompt}`, confidence measure `{args.measure}`, outputs "
        f"`{args.outputs}` (laymaker-dev). "
        f"Written by `python -m bench gate_calibrate` (clinical/quality/gate.py). "
        f"A row *fails* when its safety or faithfulness check fails; failed checks are a re-run "
        f"reason of their own, so the gate catches every failing row; the column *by confidence* "
        f"says how many confidence alone would catch.", "",
        "| threshold | chosen on | scored on | outputs | failing | re-run rate | failing caught | "
        "by confidence | AUROC |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def row(point: dict, fit: str, held: str) -> str:
        auroc = "–" if point["auroc"] is None else f"{point['auroc']:.3f}"
        return (f"| {point['threshold']:.4f} | {fit} | {held} | {point['outputs']} | {point['failing']} | "
                f"{_pct(point['rerun_rate'])} | {_pct(point['failing_caught'])} | "
                f"{_pct(point['failing_caught_by_confidence'])} | {auroc} |")

    lines.append(row(design.as_dict(), "the design (0.85)", "all"))
    lines.append(row(chosen.as_dict(), "all rows (shipped)", "all"))
    for name, point in crossfit.items():
        fit, held = name.split("→")
        lines.append(row(point, f"half {fit}", f"half {held}"))
    lines += ["", f"Re-run rate cap: {_pct(args.max_rerun_rate)} (the band asked for is 5-30 %: above it "
              "the re-run lane takes the two cores from the clinicians). An AUROC near 0.5 means "
              "confidence does not rank failing outputs below passing ones on this model; the checks "
              "then carry the gate.", ""]
    return "\n".join(lines)


# -- self_check: the model's own check, ranked and calibrated ------------------
VERDICTS = ("correct", "lossy", "wrong")
#: Cells that name the re-run's candidate rather than hold a text.
_CANDIDATE_CELLS = {"sampled", "retrieved_examples", "span_replacement", "full_precision", "–", "-"}
_BOLD = re.compile(r"^\*\*(correct|lossy|wrong)\*\*")
_PLAIN = re.compile(r"^(correct|lossy|wrong)\b")
_FAST_AND_DELIVERED = re.compile(r"fast \*\*(\w+)\*\*.*?delivered \*\*(\w+)\*\*")
_ROW_ID = re.compile(r"(?:\d+ / )?(\d+)")


def hand_labels(markdown: str, ids: set[str]) -> dict[tuple[str, str], str]:
    """Every judged text of the hand-judged tables: ``{(laymaker ID, text):
    verdict}``, verdict one of :data:`VERDICTS`.

    A verdict cell (``**wrong**: reason``, or a bare ``wrong`` under a
    ``verdict`` header) judges the text cell before it, skipping a cell
    that names a re-run candidate; a ``fast verdict`` / ``delivered
    verdict`` header judges the ``fast text`` / ``delivered`` column; a
    cell ``fast **X**, delivered **Y**`` judges both columns. Rows whose
    first cell is not a laymaker ID in ``ids`` (``12 (A)`` or ``3 / 12 (A)``)
    are skipped, and so is a text judged differently in two places.
    """
    found: dict[tuple[str, str], set[str]] = {}
    header: list[str] | None = None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        match = _ROW_ID.match(cells[0])
        if not match or match.group(1) not in ids:
            continue
        row_id = match.group(1)

        def column(prefix: str) -> int | None:
            return next((j for j, name in enumerate(header) if name.startswith(prefix)), None)

        def add(index: int | None, verdict: str) -> None:
            if index is None or index >= len(cells):
                return
            text = cells[index].replace("\\|", "|")
            if len(text) < 3 or text in _CANDIDATE_CELLS or "**" in text or text.startswith(("...", "…")):
                return
            found.setdefault((row_id, text), set()).add(verdict)

        for i, cell in enumerate(cells):
            name = header[i] if i < len(header) else ""
            both = _FAST_AND_DELIVERED.search(cell)
            if both:
                add(column("fast text"), both.group(1))
                add(column("delivered"), both.group(2))
                continue
            verdict = _BOLD.match(cell) or (_PLAIN.match(cell) if "verdict" in name else None)
            if not verdict:
                continue
            if name in ("fast verdict", "delivered verdict"):
                add(column("fast text" if name == "fast verdict" else "delivered"), verdict.group(1))
                continue
            j = i - 1
            while j > 0 and (cells[j] in _CANDIDATE_CELLS or header[j].startswith(("kept", "re-run kept"))):
                j -= 1
            if j >= 1 and not _BOLD.match(cells[j]):
                add(j, verdict.group(1))
    return {key: verdicts.pop() for key, verdicts in found.items() if len(verdicts) == 1}


def _score(args, inputs: dict[str, str], labels: dict, fast: dict) -> tuple[list[dict], list[dict], float]:
    """Every judged text and every fast text with its ``p_yes``
    (:func:`inference.self_check.self_check_run` on the product's llama.cpp
    engine, one request at a time), and the mean time per pair (ms)."""
    import asyncio

    from inference import self_check
    from inference.llamacpp_engine import LlamaCppEngine
    from inference.weights import default_gguf_path

    judged = [{"id": i, "input": inputs[i], "text": t, "verdict": v} for (i, t), v in sorted(labels.items())]
    fast_pairs = [{"id": i, "input": inputs[i], "text": r["output"], "confidence": r["confidence"],
                   "fold": r["fold"], "verdict": labels.get((i, r["output"].strip()))} for i, r in sorted(fast.items())]

    async def run() -> float:
        engine = LlamaCppEngine(str(default_gguf_path()), n_ctx=2048, n_threads=args.threads, max_batch=1,
                                precision="q4_k_m")
        await engine.start()
        try:
            start = time.perf_counter()
            for n, pair in enumerate(judged + fast_pairs):
                p_yes = await self_check.self_check_run(engine, f"self-check-{n}", pair["input"], pair["text"],
                                                        background=False)
                pair["p_yes"] = round(p_yes, 4)
            return time.perf_counter() - start
        finally:
            await engine.shutdown()

    seconds = asyncio.run(run())
    return judged, fast_pairs, round(seconds * 1000 / (len(judged) + len(fast_pairs)), 1)


def analyse(judged: list[dict], fast_pairs: list[dict], *, failing: set[str], threshold: float,
            resamples: int = 2000, seed: int = 22) -> dict:
    """The figures of the report from scored pairs (``p_yes`` set; fast
    pairs also ``confidence``, ``fold``, ``verdict`` or ``None``).

    ``auroc``: self-check and confidence per fold; ``difference``: the
    self-check's AUROC minus the confidence's on the judged fast texts with
    a 95 % percentile interval over ``resamples`` row resamples (``seed``);
    ``within_row``: of the judged texts of one row, pairs of a wrong and a
    correct or lossy text, and how often the wrong one scores lower (would
    the self-check pick among the re-run's candidates);
    ``gates``: re-runs and wrong fast texts sent, for today's gate
    (``failing`` or confidence below ``threshold``), the self-check gate at
    the same re-run rate (:func:`clinical.quality.gate.threshold_calibrate` on the
    self-check's scores) and the failed
    checks alone.
    """
    import random

    from clinical.quality.gate import auroc, threshold_calibrate

    labelled = [p for p in fast_pairs if p["verdict"]]
    measures = {"self_check": lambda p: 1 - p["p_yes"], "confidence": lambda p: 1 - p["confidence"]}
    ranking = {}
    for name, badness in measures.items():
        ranking[name] = {scope: auroc([p["verdict"] == "wrong" for p in subset], [badness(p) for p in subset])
                         for scope, subset in (("both folds", labelled),
                                               *((f"fold {f}", [p for p in labelled if p["fold"] == f]) for f in "AB"))}
    ranking["self_check_all_judged_texts"] = auroc([p["verdict"] == "wrong" for p in judged],
                                                   [1 - p["p_yes"] for p in judged])
    rng = random.Random(seed)
    differences = []
    for _ in range(resamples):
        sample = [rng.choice(labelled) for _ in labelled]
        wrong = [p["verdict"] == "wrong" for p in sample]
        a, b = (auroc(wrong, [badness(p) for p in sample]) for badness in measures.values())
        if a is not None and b is not None:
            differences.append(a - b)
    differences.sort()
    interval = [round(differences[int(0.025 * len(differences))], 3),
                round(differences[int(0.975 * len(differences)) - 1], 3)]
    now = {p["id"] for p in fast_pairs if p["confidence"] < threshold} | failing
    scores = {p["id"]: p["p_yes"] for p in fast_pairs}
    t_self = threshold_calibrate([(s, i in failing) for i, s in scores.items()],
                                 max_rerun_rate=len(now) / len(fast_pairs)).threshold
    swapped = failing | {i for i, s in scores.items() if s < t_self}
    wrong = {p["id"] for p in labelled if p["verdict"] == "wrong"}
    gates = [
        {"gate": f"failed check or confidence < {threshold} (today)", "sent": sorted(now)},
        {"gate": f"failed check or self-check P(yes) < {t_self}", "sent": sorted(swapped)},
        {"gate": "failed check alone", "sent": sorted(failing)},
    ]
    for gate in gates:
        gate.update(rerun=len(gate["sent"]), wrong_sent=len(wrong & set(gate["sent"])))
    by_row: dict[str, list[dict]] = {}
    for pair in judged:
        by_row.setdefault(pair["id"], []).append(pair)
    pairs = [(w["p_yes"], o["p_yes"]) for texts in by_row.values() for w in texts if w["verdict"] == "wrong"
             for o in texts if o["verdict"] != "wrong"]
    within_row = {"pairs": len(pairs), "rows": sum(1 for texts in by_row.values()
                                                   if {"wrong"} < {t["verdict"] for t in texts}),
                  "wrong_below": sum(w < o for w, o in pairs), "ties": sum(w == o for w, o in pairs)}
    return {"threshold": threshold, "self_check_threshold": t_self, "within_row": within_row,
            "judged_texts": len(judged), "judged_by_verdict": {v: sum(p["verdict"] == v for p in judged) for v in VERDICTS},
            "fast_texts": len(fast_pairs), "fast_texts_judged": len(labelled), "fast_wrong": len(wrong),
            "auroc": ranking, "difference": {"self_check_minus_confidence": round(ranking["self_check"]["both folds"]
                                                                               - ranking["confidence"]["both folds"], 3),
                                             "interval_95": interval, "resamples": resamples, "seed": seed},
            "gates": gates}


def self_check_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench self_check",
                                     description="The model's own check ranked against the confidence, and its threshold.")
    parser.add_argument("--outputs", default="docs/quality/quality-report-examples-outputs.jsonl")
    parser.add_argument("--prompt-version", default=CROSSFIT_CLUSTER_VERSION)
    parser.add_argument("--rerun-rows", default="docs/quality/rerun-fix-rows.jsonl")
    parser.add_argument("--hand-judged", default="docs/quality/hand-judged.md")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="docs/quality")
    parser.add_argument("--reuse", action="store_true", help="the scores of the last run's JSON, no model")
    parser.add_argument("--write-for", nargs="+", default=[], metavar="PROMPT_VERSION",
                        help="ship the self-check threshold in gate_calibration.json for these prompt versions "
                             "(the cross-fitted rows of a cluster prompt stand for the product's, as in "
                             "bench gate_calibrate --prompt-version)")
    args = parser.parse_args(argv)
    from clinical.quality.gate import calibrated_threshold
    from inference.self_check import SELF_CHECK_PROMPT_VERSION, SELF_CHECK_QUESTION, SELF_CHECK_SYSTEM
    from inference.weights import DEFAULT_GGUF_NAME

    rows, _ = laymaker_rows()
    inputs = {row["ID"]: row["ORIGINAL"] for row in rows}
    labels = hand_labels((ROOT / args.hand_judged).read_text(encoding="utf-8"), set(inputs))
    fast = {}
    for line in (ROOT / args.outputs).read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["prompt_version"] == args.prompt_version:
            fast[record["key"].removeprefix("laymaker-")] = record
    threshold = calibrated_threshold(DEFAULT_GGUF_NAME, args.prompt_version)
    gated = [json.loads(line) for line in (ROOT / args.rerun_rows).read_text(encoding="utf-8").splitlines()]
    gated = [r for r in gated if r["threshold"] == threshold and r["variant"][-1] == "h"]
    failing = {r["id"] for r in gated if r["fast_failed"]}

    name = "self-check"
    if args.reuse:
        previous = json.loads((ROOT / args.out / f"{name}.json").read_text(encoding="utf-8"))
        judged, fast_pairs, ms_per_pair = previous["judged"], previous["fast"], previous["ms_per_pair"]
        command = previous["command"]
    else:
        judged, fast_pairs, ms_per_pair = _score(args, inputs, labels, fast)
        command = "python -m bench self_check " + " ".join(argv or [])
    report = analyse(judged, fast_pairs, failing=failing, threshold=threshold)
    report.update({"command": command.strip(), "system": SELF_CHECK_SYSTEM,
                   "self_check_prompt_version": SELF_CHECK_PROMPT_VERSION,
                   "question": SELF_CHECK_QUESTION,
                   "model": DEFAULT_GGUF_NAME, "prompt_version": args.prompt_version, "ms_per_pair": ms_per_pair,
                   "fast": fast_pairs, "judged": judged})
    path = report_write(ROOT / args.out, name, report, render(report))
    print(path)
    if args.write_for:
        calibration_write(report, prompt_versions=args.write_for, argv=argv or [])
    return 0


def calibration_write(report: dict, *, prompt_versions: list[str], argv: list[str]) -> dict:
    """Store the self-check threshold of ``report`` (:func:`analyse`'s,
    chosen from the re-run rate alone) under ``"self_check"`` in the entry of
    each of ``prompt_versions`` for the report's model in
    :data:`clinical.quality.gate.CALIBRATION_FILE`, which
    :func:`clinical.quality.gate.self_check_threshold` reads.

    Returns:
        The entry written: ``{"threshold", "prompt_version"`` (the self-check
        question's), ``"fast_prompt_version", "rerun_rate", "outputs",
        "source"}``.

    Raises:
        KeyError: a prompt version has no confidence calibration for the
            model (calibrate it first: ``python -m bench gate_calibrate``).
    """
    from clinical.quality import gate

    sent = next(g for g in report["gates"] if g["gate"].startswith("failed check or self-check"))
    entry = {"threshold": report["self_check_threshold"], "prompt_version": report["self_check_prompt_version"],
             "fast_prompt_version": report["prompt_version"], "outputs": report["fast_texts"],
             "rerun_rate": round(sent["rerun"] / report["fast_texts"], 4),
             "source": "python -m bench self_check " + " ".join(argv)
                       + f" (laymaker-dev, {report['fast_texts']} cross-fitted fast texts)"}
    path = gate.CALIBRATION_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    for version in prompt_versions:
        data["models"][report["model"]][version]["self_check"] = entry
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return entry


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def render(report: dict) -> str:
    """The Markdown report of :func:`main`'s ``report``."""
    r = report["auroc"]
    lines = [
        "# The model's self-check as the gate's measure",
        "",
        f"Command: `{report['command'].strip()}`. Model {report['model']} (the product's llama.cpp engine, greedy, "
        f"one answer token; self-check prompt `{report['self_check_prompt_version']}`). "
        f"Fast texts: prompt `{report['prompt_version']}`, cross-fitted, the gate's calibrated threshold "
        f"{report['threshold']}. {report['ms_per_pair']} ms per pair on this machine.",
        "",
        f"System: \"{report['system']}\"  ",
        "User: \"" + report["question"].replace("\n", " ") + "\"",
        "",
        "## How well each measure ranks wrong texts below correct and lossy ones (AUROC, 0.5 = chance)",
        "",
        "| texts | self-check | confidence |",
        "|---|---|---|",
    ]
    for scope in ("both folds", "fold A", "fold B"):
        lines.append(f"| the {report['fast_texts_judged']} judged fast texts of {report['fast_texts']}, {scope} | "
                     f"{_fmt(r['self_check'][scope])} | {_fmt(r['confidence'][scope])} |")
    by = report["judged_by_verdict"]
    d = report["difference"]
    lines += [f"| every judged text of the tables ({report['judged_texts']}: {by['correct']} correct, {by['lossy']} "
              f"lossy, {by['wrong']} wrong; any prompt) | {_fmt(r['self_check_all_judged_texts'])} | – |", "",
              f"Self-check minus confidence on the judged fast texts: {d['self_check_minus_confidence']:+.3f} "
              f"(95 % interval {d['interval_95'][0]:+.3f} to {d['interval_95'][1]:+.3f}, {d['resamples']} row "
              f"resamples, seed {d['seed']}).", "",
              f"Within a row (the choice the re-run makes among candidates): of {report['within_row']['pairs']} "
              f"pairs of a wrong and a correct or lossy text of the same input ({report['within_row']['rows']} rows), "
              f"the wrong one scores lower in {report['within_row']['wrong_below']} "
              f"({report['within_row']['ties']} ties).", "",
              f"## The gate on the {report['fast_texts']} fast texts ({report['fast_wrong']} judged wrong)", "",
              "| gate | re-run | wrong fast texts sent to the re-run |", "|---|---|---|"]
    for gate in report["gates"]:
        lines.append(f"| {gate['gate']} | {gate['rerun']} ({gate['rerun'] / report['fast_texts']:.1%}) | "
                     f"{gate['wrong_sent']} of {report['fast_wrong']} |")
    lines += [
        "",
        "## Limits",
        "",
        "- The verdicts are one reader's, not blind, from the tables in hand-judged.md (texts of several prompt "
        "versions; a text judged differently in two places is left out). The question's wording was the first "
        "one tried; a second (\"Is anything in the rewrite wrong, that is, does it state something the clinical "
        "sentence does not say, or give a medical term a wrong meaning?\") ranked the 390 judged texts at 0.605 "
        "(a scratch run, top-20 logprobs) and was dropped.",
        "- The self-check threshold is chosen from the re-run rate alone (the highest that re-runs no more than "
        "today's gate), so the wrong texts it sends are counted, not fitted; the rows are the same ones the "
        "confidence's threshold was calibrated on.",
        "- In the product (`SELF_CHECK`, on by default): this threshold is shipped in "
        "clinical/quality/gate_calibration.json (`--write-for`), the gate reads the self-check instead of the "
        "confidence where it ran, and the re-run checks each candidate and chooses by it (sending a wrong text "
        "to the re-run helps only if the re-run then keeps another one: on a CPU its first candidate repeats "
        "the fast text and passes the checks). What that re-run does with the texts it is sent: "
        "docs/decisions/self-check-gate.md.",
        f"- Cost: one more prompt and one token per translation ({report['ms_per_pair']} ms per pair here, the "
        "product's llama.cpp engine alone, 2 threads, its prefix snapshots keeping the system message).",
    ]
    lines += ["", "## Wrong fast texts and their scores", "", "| ID | fast text | confidence | P(yes) |", "|---|---|---|---|"]
    for p in sorted((p for p in report["fast"] if p["verdict"] == "wrong"), key=lambda p: p["p_yes"]):
        lines.append(f"| {p['id']} | {p['text'].replace('|', '/')} | {p['confidence']:.3f} | {p['p_yes']:.3f} |")
    return "\n".join(lines) + "\n"

