"""``python -m bench term_rates``: how often the safety check's ``term`` kind
(:mod:`clinical.quality.terms`) fires on laymaker-dev, and on which outputs.

Sources, each over the project's one cross-fitting split
(:func:`inference.examples.crossfit_folds`, halves A and B):

* the clinicians' rewrites (``REFERENCE``, the 176 changed rows): plain
  by definition, so a missing term there is a false alarm or a liberty the
  clinician took;
* the published systems' columns;
* the product's cluster-prompt outputs (``--outputs``, rows of
  ``--prompt-version``) and the one-example prompt's
  (``quality-report-outputs.jsonl``);
* the hand-judged sample (``docs/quality/hand-judged.md``): how many of
  the outputs judged correct, lossy and wrong the check flags.

The report says how far the figures are held out (which rows were read
while the word parts were written). Writes ``<out>.json`` and
``<out>.md``; every flagged row is listed with its input and output.

    .venv/bin/python -m bench term_rates
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from bench.quality import CROSSFIT_CLUSTER_VERSION, laymaker_outputs, laymaker_rows
from bench.reports import report_write

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("REDDIT-NGRAM", "REDDIT-GPT1", "GENERAL-GPT2", "NTS")


def hand_verdicts(path: Path) -> dict[str, str]:
    """The cluster-prompt verdict (correct, lossy, wrong) of each row of the
    hand-judged table, by laymaker ID (its ninth column; the held-out
    sample's table, seven columns of delivered texts, is not this one)."""
    verdicts = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"\| \d+ \((?:A|B)\) \|", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 9:
                continue
            verdict = re.search(r"\*\*(\w+)\*\*", cells[8])
            if verdict:
                verdicts[cells[0].split()[0]] = verdict.group(1)
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench term_rates", description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", default="docs/quality/quality-report-examples-outputs.jsonl")
    parser.add_argument("--prompt-version", default=CROSSFIT_CLUSTER_VERSION)
    parser.add_argument("--out", default="docs/quality")
    args = parser.parse_args(argv)
    from clinical.quality.terms import input_terms, terms_missing
    from inference.examples import crossfit_folds

    rows, _ = laymaker_rows()
    by_id = {r["ID"]: r for r in rows}
    half_a, _ = crossfit_folds(by_id)
    changed = [i for i, r in by_id.items() if r["ORIGINAL"].strip() != r["REFERENCE"].strip()]
    sources = {"clinicians' rewrites (changed rows)": {i: by_id[i]["REFERENCE"] for i in changed}}
    sources.update({name: {i: r[name] for i, r in by_id.items()} for name in SYSTEMS})
    sources[f"cluster prompt ({args.prompt_version})"] = laymaker_outputs(ROOT / args.outputs, args.prompt_version)
    sources["one-example prompt (2026-11-22.3)"] = laymaker_outputs(
        ROOT / "docs/quality/quality-report-outputs.jsonl", "2026-11-22.3")
    counts = [len(input_terms(r["ORIGINAL"])) for r in rows]
    report: dict = {"rows_with_terms": sum(1 for n in counts if n), "terms": sum(counts), "sources": {}}
    for name, outputs in sources.items():
        flagged = []
        for row_id, output in sorted(outputs.items(), key=lambda item: int(item[0])):
            missing = terms_missing(input_text=by_id[row_id]["ORIGINAL"], output_text=output)
            if missing:
                flagged.append({"id": row_id, "half": "A" if row_id in half_a else "B",
                                "terms": [t.word for t in missing], "input": by_id[row_id]["ORIGINAL"],
                                "output": output})
        halves = {h: (sum(1 for f in flagged if f["half"] == h),
                      sum(1 for i in outputs if ("A" if i in half_a else "B") == h)) for h in "AB"}
        report["sources"][name] = {"rows": len(outputs), "flagged": len(flagged), "halves": halves,
                                   "flagged_rows": flagged}
    cluster = sources[f"cluster prompt ({args.prompt_version})"]
    verdicts = hand_verdicts(ROOT / "docs/quality/hand-judged.md")
    sample: dict[str, list[int]] = {}
    for row_id, verdict in verdicts.items():
        hit = bool(terms_missing(input_text=by_id[row_id]["ORIGINAL"], output_text=cluster[row_id]))
        sample.setdefault(verdict, [0, 0])[0 if hit else 1] += 1
    report["hand_judged"] = sample
    path = report_write(ROOT / args.out, "term-rates", report, render(report))
    print(path.read_text(encoding="utf-8"))
    return 0


