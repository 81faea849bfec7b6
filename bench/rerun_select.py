"""``python -m bench rerun_select``: which rule should pick the re-run's
text, chosen on one cross-fit half and confirmed on the other.

``bench rerun_fix`` runs the product's re-run as it is (early stop, then
:func:`clinical.rerun.candidates.candidate_select`). This benchmark
generates *every* candidate of ``RERUN_CANDIDATES`` for each output the
gate sends (each on its own, no early stop; cached per candidate in
``<out>-candidates.jsonl`` with its text and token logprobs, reused with
``--resume``) and replays selection rules over the same candidates:

* ``current``: the product's rule before the incumbent (early stop, then
  ``candidate_select``);
* ``incumbent+D``: :class:`clinical.rerun.candidates.Incumbent` with margin
  ``D``: a fast text that passed both checks stays unless ``full_precision``
  or a candidate that passes both checks, was written by the model (tier 2)
  and is at least ``D`` more confident replaces it; a fast text that failed
  a check is handled as by ``current``. ``D`` over ``--margins``;
  ``incumbent+inf`` lets only ``full_precision`` replace a passing fast
  text (here, through llama.cpp, that is the fast text again).

For each rule: SARI (all, changed only) over the gated rows as delivered,
how many passing fast texts it replaced, and the engine time its early
stop leaves (the sum of the candidates' generation ms up to where the rule
stops; on a 2-core site the re-run lane shares the cores with the ward).
The margin is chosen on one fold alone (best SARI over its gated rows,
ties to the larger margin: fewer replacements) and read on the other, both
ways. Writes ``<out>.json`` and ``<out>.md``.

With ``--self-check [REPORT]`` the gate is the product's self-check gate
(as ``bench rerun_fix --self-check``), each candidate carries the model's
own check of its text (run by the product's re-run code on the same
engine, cached with it), and the rules are:

* ``before``: the product's rule until 2026-11-27 (early stop at a
  model-written text checked at the threshold, ``candidate_select`` by
  P(yes), the fast text as :func:`clinical.rerun.candidates.incumbent_for`
  makes it);
* ``trusted-copy``: the product's rule on 2026-11-27: as ``before``, but where what
  it delivers is under the threshold (doubted), a candidate that is the
  input unchanged, passes both checks and is checked at or above the
  threshold is delivered instead (``candidate_select``'s
  ``self_check_threshold``);
* ``trusted-first``: as ``before``, but a doubted text gives way to the
  input with terms replaced (tier 1) checked at or above the threshold;
* ``trusted-first+copy``: the same, tier 0 (the input unchanged, or a
  question) allowed too;
* ``as-written``: the product's rule since 2026-11-28
  (``SELF_CHECK_COPY=always``): as ``trusted-copy``, then a text still
  under the threshold gives way to the diagnosis as written
  (:func:`clinical.rerun.candidates.candidate_as_written`).

Each rule's delivered texts are also counted by their hand-judged verdict
(docs/quality/hand-judged.md); texts nobody judged are listed.

    .venv/bin/python -m bench rerun_select --threads 2 --resume
    .venv/bin/python -m bench rerun_select --headings --prompt-version 2026-11-25.2+c24x8k0h --self-check \
        --threads 2 --resume
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from bench.rerun_fix import gate_arguments

#: Margins tried (confidence, geometric-mean token probability, 0-1).
DEFAULT_MARGINS = "0,0.02,0.05,0.1,0.2,inf"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench rerun_select", description=__doc__.splitlines()[0])
    gate_arguments(parser, prompt_version="2026-11-25.2+c24x8k0")
    parser.add_argument("--margins", default=DEFAULT_MARGINS)
    parser.add_argument("--self-check", nargs="?", const="docs/quality/self-check.json", default=None,
                        metavar="REPORT", help="the product's self-check gate and rules (see above)")
    parser.add_argument("--hand-judged", default="docs/quality/hand-judged.md")
    parser.add_argument("--out", default=None, help="default docs/quality/rerun-select, +-self-check with --self-check")
    args = parser.parse_args(argv)
    args.out = args.out or ("docs/quality/rerun-select" + ("-self-check" if args.self_check else ""))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")
    import django

    django.setup()
    from bench.quality import _same, score
    from bench.rerun_fix import gated_rows
    from clinical.rerun import candidates as rerun_candidates
    from clinical.rerun.engine import run_in_engine_loop
    from clinical.rerun.execute import rerun_candidates_run
    from inference.examples import normalise

    gate = gated_rows(outputs=Path(args.outputs), clusters=args.clusters, per_cluster=args.per_cluster, k=args.k,
                      prompt_version=args.prompt_version, headings=args.headings,
                      self_check_report=Path(args.self_check) if args.self_check else None)
    rows = gate.gated[:args.limit] if args.limit else gate.gated
    names = rerun_candidates.candidate_names()
    cache = Path(f"{args.out}-candidates.jsonl")
    done = cached_candidates(cache) if args.resume else {}
    todo = [(row_id, name) for row_id in rows for name in names if (row_id, name) not in done]

    if todo:
        from inference.factory import EngineConfig, create_engine

        engine = create_engine(EngineConfig(engine="llamacpp", threads=args.threads))
        run_in_engine_loop(engine.start())
        cache.parent.mkdir(parents=True, exist_ok=True)
        with open(cache, "a", encoding="utf-8") as out:
            for n, (row_id, name) in enumerate(todo, start=1):
                started = time.perf_counter()
                chosen, records = rerun_candidates_run(
                    translation=gate_translation(gate, row_id), engine=engine, request_prefix=f"sel-{row_id}",
                    names=(name,), messages=gate.fast_messages(row_id), pool=gate.pool_for(row_id),
                    time_limit_s=600)
                record = {"id": row_id, "name": name, "skipped": records[0].get("skipped", "")
                          if records and records[0]["name"] == name else "",
                          "generated": chosen.name, "text": chosen.text, "logprobs": list(chosen.logprobs),
                          "ms": chosen.ms, "prompt_version": chosen.prompt_version,
                          "replaced": [list(pair) for pair in chosen.replaced], "self_check": chosen.self_check}
                done[(row_id, name)] = record
                out.write(json.dumps(record) + "\n")
                out.flush()
                print(f"[{n}/{len(todo)}] {row_id} {name} {time.perf_counter() - started:.1f} s", flush=True)
        run_in_engine_loop(engine.shutdown())

    if gate.self_checks is not None:
        report = self_check_rules(gate, rows, {row_id: candidates_measured(gate, done, row_id) for row_id in rows},
                                  hand_judged=Path(args.hand_judged),
                                  command=" ".join(sys.argv[1:] if argv is None else argv))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.out}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        Path(f"{args.out}.md").write_text(render_self_check(report), encoding="utf-8")
        print(render_self_check(report))
        return 0

    margins = [math.inf if m.strip() == "inf" else float(m) for m in args.margins.split(",")]
    rules = [("current", None)] + [(f"incumbent+{m:g}", m) for m in margins]
    per_row = {row_id: candidates_measured(gate, done, row_id) for row_id in rows}
    results = {}
    for fold in ("A", "B"):
        ids = [i for i in rows if gate.fold(i) == fold and per_row[i]]
        sources = [gate.by_id[i]["ORIGINAL"] for i in ids]
        references = [gate.by_id[i]["REFERENCE"] for i in ids]
        changed = [not _same(gate.by_id[i]["ORIGINAL"], gate.by_id[i]["REFERENCE"]) for i in ids]
        fold_result = {"rows": len(ids), "fast_failed": sum(gate.failed(i) for i in ids), "rules": {}}
        fast_score = score("fast text", sources, [gate.fast[i]["output"] for i in ids], references, changed=changed)
        fold_result["fast"] = {"sari": fast_score["sari"], "sari_changed": fast_score.get("sari_changed")}
        for label, margin in rules:
            texts, replaced, engine_ms, kept = [], 0, 0.0, {}
            for i in ids:
                text, name, ms = replay(per_row[i], fast_text=gate.fast[i]["output"],
                                        fast_confidence=gate.fast[i]["confidence"], fast_failed=gate.failed(i),
                                        margin=margin, model_name=gate.model, reading_level=6)
                texts.append(text)
                engine_ms += ms
                kept[name] = kept.get(name, 0) + 1
                replaced += (not gate.failed(i)) and normalise(text) != normalise(gate.fast[i]["output"])
            s = score(label, sources, texts, references, changed=changed)
            fold_result["rules"][label] = {
                "sari": s["sari"], "sari_changed": s.get("sari_changed"), "safety_pass_pct": s["safety_pass_pct"],
                "faithfulness_pass_pct": s["faithfulness_pass_pct"], "passing_fast_replaced": replaced,
                "engine_s": round(engine_ms / 1000, 1), "kept": kept}
        results[fold] = fold_result
    incumbent = [label for label, margin in rules if margin is not None]

    def chosen_on(fold: str) -> str:
        return max(incumbent, key=lambda label: (results[fold]["rules"][label]["sari"], incumbent.index(label)))

    report = {"command": "python -m bench rerun_select " + " ".join(sys.argv[1:] if argv is None else argv),
              "model": gate.model, "prompt_version": gate.version, "threshold": gate.threshold,
              "candidates": list(names), "gated": len(rows), "folds": results,
              "chosen": {"A": chosen_on("A"), "B": chosen_on("B")}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    Path(f"{args.out}.md").write_text(render(report), encoding="utf-8")
    print(render(report))
    return 0


def gate_translation(gate, row_id: str):
    """The unsaved :class:`clinical.models.Translation` a gated row's
    candidates are generated and measured for. No ``rerun_reason``: one
    candidate at a time is generated here, and the incumbent is replayed."""
    from clinical.models import Translation

    return Translation(input_text=gate.by_id[row_id]["ORIGINAL"], language="en", reading_level=6,
                       prompt_version=gate.version, model_name=gate.model, output_text=gate.fast[row_id]["output"],
                       confidence=gate.fast[row_id]["confidence"], self_check_threshold=gate.self_check_threshold)


def cached_candidates(cache: Path) -> dict[tuple[str, str], dict]:
    """The generated candidates of ``<out>-candidates.jsonl``, ``{(ID,
    candidate name): record}`` (empty when the file is missing)."""
    done: dict[tuple[str, str], dict] = {}
    if cache.exists():
        for line in cache.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            done[(record["id"], record["name"])] = record
    return done


def candidates_measured(gate, done: dict[tuple[str, str], dict], row_id: str) -> list:
    """A gated row's cached candidates in ``RERUN_CANDIDATES`` order,
    measured as the product measures them (skipped ones left out, as the
    product does)."""
    from clinical.rerun import candidates as rerun_candidates

    translation = gate_translation(gate, row_id)
    found = []
    for name in rerun_candidates.candidate_names():
        record = done.get((row_id, name))
        if record is None or record["skipped"] or record["generated"] != name:
            continue
        found.append(rerun_candidates.candidate_measure(
            translation=translation, name=name, text=record["text"], logprobs=record["logprobs"],
            ms=record["ms"], prompt_version=record["prompt_version"],
            replaced=[tuple(pair) for pair in record["replaced"]], self_check=record.get("self_check")))
    return found


def replay(measured: list, *, fast_text: str, fast_confidence: float | None, fast_failed: bool,
           margin: float | None, model_name: str, reading_level: int) -> tuple[str, str, float]:
    """What one rule delivers for one gated output: ``(text, name of what
    was kept or "fast", engine ms spent)``. ``margin`` ``None`` is the rule
    before the incumbent (early stop on ``candidate_good_enough``, then
    ``candidate_select``); a number is the incumbent rule with that margin,
    through the product's own functions (``incumbent`` arguments)."""
    from clinical.rerun.candidates import Incumbent, candidate_good_enough, candidate_select

    incumbent = None if (margin is None or fast_failed) else Incumbent(confidence=fast_confidence, margin=margin)
    tried, spent = [], 0.0
    for candidate in measured:
        tried.append(candidate)
        spent += candidate.ms
        if candidate_good_enough(candidate, model_name=model_name, incumbent=incumbent):
            break
    chosen = candidate_select(tried, reading_level=reading_level, incumbent=incumbent)
    if chosen is None:
        return fast_text, "fast", spent
    return chosen.text, chosen.name, spent


