"""``python -m bench lay_terms``: how often the stored texts give a medical
term plain words that no vetted vocabulary gives for it (the safety
check's ``lay_term`` kind, :mod:`clinical.quality.vetted_terms`), and what
that costs and catches. No model run.

    .venv/bin/python -m bench lay_terms [--out docs/quality/lay-terms]

Sets: the clinicians' own rewrites of laymaker-dev (``REFERENCE``, faithful
by definition: a finding there is the vocabulary's gap or a liberty the
clinician took), the four published systems' outputs, this system's
cross-fitted fast texts and delivered texts (:func:`bench.stored_texts.delivered_texts`),
and the unseen Cochrane samples' fast and delivered texts. For each: the
texts with a finding, the texts the finding alone newly fails (they passed
every other safety item and the faithfulness check: the extra re-runs),
and the terms found most often. On the unseen samples, whose delivered
texts are hand-judged, the verdicts of the texts with a finding.

Writes ``<out>.json`` and ``<out>.md`` and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from bench.quality import laymaker_rows
from bench.stats import report_write
from bench.stored_texts import CLUSTER_VERSION, DEFAULT_OUTPUTS, delivered_texts, laymaker_outputs, wilson

SAMPLES = sorted(Path("docs/quality").glob("unseen-cochrane-sample*.jsonl"))


def stored_sets() -> dict[str, list[dict]]:
    """The stored texts by set (the module docstring), ``{set: [{"key",
    "input", "output", "verdict"?}]}``; ``verdict`` (correct, lossy,
    wrong) on the unseen samples' delivered texts."""
    rows, systems = laymaker_rows()
    inputs = {f"laymaker-{row['ID']}": row["ORIGINAL"] for row in rows}
    sets = {name: [{"key": f"laymaker-{row['ID']}", "input": row["ORIGINAL"], "output": row[name]}
                   for row in rows if row[name]] for name in ["REFERENCE", *systems]}
    fast = laymaker_outputs(Path(DEFAULT_OUTPUTS), CLUSTER_VERSION)
    sets["this system, fast"] = [{"key": f"laymaker-{i}", "input": inputs[f"laymaker-{i}"], "output": text}
                                 for i, text in sorted(fast.items(), key=lambda kv: int(kv[0]))]
    sets["this system, delivered"] = [{"key": key, "input": inputs[key], "output": text}
                                      for key, text in delivered_texts()["laymaker-dev"]]
    unseen = [json.loads(line) | {"sample": path.stem} for path in SAMPLES
              for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for kind in ("fast", "delivered"):
        sets[f"unseen Cochrane, {kind}"] = [
            {"key": f"{row['sample']}:{row['n']}", "input": row["input"], "output": row[kind],
             "verdict": row.get("verdict") if kind == "delivered" else None} for row in unseen]
    return sets


def lay_terms_main(argv: list[str] | None = None) -> int:
    from clinical.quality import faithfulness
    from clinical.quality.safety import safety_check

    parser = argparse.ArgumentParser(prog="python -m bench lay_terms", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/quality/lay-terms")
    args = parser.parse_args(argv)
    report: dict = {"sets": {}}
    for name, texts in stored_sets().items():
        found, newly, terms, verdicts = [], 0, Counter(), Counter()
        for row in texts:
            result = safety_check(input_text=row["input"], output_text=row["output"])
            lay = [item.text for item in result.missing if item.kind == "lay_term"]
            if not lay:
                continue
            others = [item for item in result.missing if item.kind != "lay_term"]
            alone = not others and faithfulness.faithfulness_check(row["input"], row["output"]).passed
            newly += alone
            terms.update(term.lower() for term in lay)
            if row.get("verdict"):
                verdicts[row["verdict"]] += 1
            found.append({"key": row["key"], "terms": lay, "only_finding": alone, "input": row["input"],
                          "output": row["output"], **({"verdict": row["verdict"]} if row.get("verdict") else {})})
        low, high = wilson(len(found), len(texts))
        entry = {"n": len(texts), "with_lay_term": len(found), "share": round(len(found) / len(texts), 4),
                 "wilson95": [round(low, 4), round(high, 4)], "newly_failing": newly,
                 "top_terms": terms.most_common(12), "texts": found}
        if any(row.get("verdict") for row in texts):
            entry["verdicts_with_lay_term"] = dict(verdicts)
            entry["verdicts_all"] = dict(Counter(row["verdict"] for row in texts if row.get("verdict")))
        report["sets"][name] = entry
    report["gate"] = _gate_effect()
    report["unexplained_on_the_page"] = _unexplained_on_the_page()
    out = Path(args.out)
    markdown = _markdown(report)
    report_write(out.parent, out.name, report, markdown)
    print(markdown)
    return 0


def _gate_effect(path: Path = Path("docs/quality/self-check.json")) -> dict:
    """The re-runs the finding adds at the shipped gate: the cross-fitted
    fast texts of laymaker-dev with their stored P(yes) (``bench
    self_check``'s ``fast`` rows), gated by a failed check or P(yes) under
    the self-check threshold, with and without the ``lay_term`` kind; the
    added texts with their hand verdicts where that very text was judged."""
    from clinical.quality import faithfulness
    from clinical.quality.safety import safety_check

    scores = json.loads(path.read_text(encoding="utf-8"))
    threshold = scores["self_check_threshold"]
    verdicts = {(row["id"], row["text"]): row["verdict"] for row in scores["judged"] if row.get("verdict")}
    before = after = 0
    added = []
    for row in scores["fast"]:
        result = safety_check(input_text=row["input"], output_text=row["text"])
        lay = [item.text for item in result.missing if item.kind == "lay_term"]
        others = [item for item in result.missing if item.kind != "lay_term"]
        gated = row["p_yes"] < threshold or bool(others) or not faithfulness.faithfulness_check(
            row["input"], row["text"]).passed
        before += gated
        after += gated or bool(lay)
        if lay and not gated:
            added.append({"id": row["id"], "terms": lay, "verdict": verdicts.get((row["id"], row["text"])),
                          "text": row["text"]})
    return {"texts": len(scores["fast"]), "self_check_threshold": threshold, "gated_before": before,
            "gated_after": after, "added": added,
            "added_verdicts": dict(Counter(a["verdict"] or "not judged" for a in added))}


def _unexplained_on_the_page(path: Path = Path("docs/quality/unexplained-terms.json")) -> dict:
    """Of the delivered texts that keep a term or abbreviation unexplained
    in their words (``bench unexplained_terms``' ``flagged`` texts), those
    that the page and the API still leave unexplained: a kept term is
    explained where it stands when the input's glossary (the vetted
    vocabularies, :func:`clinical.quality.glossary.glossary_terms`) defines
    it, so a text counts when one of its terms has no such entry or only
    the drug dictionary's "no vetted plain definition"."""
    from django.conf import settings

    from clinical.quality.glossary import DRUG, glossary_terms

    inputs = {row["key"]: row["input"] for name, texts in stored_sets().items()
              if name in ("this system, delivered", "unseen Cochrane, delivered") for row in texts}
    found = json.loads(path.read_text(encoding="utf-8"))["sets"]
    result = {}
    for name, entry in found.items():
        still = []
        for text in entry["flagged"]:
            defined = {g.term.lower() for g in glossary_terms(inputs[text["key"]],
                                                              max_terms=settings.GLOSSARY_MAX_TERMS)
                       if g.definition or g.source != DRUG}
            left = [t for t in text["terms"] if t.lower() not in defined]
            if left:
                still.append({"key": text["key"], "terms": left})
        low, high = wilson(len(still), entry["n"])
        result[name] = {"n": entry["n"], "unexplained_in_words": entry["with_unexplained"],
                        "unexplained_on_the_page": len(still), "share": round(len(still) / entry["n"], 4),
                        "wilson95": [round(low, 4), round(high, 4)], "texts": still}
    return result


def _share(entry: dict) -> str:
    """"7.6% (4.9%–11.6%)": a set's share and its Wilson 95 % interval."""
    low, high = entry["wilson95"]
    return f"{entry['share']:.1%} ({low:.1%}–{high:.1%})"


def _markdown(report: dict) -> str:
    lines = ["# Medical terms given words no vetted vocabulary gives for them", "",
             "The safety check's `lay_term` kind over the stored texts "
             "(`python -m bench lay_terms`; rule: `clinical/quality/vetted_terms.py`). "
             "*Newly failing*: texts that pass every other safety item and the faithfulness check, "
             "so the finding alone sends them to the re-run.", "",
             "| set | texts | with a finding | share (95 % interval) | newly failing | most frequent terms |",
             "|---|---|---|---|---|---|"]
    for name, entry in report["sets"].items():
        top = ", ".join(f"{term} ({n})" for term, n in entry["top_terms"][:6])
        lines.append(f"| {name} | {entry['n']} | {entry['with_lay_term']} | {_share(entry)} | "
                     f"{entry['newly_failing']} | {top} |")
    unseen = report["sets"].get("unseen Cochrane, delivered", {})
    if unseen.get("verdicts_all"):
        lines += ["", f"Hand verdicts of the unseen delivered texts: all {unseen['verdicts_all']}; "
                      f"with a finding {unseen.get('verdicts_with_lay_term', {})}."]
    gate = report["gate"]
    lines += ["", f"At the shipped gate (a failed check or the model's own check under "
                  f"{gate['self_check_threshold']}), laymaker-dev's {gate['texts']} cross-fitted fast texts: "
                  f"{gate['gated_before']} re-run without the `lay_term` kind, {gate['gated_after']} with it "
                  f"({gate['gated_before'] / gate['texts']:.1%} → {gate['gated_after'] / gate['texts']:.1%}); "
                  f"hand verdicts of the added texts: {gate['added_verdicts']}."]
    lines += ["", "## Kept terms left unexplained on the page", "",
              "`bench unexplained_terms` counts the delivered texts whose words leave a term or abbreviation "
              "unexplained. The page and the API explain a kept term where it stands when the diagnosis's "
              "glossary (HPO, the drug dictionary) defines it; these texts keep one it does not.", "",
              "| set | texts | unexplained in the words | unexplained on the page | share (95 % interval) |",
              "|---|---|---|---|---|"]
    for name, entry in report["unexplained_on_the_page"].items():
        lines.append(f"| {name} | {entry['n']} | {entry['unexplained_in_words']} | "
                     f"{entry['unexplained_on_the_page']} | {_share(entry)} |")
    ours = report["sets"]["this system, fast"]["texts"]
    lines += ["", "## This system's fast texts with a finding", "", "| row | terms | output |", "|---|---|---|"]
    lines += [f"| {t['key']} | {', '.join(t['terms'])} | {t['output'].replace('|', '/')} |" for t in ours]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(lay_terms_main())
