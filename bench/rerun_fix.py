"""``python -m bench rerun_fix``: what the re-run lane does to the outputs
the gate sends it, on laymaker-dev, cross-fitted.

Reads the cluster-prompt rows of ``python -m bench quality --clusters N
--per-cluster M --k K`` from its cache, applies the product's gate (the
calibrated threshold for ``--prompt-version`` in
``clinical/quality/gate_calibration.json``, or ``--threshold``; plus a
failed safety or faithfulness check), and for each gated row runs the
product's re-run (:func:`clinical.rerun.execute.rerun_candidates_run`: the
candidates of ``RERUN_CANDIDATES`` in order, early stop, selection) on the
default model through llama.cpp. Cross-fitted like the quality bench: the
fast run's messages (which ``full_precision`` and ``sampled`` repeat) are
rebuilt from the other half's clusters, and ``retrieved_examples`` looks
in the other half's pool, so no row sees itself or its own half.

On the CPU the worker's engine is vLLM in float32; llama.cpp Q4 stands in
for it here, so ``full_precision`` is the fast run again (as it is in
float32 on a CPU, where the fast run is float32 too).

Reports (``<out>.md``, ``<out>.json``; per-row results cached in
``<out>-rows.jsonl``, reused with ``--resume``): outputs re-run, how many
of those that failed a check pass both after the re-run (fixed), the
candidate kept and its time, and SARI (all, changed only), FKGL, safety
and faithfulness pass over all 250 rows as the clinician finally sees them
(fast text, replaced by the re-run's where it ran), beside the fast text
alone.

    .venv/bin/python -m bench rerun_fix --outputs docs/quality/quality-report-examples-outputs.jsonl \\
        --clusters 12 --per-cluster 8 --k 0 --headings --prompt-version 2026-11-25.2+c24x8k0h --resume

With ``--self-check`` the gate is the product's where a self-check
threshold is calibrated (:func:`clinical.quality.gate.self_check_threshold`):
the fast text's P(yes) (from ``python -m bench self_check``'s report, the
same engine and function) below it, or a failed check; the re-run then
checks each candidate on the engine and chooses by it, as the worker does.
Its report is ``docs/quality/rerun-fix-self-check`` by default, with the
hand-judged verdicts (docs/quality/hand-judged.md) of the fast and the
delivered texts counted where a text was judged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


def _rows(path: Path, *, clusters: int, per_cluster: int, k: int, headings: bool = False) -> dict[str, dict]:
    """Cached laymaker rows of one cluster variant (examples inline, as the
    product renders it; with ``headings``, the version that copies
    headings), by ID."""
    from inference.prompts import ClusterPrompt

    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        prompt = ClusterPrompt.parse(row.get("prompt_version", ""))
        if (row["key"].startswith("laymaker-") and row.get("clusters") == clusters
                and row.get("per_cluster") == per_cluster and row.get("k") == k
                and row.get("placement") == "inline" and prompt is not None and prompt.headings == headings):
            found[row["key"].removeprefix("laymaker-")] = row
    return found


@dataclass
class Gate:
    """The cluster-prompt rows of one variant and what the product's gate
    does with them (see :func:`gated_rows`)."""

    data: list[dict[str, str]]
    by_id: dict[str, dict[str, str]]
    fast: dict[str, dict]
    checks: dict
    gated: list[str]
    model: str
    version: str
    threshold: float | str
    plan: dict[str, tuple[str, frozenset[str]]]
    routers: dict
    pools: dict
    k: int = 0
    headings: bool = False
    clusters: int = 0
    per_cluster: int = 0
    self_checks: dict[str, float] | None = None
    #: Each gated row's re-run reasons as the product's gate gives them
    #: (``clinical.quality.measure.rerun_reasons``), by ID.
    reasons: dict[str, list[str]] | None = None
    #: The self-check threshold of the gate (with ``self_checks``), else ``None``.
    self_check_threshold: float | None = None

    def fold(self, row_id: str) -> str:
        """``"A"`` or ``"B"``: the cross-fit half the row belongs to."""
        return self.plan[row_id][0]

    def failed(self, row_id: str) -> bool:
        """The fast text failed the safety or the faithfulness check."""
        return not (self.checks[row_id].safety.passed and self.checks[row_id].faithfulness.passed)

    def pool_for(self, row_id: str):
        """The example pool of the other half (never the row's own)."""
        return self.pools[self.fold(row_id)]

    def fast_messages(self, row_id: str) -> list:
        """The fast run's messages: the product's cluster prompt over the
        other half's pool, which is what ``bench quality --placement inline``
        rendered (tests/inference/test_examples.py checks they are equal);
        with ``headings`` and a sentence that starts with one, its one part
        (:class:`clinical.models.TranslationPart`, the heading as prefix)."""
        from clinical.models import TranslationPart
        from inference.examples import cluster_messages, heading_split

        text = self.by_id[row_id]["ORIGINAL"]
        heading, sentence = heading_split(text) if self.headings else ("", text)
        messages = cluster_messages(sentence, router=self.routers[self.fold(row_id)], k=self.k)
        return [TranslationPart("", messages, heading)] if heading else messages

    @property
    def variant(self) -> list:
        """What the re-run records are keyed by: ``[clusters, per_cluster,
        k]``, plus ``"h"`` for the version that copies headings."""
        return [self.clusters, self.per_cluster, self.k, *(["h"] if self.headings else [])]


def gated_rows(*, outputs: Path, clusters: int, per_cluster: int, k: int, prompt_version: str = "",
               threshold: float | None = None, headings: bool = False,
               self_check_report: Path | None = None) -> Gate:
    """Read the cached fast outputs of one cluster variant and apply the
    product's gate: the calibrated threshold for ``prompt_version`` (default
    the rows' own) or ``threshold``, plus a failed safety or faithfulness
    check. With ``self_check_report`` (``python -m bench self_check``'s
    JSON: the fast texts' P(yes), :func:`fast_self_checks`) the self-check
    threshold calibrated for ``prompt_version`` replaces the confidence's
    (:attr:`Gate.threshold` is then ``"self_check<T"``). Gated IDs in
    numeric order, each with its reasons (:attr:`Gate.reasons`).

    Raises:
        SystemExit: ``outputs`` has no row of that variant, or
            ``self_check_report`` without a calibrated self-check threshold.
    """
    from bench.quality import crossfit_plan, laymaker_rows
    from clinical.quality import measure as quality
    from clinical.quality.gate import gate_threshold, self_check_threshold
    from inference.examples import ExamplePool

    data, _ = laymaker_rows()
    by_id = {r["ID"]: r for r in data}
    fast = _rows(outputs, clusters=clusters, per_cluster=per_cluster, k=k, headings=headings)
    if not fast:
        raise SystemExit(f"no rows of {clusters} clusters x {per_cluster}, k={k} in {outputs}")
    model = next(iter(fast.values()))["model"]
    version = prompt_version or next(iter(fast.values()))["prompt_version"]
    threshold = threshold if threshold is not None else gate_threshold(model, version)
    check_threshold = None
    self_checks = fast_self_checks(self_check_report, fast) if self_check_report is not None else None
    if self_checks is not None:
        check_threshold = self_check_threshold(model, version)
        if check_threshold is None:
            raise SystemExit(f"no self-check threshold for {model} {version}: python -m bench self_check --write-for")
    plan = crossfit_plan([by_id[i] for i in fast])
    pool = ExamplePool.load()
    pools = {name: pool.subset(ids) for name, ids in {p[0]: p[1] for p in plan.values()}.items()}
    routers = {name: sub.clusters(clusters, per_cluster) for name, sub in pools.items()}
    checks = {i: quality.output_quality(input_text=by_id[i]["ORIGINAL"], output_text=row["output"], language="en")
              for i, row in fast.items()}
    reasons = {i: quality.rerun_reasons(confidence=fast[i]["confidence"], safety_passed=checks[i].safety.passed,
                                        threshold=threshold, faithfulness_passed=checks[i].faithfulness.passed,
                                        self_check=(self_checks or {}).get(i), self_check_threshold=check_threshold)
               for i in fast}
    gated = [i for i in sorted(fast, key=int) if reasons[i]]
    return Gate(data=data, by_id=by_id, fast=fast, checks=checks, gated=gated, model=model, version=version,
                threshold=threshold if check_threshold is None else f"self_check<{check_threshold}",
                plan=plan, routers=routers, pools=pools, k=k, headings=headings,
                clusters=clusters, per_cluster=per_cluster, self_checks=self_checks,
                reasons={i: reasons[i] for i in gated}, self_check_threshold=check_threshold)


def fast_self_checks(path: Path, fast: dict[str, dict]) -> dict[str, float]:
    """``{ID: P(yes)}`` of the fast texts from ``python -m bench
    self_check``'s JSON report (its ``"fast"`` pairs), for the rows whose
    text is the cached fast output (another text's score would not stand
    for it)."""
    pairs = json.loads(path.read_text(encoding="utf-8"))["fast"]
    return {p["id"]: p["p_yes"] for p in pairs if p["id"] in fast and p["text"] == fast[p["id"]]["output"]}


def rerun_records(path: Path, *, variant: list, threshold: float | str) -> dict[str, dict]:
    """The re-run results cached in ``path`` (``<out>-rows.jsonl``) for one
    cluster ``variant`` (:attr:`Gate.variant`) gated at
    ``threshold``, by row ID (a later line wins); empty when there is no file."""
    found: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("variant") == variant and row.get("threshold") == threshold:
                found[row["id"]] = row
    return found


def rerun_records_reused(path: Path, *, variant: list, threshold: float, fast: dict[str, dict],
                         passes) -> dict[str, dict]:
    """Re-run results of ``path`` made at other thresholds that stand for
    ``threshold``, by row ID, for the rows of ``fast`` only: a row's re-run does not depend on the gate's
    threshold (which only chooses the rows sent), so a record of the same
    cluster ``variant`` whose fast text is the row's (``fast[ID]["output"]``)
    and whose kept text the checks judge as the record says
    (``passes(ID, text) == record["passed"]``) is taken, with
    ``threshold`` set and ``reused_from`` naming the threshold it was made
    at (the last such line wins). A check relaxed since it was made could
    let a fresh run keep another candidate: run without ``--resume`` then."""
    found: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("variant") != variant or row.get("threshold") == threshold or row["id"] not in fast:
                continue
            if row["fast"] == fast[row["id"]]["output"] and passes(row["id"], row["text"]) == row["passed"]:
                found[row["id"]] = {**row, "threshold": threshold,
                                    "reused_from": row.get("reused_from", row["threshold"])}
    return found


def gate_arguments(parser, *, prompt_version: str) -> None:
    """The arguments naming the cached fast outputs and the gate
    (:func:`gated_rows`), plus ``--limit``, ``--threads`` and ``--resume``."""
    parser.add_argument("--outputs", default="docs/quality/quality-report-examples-outputs.jsonl")
    parser.add_argument("--clusters", type=int, default=12)
    parser.add_argument("--per-cluster", type=int, default=8)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--prompt-version", default=prompt_version,
                        help="the gate's calibration key (empty: the rows' own)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N gated rows")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("INFERENCE_THREADS", "0")))
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--headings", action="store_true",
                        help="the rows of the version that copies headings (bench quality --headings)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench rerun_fix", description=__doc__.splitlines()[0])
    gate_arguments(parser, prompt_version="")
    parser.add_argument("--threshold", type=float, default=None, help="instead of the calibrated threshold")
    parser.add_argument("--self-check", nargs="?", const="docs/quality/self-check.json", default=None,
                        metavar="REPORT", help="gate by the fast texts' self-check scores of this bench self_check "
                                               "report; the re-run checks its candidates")
    parser.add_argument("--incumbent", action="store_true",
                        help="the product's rule for a fast text re-run for its score alone: it stands unless a "
                             "candidate is clearly better (clinical.rerun.candidates.incumbent_for); without it "
                             "every re-run keeps a candidate, as this report did until 2026-11-27")
    parser.add_argument("--hand-judged", default="docs/quality/hand-judged.md")
    parser.add_argument("--out", default=None, help="default docs/quality/rerun-fix, +-self-check with --self-check, "
                                                    "+-incumbent with --incumbent")
    args = parser.parse_args(argv)
    args.out = args.out or ("docs/quality/rerun-fix" + ("-self-check" if args.self_check else "")
                            + ("-incumbent" if args.incumbent else ""))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")
    import django

    django.setup()
    from bench.quality import score
    from clinical.models import Translation
    from clinical.rerun.engine import run_in_engine_loop
    from clinical.rerun.execute import rerun_candidates_run
    from inference.factory import EngineConfig, create_engine

    gate = gated_rows(outputs=Path(args.outputs), clusters=args.clusters, per_cluster=args.per_cluster, k=args.k,
                      prompt_version=args.prompt_version, threshold=args.threshold, headings=args.headings,
                      self_check_report=Path(args.self_check) if args.self_check else None)
    self_checks = gate.self_checks
    data, by_id, fast, checks, gated = gate.data, gate.by_id, gate.fast, gate.checks, gate.gated
    model, version, threshold, fast_messages = gate.model, gate.version, gate.threshold, gate.fast_messages
    to_run = gated[:args.limit] if args.limit else gated
    cache = Path(f"{args.out}-rows.jsonl")
    done = rerun_records(cache, variant=gate.variant, threshold=threshold) if args.resume else {}
    if args.resume and self_checks is None:  # a self-check re-run chooses otherwise: nothing to reuse
        from clinical.quality.measure import output_quality

        def passes(row_id: str, text: str) -> bool:
            result = output_quality(input_text=by_id[row_id]["ORIGINAL"], output_text=text, language="en")
            return result.safety.passed and result.faithfulness.passed

        wanted = {i: fast[i] for i in to_run if i not in done}  # only these rows' records are checked
        reused = rerun_records_reused(cache, variant=gate.variant, threshold=threshold, fast=wanted, passes=passes)
        reused = {i: {**record, "fast_failed": gate.failed(i)} for i, record in reused.items()}
        if reused:
            with open(cache, "a", encoding="utf-8") as out:
                for record in reused.values():
                    out.write(json.dumps(record) + "\n")
            print(f"{len(reused)} re-runs made at another threshold reused", flush=True)
        done.update(reused)
    todo = [i for i in to_run if i not in done]
    if todo:
        engine = create_engine(EngineConfig(engine="llamacpp", threads=args.threads))
        run_in_engine_loop(engine.start())
        cache.parent.mkdir(parents=True, exist_ok=True)
        with open(cache, "a", encoding="utf-8") as out:
            for n, row_id in enumerate(todo, start=1):
                text = by_id[row_id]["ORIGINAL"]
                # With --incumbent the row carries the product's reasons, so a fast text that
                # passed both checks stands unless a candidate is clearly better (incumbent_for).
                reasons = gate.reasons[row_id] if args.incumbent else []
                translation = Translation(input_text=text, language="en", reading_level=6, prompt_version=version,
                                          model_name=model, output_text=fast[row_id]["output"],
                                          confidence=fast[row_id]["confidence"], rerun_reason=",".join(reasons),
                                          self_check=(self_checks or {}).get(row_id))
                started = time.perf_counter()
                chosen, records = rerun_candidates_run(
                    translation=translation, engine=engine, request_prefix=f"fix-{row_id}",
                    messages=fast_messages(row_id), pool=gate.pool_for(row_id))
                result = {"id": row_id, "variant": gate.variant, "threshold": threshold,
                          "fast": fast[row_id]["output"], "fast_failed": gate.failed(row_id),
                          "kept": chosen.name, "text": chosen.text, "passed": chosen.passed,
                          "s": round(time.perf_counter() - started, 1),
                          "fast_self_check": (self_checks or {}).get(row_id), "rerun_reason": ",".join(reasons),
                          "self_check": chosen.self_check,
                          "candidates": [{k: v for k, v in r.items() if k in ("name", "passed", "confidence",
                                                                               "ms", "skipped", "outcome",
                                                                               "self_check", "safety_passed",
                                                                               "faithfulness_passed")}
                                         for r in records]}
                done[row_id] = result
                out.write(json.dumps(result) + "\n")
                out.flush()
                print(f"[{n}/{len(todo)}] {row_id} kept {chosen.name} passed={chosen.passed} {result['s']} s",
                      flush=True)
        run_in_engine_loop(engine.shutdown())

    report = _report(data, fast, checks, gated, to_run, done, threshold=threshold, version=version, model=model,
                     score=score, command=" ".join(sys.argv[1:] if argv is None else argv))
    report["hand_judged"] = verdicts_count(report, data, fast, done, Path(args.hand_judged),
                                           self_checks=self_checks, check_threshold=gate.self_check_threshold)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    Path(f"{args.out}.md").write_text(render(report), encoding="utf-8")
    print(render(report))
    return 0