#: The self-check mode's rules (see the module docstring): whether the
#: product's fallback to a trusted copy applies, the tiers a trusted
#: candidate may have to replace a doubted delivered text besides, and
#: whether a text still doubted then gives way to the diagnosis as written.
SELF_CHECK_RULES = {"before": (False, (), False), "trusted-copy": (True, (), False),
                    "trusted-first": (False, (1,), False), "trusted-first+copy": (False, (1, 0), False),
                    "as-written": (True, (), True)}


def replay_checked(measured: list, *, fast_text: str, fast_confidence: float | None,
                   fast_self_check: float | None, reasons: list[str], threshold: float, model_name: str,
                   copy_fallback: bool = False, trusted_tiers: tuple[int, ...] = (), as_written: bool = False,
                   reading_level: int = 6) -> tuple[str, str, float | None]:
    """What one self-check rule delivers for one gated output: ``(text,
    name of what was kept or "fast", its P(yes))``. The product's early
    stop and choice (``incumbent`` as :func:`clinical.rerun.candidates.incumbent_for`
    makes it from ``reasons``, margin 0), with ``copy_fallback`` its
    fallback to a trusted copy of the input (``self_check_threshold``);
    then, with ``trusted_tiers``, a delivered text under ``threshold``
    gives way to the candidate of
    those tiers (:func:`clinical.rerun.candidates.candidate_tier`) that
    passes both checks with the highest P(yes) at or above it; with
    ``as_written``, the product's rule now (``SELF_CHECK_COPY=always``), a
    text still under ``threshold`` after the trusted copy gives way to the
    diagnosis as written (:func:`clinical.rerun.candidates.candidate_as_written`)."""
    from clinical.models import Translation
    from clinical.rerun.candidates import (
        candidate_as_written,
        candidate_good_enough,
        candidate_select,
        candidate_tier,
        incumbent_for,
    )

    fast = Translation(input_text=measured[0].input_text if measured else "", output_text=fast_text,
                       confidence=fast_confidence, self_check=fast_self_check, rerun_reason=",".join(reasons))
    incumbent = incumbent_for(fast, margin=0.0)
    tried = []
    for candidate in measured:
        tried.append(candidate)
        if candidate_good_enough(candidate, model_name=model_name, incumbent=incumbent,
                                 self_check_threshold=threshold):
            break
    chosen = candidate_select(tried, reading_level=reading_level, incumbent=incumbent,
                              self_check_threshold=threshold if copy_fallback else None)
    copy = candidate_as_written(translation=fast, chosen=chosen, self_check_threshold=threshold) if as_written else None
    if copy is not None:
        return copy.text, copy.name, copy.self_check
    text, name, p_yes = ((fast_text, "fast", fast_self_check) if chosen is None
                         else (chosen.text, chosen.name, chosen.self_check))
    if trusted_tiers and (p_yes is None or p_yes < threshold):
        trusted = [c for c in tried if c.passed and c.self_check is not None and c.self_check >= threshold
                   and candidate_tier(c) in trusted_tiers]
        if trusted:
            best = max(trusted, key=lambda c: (candidate_tier(c), round(c.self_check, 2)))
            return best.text, best.name, best.self_check
    return text, name, p_yes