def render(report: dict) -> str:
    lines = ["# The safety check's `term` kind on laymaker-dev", "",
             "Written by `python -m bench term_rates` (bench/term_rates.py). A row is flagged when the output "
             "neither keeps nor explains a medical term of the input (clinical/quality/terms.py, "
             "docs/safety-check.md). "
             f"{report['rows_with_terms']} of 250 inputs have a term ({report['terms']} terms in all).", "",
             "How far these figures are held out: the first version of the word parts was written before any "
             "row was read, and flagged 7 of 176 rewrites, 12 of 250 cluster outputs, and 2 of the 4 wrong and "
             "1 of the 22 correct outputs of the sample. The changes after it were made while reading half A's "
             "flags (one-word HPO terms only, \"keyhole\", \"neoplas-\"), except one rule that came from "
             "reading half B's row 13 (a plain word counts only where the output has it more often than the "
             "input), so half B is not fully held out either. The privative rule (a term of the prefix a-/an- "
             "needs a word of loss beside its part) came from half B's row 44 (\"stable speech\" for "
             "\"stable expressive aphasia\", judged wrong by hand and not flagged before it), with its words "
             "from the prefix table; \"disorder\" and \"disturb\" joined them after reading half A's row 32 "
             "(two published systems' \"sleep-disordered breathing\" for \"sleep apnea\"). Before it: 6 of "
             "176 rewrites, 12 of 250 cluster outputs, 18 of 250 one-example outputs flagged. The stopping "
             "rule (a term of the suffix -stasis/-static needs a word of stopping or absence too) came from "
             "half A's row 39 of the second, held-out hand-judged sample (\"it seemed to be bleeding\" for "
             "\"hemostatic\", judged wrong and not flagged before it); it adds that row and the three "
             "published systems' \"Blood clot was assured\" for \"Hemostasis was assured\" (row 103), and no "
             "clinician's rewrite. Before it: 8, 10, 10 and 6 of the published systems' 250, 13 of 250 "
             "cluster outputs.", "",
             "| source | rows | flagged | half A | half B |", "|---|---|---|---|---|"]
    for name, data in report["sources"].items():
        a, b = data["halves"]["A"], data["halves"]["B"]
        lines.append(f"| {name} | {data['rows']} | {data['flagged']} ({100 * data['flagged'] / data['rows']:.1f} %) "
                     f"| {a[0]}/{a[1]} | {b[0]}/{b[1]} |")
    lines += ["", "Hand-judged sample (docs/quality/hand-judged.md, the cluster prompt's fast outputs):", "",
              "| verdict | flagged | not flagged |", "|---|---|---|"]
    for verdict in ("correct", "lossy", "wrong"):
        hit, miss = report["hand_judged"].get(verdict, [0, 0])
        lines.append(f"| {verdict} | {hit} | {miss} |")
    for name, data in report["sources"].items():
        if not data["flagged_rows"] or name in SYSTEMS:
            continue
        lines += ["", f"## Flagged: {name}", "", "| ID (half) | missing | input | output |", "|---|---|---|---|"]
        for row in data["flagged_rows"]:
            cells = [row["input"], row["output"]]
            cells = [c.replace("|", "/").replace("\n", " ") for c in cells]
            lines.append(f"| {row['id']} ({row['half']}) | {', '.join(row['terms'])} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