def _report(data, fast, checks, gated, to_run, done, *, threshold, version, model, score, command: str) -> dict:
    from bench.quality import _same
    from bench.stats import percentiles

    rows = [r for r in data if r["ID"] in fast]
    sources = [r["ORIGINAL"] for r in rows]
    references = [r["REFERENCE"] for r in rows]
    changed = [not _same(r["ORIGINAL"], r["REFERENCE"]) for r in rows]
    before = [fast[r["ID"]]["output"] for r in rows]
    after = [done[r["ID"]]["text"] if r["ID"] in done else fast[r["ID"]]["output"] for r in rows]
    ran = [done[i] for i in to_run if i in done]
    failing = [r for r in ran if r["fast_failed"]]
    on_gated = [i for i, r in enumerate(rows) if r["ID"] in done]
    return {
        "command": "python -m bench rerun_fix " + command,
        "model": model, "prompt_version": version, "threshold": threshold, "rows": len(rows),
        "gated": len(gated), "rerun_rate": len(gated) / len(rows), "ran": len(ran),
        "failing_sent": len(failing), "failing_fixed": sum(r["passed"] for r in failing),
        "low_confidence_sent": len(ran) - len(failing),
        "low_confidence_still_passing": sum(r["passed"] for r in ran if not r["fast_failed"]),
        "kept": dict(Counter(r["kept"] for r in ran)),
        "rerun_s_median": percentiles([r["s"] for r in ran])["p50"] if ran else None,
        "rerun_s_p95": percentiles([r["s"] for r in ran])["p95"] if ran else None,
        "candidates_tried_mean": (statistics.mean(sum("ms" in c for c in r["candidates"]) for r in ran)
                                  if ran else None),
        "scores": [
            score("fast text (cluster prompt)", sources, before, references, changed=changed),
            score("as delivered (re-run text where it ran)", sources, after, references, changed=changed),
            score("gated rows, fast text", [sources[i] for i in on_gated], [before[i] for i in on_gated],
                  [references[i] for i in on_gated], changed=[changed[i] for i in on_gated]),
            score("gated rows, re-run text", [sources[i] for i in on_gated], [after[i] for i in on_gated],
                  [references[i] for i in on_gated], changed=[changed[i] for i in on_gated]),
        ],
        "pairs": [{"id": r["id"], "fast": r["fast"], "kept": r["kept"], "text": r["text"], "passed": r["passed"],
                   "fast_failed": r["fast_failed"]} for r in ran],
    }