def self_check_replay(gate, rows: list[str], per_row: dict[str, list]) -> dict[str, dict[str, tuple]]:
    """What each rule of :data:`SELF_CHECK_RULES` delivers for each gated
    row that has candidates: ``{rule: {ID: (text, name of what was kept or
    "fast", its P(yes))}}`` (:func:`replay_checked`), fold A's rows first."""
    replayed: dict[str, dict[str, tuple]] = {}
    for rule, (fallback, tiers, as_written) in SELF_CHECK_RULES.items():
        replayed[rule] = {
            i: replay_checked(per_row[i], fast_text=gate.fast[i]["output"], fast_confidence=gate.fast[i]["confidence"],
                              fast_self_check=gate.self_checks.get(i), reasons=gate.reasons[i],
                              threshold=gate.self_check_threshold, model_name=gate.model, copy_fallback=fallback,
                              trusted_tiers=tiers, as_written=as_written)
            for fold in ("A", "B") for i in rows if gate.fold(i) == fold and per_row[i]}
    return replayed


def self_check_rules(gate, rows: list[str], per_row: dict[str, list], *, hand_judged: Path, command: str) -> dict:
    """Replay :data:`SELF_CHECK_RULES` over the gated rows' candidates,
    per cross-fit fold: SARI over the gated rows as delivered, the
    hand-judged verdicts of the delivered texts, how many are still
    doubted, and which rows each rule changes against ``before``."""
    from bench.quality import _same, score
    from bench.self_check import hand_labels

    labels = hand_labels(hand_judged.read_text(encoding="utf-8"), set(gate.by_id))
    results: dict[str, dict] = {}
    replayed = self_check_replay(gate, rows, per_row)
    delivered: dict[str, dict[str, str]] = {rule: {i: found[0] for i, found in by_row.items()}
                                            for rule, by_row in replayed.items()}
    for fold in ("A", "B"):
        ids = [i for i in rows if gate.fold(i) == fold and per_row[i]]
        sources = [gate.by_id[i]["ORIGINAL"] for i in ids]
        references = [gate.by_id[i]["REFERENCE"] for i in ids]
        changed = [not _same(gate.by_id[i]["ORIGINAL"], gate.by_id[i]["REFERENCE"]) for i in ids]
        fold_result = {"rows": len(ids), "rules": {}}
        for rule in SELF_CHECK_RULES:
            texts, kept, verdicts, doubted = [], {}, {}, 0
            for i in ids:
                text, name, p_yes = replayed[rule][i]
                texts.append(text)
                kept[name] = kept.get(name, 0) + 1
                verdict = labels.get((i, text.strip()), "unjudged")
                verdicts[verdict] = verdicts.get(verdict, 0) + 1
                doubted += p_yes is not None and p_yes < gate.self_check_threshold
            s = score(rule, sources, texts, references, changed=changed)
            fold_result["rules"][rule] = {"sari": s["sari"], "sari_changed": s.get("sari_changed"),
                                          "safety_pass_pct": s["safety_pass_pct"],
                                          "faithfulness_pass_pct": s["faithfulness_pass_pct"], "kept": kept,
                                          "verdicts": verdicts, "doubted": doubted}
        results[fold] = fold_result
    # Every row as delivered: the rule's text where the gate sent the row, else the fast text.
    everything = [r for r in gate.data if r["ID"] in gate.fast]
    all_rows = {}
    for rule in SELF_CHECK_RULES:
        texts = [delivered[rule].get(r["ID"], gate.fast[r["ID"]]["output"]) for r in everything]
        s = score(rule, [r["ORIGINAL"] for r in everything], texts, [r["REFERENCE"] for r in everything],
                  changed=[not _same(r["ORIGINAL"], r["REFERENCE"]) for r in everything])
        verdicts: dict[str, int] = {}
        for r, text in zip(everything, texts):
            verdict = labels.get((r["ID"], text.strip()), "unjudged")
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
        all_rows[rule] = {"rows": len(texts), "sari": s["sari"], "sari_changed": s.get("sari_changed"),
                          "fkgl": s["fkgl"], "safety_pass_pct": s["safety_pass_pct"],
                          "faithfulness_pass_pct": s["faithfulness_pass_pct"], "verdicts": verdicts}
    differs = {rule: [{"id": i, "before": delivered["before"][i], "text": text,
                       "verdict_before": labels.get((i, delivered["before"][i].strip()), "unjudged"),
                       "verdict": labels.get((i, text.strip()), "unjudged")}
                      for i, text in delivered[rule].items() if text != delivered["before"][i]]
               for rule in SELF_CHECK_RULES if rule != "before"}
    return {"command": "python -m bench rerun_select " + command, "model": gate.model,
            "prompt_version": gate.version, "threshold": gate.threshold, "gated": len(rows), "folds": results,
            "all_rows": all_rows, "differs": differs}


