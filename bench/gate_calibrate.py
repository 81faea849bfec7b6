"""``python -m bench gate_calibrate``: the confidence gate's operating point
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
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def halves(ids: list[str]) -> tuple[frozenset[str], frozenset[str]]:
    """Laymaker IDs in the project's one cross-fitting split
    (:func:`inference.examples.crossfit_folds`, fixed seed)."""
    from inference.examples import crossfit_folds

    return crossfit_folds(ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench gate_calibrate", description=__doc__.splitlines()[0])
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
    from bench.quality import laymaker_rows
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