def verdicts_count(report: dict, data: list[dict], fast: dict, done: dict, hand_judged: Path, *,
                   self_checks: dict[str, float] | None = None, check_threshold: float | None = None) -> dict:
    """The hand-judged verdicts (:func:`bench.self_check.hand_labels`) of
    the fast and the delivered texts of every row: ``{"fast": {verdict:
    n}, "delivered": {...}, "delivered_unjudged_changed": [IDs]}`` (a text
    never judged counts as ``"unjudged"``; the last list: re-run rows whose
    delivered text nobody judged, to read).

    With ``self_checks`` (the fast texts' P(yes)) and ``check_threshold``
    also ``"doubted"`` and ``"trusted"``: the delivered texts' verdicts
    split by whether the model's own check of the delivered text (the kept
    candidate's where the row was re-run, else the fast text's) is under
    the threshold, which is what the product shows the clinician as
    "doubted" (:func:`clinical.quality.display.self_check_display`); a text
    without a score counts as trusted. ``"doubted_ids"``: those rows."""
    from bench.self_check import hand_labels

    labels = hand_labels(hand_judged.read_text(encoding="utf-8"), {r["ID"] for r in data})
    counts: dict[str, dict[str, int]] = {"fast": {}, "delivered": {}}
    split: dict[str, dict[str, int]] = {"doubted": {}, "trusted": {}}
    doubted_ids = []
    unjudged = []
    for row in data:
        i = row["ID"]
        if i not in fast:
            continue
        before = fast[i]["output"].strip()
        after = done[i]["text"].strip() if i in done else before
        for name, text in (("fast", before), ("delivered", after)):
            verdict = labels.get((i, text), "unjudged")
            counts[name][verdict] = counts[name].get(verdict, 0) + 1
        if i in done and after != before and (i, after) not in labels:
            unjudged.append(i)
        if self_checks is not None and check_threshold is not None:
            p_yes = done[i].get("self_check") if i in done else self_checks.get(i)
            side = "doubted" if p_yes is not None and p_yes < check_threshold else "trusted"
            verdict = labels.get((i, after), "unjudged")
            split[side][verdict] = split[side].get(verdict, 0) + 1
            if side == "doubted":
                doubted_ids.append(i)
    result = {**counts, "delivered_unjudged_changed": sorted(unjudged, key=int)}
    if self_checks is not None and check_threshold is not None:
        result.update(split, doubted_ids=doubted_ids, check_threshold=check_threshold)
    return result