def _verdict_cells(verdicts: dict[str, int]) -> str:
    """``correct | lossy | wrong | not judged`` counts of a verdict tally."""
    return " | ".join(str(verdicts.get(v, 0)) for v in ("correct", "lossy", "wrong", "unjudged"))


def render_self_check(report: dict) -> str:
    """The Markdown report of the self-check mode."""
    lines = [
        "# A doubted text or a trusted copy: the re-run's choice replayed (laymaker-dev, cross-fitted)", "",
        f"Command: `{report['command'].strip()}`. Model `{report['model']}` through llama.cpp. Gate: "
        f"{report['threshold']} (calibrated for `{report['prompt_version']}`) or a failed check: "
        f"{report['gated']} gated outputs; every candidate generated once and checked by the model "
        "(P(yes)), each rule replayed over the same candidates (see `bench/rerun_select.py`). Verdicts: "
        "docs/quality/hand-judged.md; `doubted`: delivered texts still under the threshold.", "",
    ]
    lines += ["## Every row as delivered (the rule's text where the gate sent the row, else the fast text)", "",
              "| rule | rows | SARI | SARI (changed) | FKGL | safety pass | faithfulness pass | correct | lossy | "
              "wrong | not judged |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for rule, r in report["all_rows"].items():
        lines.append(f"| {rule} | {r['rows']} | {r['sari']:.1f} | {r['sari_changed']} | {r['fkgl']:.1f} | "
                     f"{r['safety_pass_pct']:.1f} % | {r['faithfulness_pass_pct']:.1f} % | "
                     f"{_verdict_cells(r['verdicts'])} |")
    lines.append("")
    for fold, result in report["folds"].items():
        lines += [f"## Fold {fold}: {result['rows']} gated rows", "",
                  "| rule | SARI | SARI (changed) | correct | lossy | wrong | not judged | doubted | kept |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for rule, r in result["rules"].items():
            lines.append(f"| {rule} | {r['sari']:.1f} | {r['sari_changed']} | {_verdict_cells(r['verdicts'])} | "
                         f"{r['doubted']} | {r['kept']} |")
        lines.append("")
    for rule, rows in report["differs"].items():
        lines += [f"## Rows where `{rule}` delivers another text than `before`", "",
                  "| ID | before | verdict | this rule | verdict |", "|---|---|---|---|---|"]
        lines += [f"| {r['id']} | {r['before']} | {r['verdict_before']} | {r['text']} | {r['verdict']} |"
                  for r in rows]
        lines.append("")
    return "\n".join(lines)


def render(report: dict) -> str:
    """The Markdown report."""
    lines = [
        "# Which text the re-run keeps: selection rules replayed (laymaker-dev, cross-fitted)", "",
        f"Command: `{report['command'].strip()}`. Model `{report['model']}` through llama.cpp (so "
        "`full_precision` repeats the fast run, as the worker's float32 run does on a CPU). Gate: confidence "
        f"below {report['threshold']} (calibrated for `{report['prompt_version']}`) or a failed check: "
        f"{report['gated']} gated outputs. Every candidate of `{','.join(report['candidates'])}` generated once "
        "per output; each rule replayed over the same candidates. `engine s`: generation time the rule's early "
        "stop leaves, summed.", "",
    ]
    for fold, other in (("A", "B"), ("B", "A")):
        label = report["chosen"][fold]
        held_out = report["folds"][other]["rules"]
        lines.append(f"* Chosen on fold {fold} (best SARI over its gated rows; ties to the larger margin): "
                     f"**{label}**; on fold {other} it gives SARI {held_out[label]['sari']:.1f} against "
                     f"{held_out['current']['sari']:.1f} for `current`.")
    lines.append("")
    for fold, result in report["folds"].items():
        lines += [f"## Fold {fold}: {result['rows']} gated rows ({result['fast_failed']} failed a check)", "",
                  f"Fast text alone: SARI {result['fast']['sari']:.1f}, changed {result['fast']['sari_changed']}.", "",
                  "| rule | SARI | SARI (changed) | safety pass | faithfulness pass | passing fast texts replaced "
                  "| engine s | kept |", "|---|---|---|---|---|---|---|---|"]
        for label, r in result["rules"].items():
            lines.append(f"| {label} | {r['sari']:.1f} | {r['sari_changed']} | {r['safety_pass_pct']:.1f} % | "
                         f"{r['faithfulness_pass_pct']:.1f} % | {r['passing_fast_replaced']} | {r['engine_s']} | "
                         f"{r['kept']} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