def render(report: dict) -> str:
    """The Markdown report."""
    def pct(a: int, b: int) -> str:
        return f"{a} of {b} ({100 * a / b:.0f} %)" if b else "–"

    threshold = str(report["threshold"])
    measure = (f"the model's self-check P(yes) below {threshold.removeprefix('self_check<')}"
               if threshold.startswith("self_check<") else f"confidence below {threshold}")
    lines = [
        "# The re-run lane on the gated outputs (laymaker-dev, cross-fitted)", "",
        f"Command: `{report['command'].strip()}`. Model `{report['model']}` through llama.cpp (standing in for "
        f"the worker's float32 vLLM engine, so `full_precision` repeats the fast run). Gate: {measure} "
        f"(calibrated for `{report['prompt_version']}`) or a failed safety or faithfulness "
        "check. Re-run: `clinical.rerun.execute.rerun_candidates_run`, the candidates of `RERUN_CANDIDATES` in "
        "order with early stop and `candidate_select`, cross-fitted (fast messages and the retrieval pool from "
        "the other half).", "",
        f"* Re-run rate: {pct(report['gated'], report['rows'])}; re-run here: {report['ran']}.",
        f"* Outputs that failed a check and pass both after the re-run (fixed): "
        f"{pct(report['failing_fixed'], report['failing_sent'])}.",
        f"* Outputs sent for their score alone (passing both checks) that still pass after it: "
        f"{pct(report['low_confidence_still_passing'], report['low_confidence_sent'])}.",
        f"* Candidate kept: {report['kept']}; candidates generated per re-run (mean): "
        f"{report['candidates_tried_mean'] and round(report['candidates_tried_mean'], 1)}; re-run time median "
        f"{report['rerun_s_median']} s, P95 {report['rerun_s_p95']} s on the shared 2-core machine.", "",
        "| text | n | SARI | SARI (changed) | FKGL out | safety pass | faithfulness pass |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in report["scores"]:
        lines.append(f"| {s['system']} | {s['n']} | {s['sari']:.1f} | {s.get('sari_changed', 0):.1f} | "
                     f"{s['fkgl']:.1f} | {s['safety_pass_pct']:.1f} % | {s['faithfulness_pass_pct']:.1f} % |")
    judged = report.get("hand_judged")
    if judged:
        lines += ["", "Hand-judged verdicts (docs/quality/hand-judged.md) of the texts as written here, every row:", "",
                  "| text | correct | lossy | wrong | not judged |", "|---|---|---|---|---|"]
        names = {"fast": "fast", "delivered": "delivered"}
        if "doubted" in judged:
            below = judged["check_threshold"]
            names.update(doubted=f"delivered, shown as doubted (own check under {below})",
                         trusted="delivered, not doubted")
        for key, name in names.items():
            c = judged[key]
            lines.append(f"| {name} | {c.get('correct', 0)} | {c.get('lossy', 0)} | {c.get('wrong', 0)} | "
                         f"{c.get('unjudged', 0)} |")
        lines.append(f"\nRe-run rows whose delivered text is new and not judged: "
                     f"{', '.join(judged['delivered_unjudged_changed']) or 'none'}.")
        if "doubted" in judged:
            lines.append(f"\nDelivered texts the page, the handout, the verified frame and the API show as doubted "
                         f"by the model's own check: {', '.join(judged['doubted_ids']) or 'none'}.")
    lines += ["", "## Before and after (every re-run)", "", "| ID | fast text | failed a check | kept | re-run text | "
              "passes both |", "|---|---|---|---|---|---|"]
    for p in report["pairs"]:
        lines.append(f"| {p['id']} | {p['fast']} | {'yes' if p['fast_failed'] else 'no'} | {p['kept']} | "
                     f"{p['text']} | {'yes' if p['passed'] else 'no'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
