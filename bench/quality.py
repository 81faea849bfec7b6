"""Quality benchmark: SARI, reading level, safety check and re-run rate of
this system next to the published systems of laymaker-dev.csv.

Runs the product's engine and prompt (llama.cpp, default model,
``inference.prompts.build_messages`` at grade 6 in English, greedy, the
same ``MAX_OUTPUT_TOKENS``) over every laymaker-dev sentence and every
Cochrane val abstract (or the first ``--cochrane N``), and scores each output the way the
product does (``clinical.quality.measure``: FKGL, safety check, the re-run gate
``confidence < 0.85 or safety failed``). The same SARI / FKGL / safety
figures are computed for every system column of laymaker-dev.csv, for the
clinicians' references themselves and for the input copied unchanged
(identity), as sanity rows.

SARI (:func:`corpus_sari`, below) is against the clinicians' ``REFERENCE`` (one
reference per sentence) or the Cochrane plain-language summary, on
lower-cased regex-tokenized text, ×100. FKGL is the mean of per-output
grades. Engine outputs are cached in ``<out>-outputs.jsonl`` so a run can
be resumed (``--resume``); each row records what made it (prompt version,
engine, model file, token limit) and a resumed run reuses only the rows
that match its own.

    .venv/bin/python -m bench quality --resume        # score the committed outputs (20 s)
    .venv/bin/python -m bench quality                 # generate all 661 again (~6 h on 2 cores)
    .venv/bin/python -m bench.quality --limit 3 --cochrane 1 --engine fake --out /tmp/q
    .venv/bin/python -m bench quality --cochrane -1 --shard 0/2 &   # two processes,
    .venv/bin/python -m bench quality --cochrane -1 --shard 1/2     # one cache file

writes ``<out>.md`` and ``<out>.json`` (default ``docs/quality/quality-report``).

Retrieved examples, cross-fitted (``--methods`` picks today's
prompt, the retrieval method or both, the default): laymaker-dev is split
once into halves A and B (:func:`inference.examples.crossfit_folds`, seed
``FOLD_SEED``); each row of A is generated with examples retrieved from the
changed rows of B (:class:`inference.examples.ExamplePool`) and vice versa,
so no row is scored with a pool it is in. Those outputs are cached in
``<out>-examples-outputs.jsonl`` with the same provenance plus the variant
(``k``, placement), the fold and the example IDs used. Every new row
records its TTFT (ms, request sent to first text), E2E (ms) and prompt
tokens; ``--timing`` regenerates today's laymaker rows cached without them.

    .venv/bin/python -m bench quality --resume --methods examples --fold A --cochrane 0 \
        --k 4 --placement inline --out /tmp/k4-inline   # a tuning run on fold A

**SARI**, the text simplification metric of Xu, Napoles, Pavlick, Chen and
Callison-Burch, "Optimizing Statistical Machine Translation for Text
Simplification", TACL 4 (2016), section 4.

No installable package provides it offline here: ``evaluate``'s ``sari``
downloads its script from the Hugging Face hub and EASSE is not on PyPI, so
it is implemented from the paper and checked against the reference
implementation (github.com/cocoxu/simplification ``SARI.py``) on the
paper's worked example (``tests/benchmarks/test_sari.py``, to 1e-9).

For one source ``I``, output ``O`` and references ``R`` (``r`` of them),
per n-gram order n = 1..4, with n-gram counts multiplied by ``r`` for the
source and the output and summed over the references:

* keep: F1 of n-grams kept from the source that the references keep too,
  each weighted by ``min(count in I∩O∩R) / count in I∩O`` (precision) and
  ``/ count in I∩R`` (recall);
* deletion: *precision* only of n-grams deleted from the source that the
  references delete too (the paper drops deletion recall, which would
  reward deleting everything);
* addition: F1 over n-gram *types* added to the output (not in the source)
  that appear in a reference, against all reference n-grams not in the
  source.

``SARI = (mean_n F_keep + mean_n P_del + mean_n F_add) / 3``, 0..1 (we
report ×100). An order with no n-grams scores 0, as in the reference
implementation. Text is lower-cased and split on spaces; callers tokenize
first (:func:`tokenize`). A corpus score is the mean of sentence scores.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.corpora import corpus_file

# -- SARI ------------------------------------------------------------------------
MAX_ORDER = 4


@dataclass(frozen=True)
class SariScore:
    """``sari`` and its three parts (means over n-gram orders), all 0..1."""

    sari: float
    keep: float
    delete: float
    add: float


def tokenize(text: str) -> str:
    """Lower-case, words and punctuation as space-separated tokens: the
    laymaker data mixes pre-tokenized (``"edema ."``) and plain text, so
    every side is tokenized the same way before scoring."""
    return " ".join(re.findall(r"\w+(?:[-'.]\w+)*|[^\w\s]", text.lower()))


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def _f1(precision: float, recall: float) -> float:
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def _order_scores(source: Counter, output: Counter, references: list[Counter]) -> tuple[float, float, float]:
    """``(F_keep, P_del, F_add)`` for one n-gram order."""
    r = len(references)
    ref_all: Counter = Counter()
    for ref in references:
        ref_all.update(ref)
    source_rep = Counter({g: c * r for g, c in source.items()})
    output_rep = Counter({g: c * r for g, c in output.items()})

    kept = source_rep & output_rep
    kept_good = kept & ref_all
    kept_by_refs = source_rep & ref_all
    keep_p = sum(kept_good[g] / kept[g] for g in kept_good) / len(kept) if kept else 0.0
    keep_r = sum(kept_good[g] / kept_by_refs[g] for g in kept_good) / len(kept_by_refs) if kept_by_refs else 0.0

    deleted = source_rep - output_rep
    deleted_good = deleted - ref_all
    del_p = sum(deleted_good[g] / deleted[g] for g in deleted_good) / len(deleted) if deleted else 0.0

    added = set(output) - set(source)
    added_good = added & set(ref_all)
    added_by_refs = set(ref_all) - set(source)
    add_p = len(added_good) / len(added) if added else 0.0
    add_r = len(added_good) / len(added_by_refs) if added_by_refs else 0.0
    return _f1(keep_p, keep_r), del_p, _f1(add_p, add_r)


def sentence_sari(source: str, output: str, references: Sequence[str]) -> SariScore:
    """SARI of one output (texts as space-separated tokens; lower-cased here).

    Raises:
        ValueError: no references.
    """
    if not references:
        raise ValueError("SARI needs at least one reference")
    s, o = source.lower().split(" "), output.lower().split(" ")
    refs = [ref.lower().split(" ") for ref in references]
    parts = [_order_scores(_ngrams(s, n), _ngrams(o, n), [_ngrams(x, n) for x in refs])
             for n in range(1, MAX_ORDER + 1)]
    keep = sum(p[0] for p in parts) / MAX_ORDER
    delete = sum(p[1] for p in parts) / MAX_ORDER
    add = sum(p[2] for p in parts) / MAX_ORDER
    return SariScore((keep + delete + add) / 3, keep, delete, add)


def corpus_sari(sources: Sequence[str], outputs: Sequence[str],
                references: Sequence[Sequence[str]], *, tokenized: bool = False) -> SariScore:
    """Mean sentence SARI over a corpus (``references[i]``: the references
    of sentence i). Untokenized text is run through :func:`tokenize`.

    Raises:
        ValueError: the lists differ in length or are empty.
    """
    if not (len(sources) == len(outputs) == len(references)) or not sources:
        raise ValueError("sources, outputs and references must be non-empty and of equal length")
    prep = (lambda t: t) if tokenized else tokenize
    scores = [sentence_sari(prep(s), prep(o), [prep(r) for r in refs])
              for s, o, refs in zip(sources, outputs, references)]
    n = len(scores)
    return SariScore(sum(x.sari for x in scores) / n, sum(x.keep for x in scores) / n,
                     sum(x.delete for x in scores) / n, sum(x.add for x in scores) / n)


# -- the benchmark ---------------------------------------------------------------
THRESHOLD = float(os.environ.get("CONFIDENCE_THRESHOLD", "0.85"))
FIXED_COLUMNS = ("ID", "ORIGINAL", "REFERENCE")


def laymaker_rows() -> tuple[list[dict[str, str]], list[str]]:
    """Rows of laymaker-dev.csv and its system columns (all but ID, ORIGINAL, REFERENCE)."""
    with open(corpus_file("laymaker-dev.csv"), newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        columns = [c for c in reader.fieldnames or [] if c not in FIXED_COLUMNS]
    return rows, columns


#: The prompt version of the cross-fitted cluster outputs users' prompt is
#: measured by (12 clusters x 8 per half pool, k 0, headings copied: the
#: shipped 24 x 8 on a half pool), as stored in ``quality-report-examples-outputs.jsonl``.
CROSSFIT_CLUSTER_VERSION = "2026-11-25.2+c12x8k0h"


def laymaker_outputs(path: Path, prompt_version: str = "") -> dict[str, str]:
    """This system's committed laymaker outputs in ``path`` (JSON lines with
    ``key`` ``laymaker-<ID>``, ``output`` and ``prompt_version``), by row ID:
    the records of ``prompt_version``, or every record when it is empty."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["key"].startswith("laymaker-") and (not prompt_version or row.get("prompt_version") == prompt_version):
            found[row["key"].removeprefix("laymaker-")] = row["output"]
    return found


def cochrane_pairs() -> list[tuple[str, str]]:
    sources = corpus_file("cochrane-val.source").read_text(encoding="utf-8").splitlines()
    targets = corpus_file("cochrane-val.target").read_text(encoding="utf-8").splitlines()
    return list(zip(sources, targets, strict=True))


async def run_system(inputs: list[tuple[str, str]], *, engine_name: str, model: str, max_tokens: int,
                     cache: Path, resume: bool, threads: int = 0,
                     shard: tuple[int, int] = (0, 1), messages_for=None, variant: dict | None = None,
                     need_timing: bool = False) -> tuple[list[dict], dict]:
    """Generate an output for each ``(key, text)``; cached rows are reused
    with ``resume``. With ``shard=(k, n)`` only inputs at positions ``i``
    with ``i % n == k`` are generated (several processes sharing one cache
    file, each appending whole lines). Returns ``(rows that exist, engine
    facts)``: shorter than ``inputs`` when another shard's rows are missing.

    ``messages_for(key, text) -> (messages, extra fields)`` builds each
    request (default: today's ``build_messages(text)``, no extra fields) and
    ``variant`` (with its ``prompt_version``) joins the provenance. Each
    generated row records ``ttft_ms`` (request sent to the first non-empty
    text), ``ms`` (E2E) and ``prompt_tokens``; with ``need_timing`` cached
    rows without ``ttft_ms`` are generated again. New rows also keep their
    ``deltas`` (``[[text, [token logprob, ...]], ...]``, as streamed) so a
    confidence measure can be recomputed offline (``bench gate_calibrate``),
    and ``engine_version`` (llama-cpp-python's version, which pins the
    llama.cpp it builds). A cached row made by another version, or by one not
    recorded (older rows), is still reused, since regenerating
    every committed output for a rebuild would cost hours; the engine facts
    count them (``cached_rows_other_engine_version``) and a line is printed."""
    from inference.base import GenerationParams
    from inference.confidence import sequence_confidence
    from inference.factory import EngineConfig, create_engine
    from inference.prompts import PROMPT_VERSION, build_messages

    variant = dict(variant or {})
    prompt_version = variant.pop("prompt_version", PROMPT_VERSION)
    if messages_for is None:
        def messages_for(key, text):
            return build_messages(text), {}

    facts: dict = {"engine": engine_name}
    if engine_name == "llamacpp":  # what create_engine will load (also when every row is cached)
        from inference import weights

        facts.update(model=model or str(weights.default_gguf_path()),
                     precision="q4_k_m" if not model else "", engine_version=_llamacpp_version())
    # What made an output: a cached row is reused only if all of it matches.
    provenance = {"prompt_version": prompt_version, "engine": engine_name,
                  "model": Path(facts.get("model") or model or engine_name).name, "max_tokens": max_tokens,
                  **variant}
    done: dict[str, dict] = {}
    stale = 0
    engine_version = facts.get("engine_version")
    if resume and cache.exists():
        for line in cache.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if all(row.get(field) == value for field, value in provenance.items()):
                if need_timing and "ttft_ms" not in row and row["key"].startswith("laymaker-"):
                    continue
                done[row["key"]] = row
            else:
                stale += 1
    todo = [(k, t) for i, (k, t) in enumerate(inputs) if k not in done and i % shard[1] == shard[0]]
    other_version = sum(1 for k, _ in inputs if k in done and done[k].get("engine_version") != engine_version)
    facts.update(cached_rows=len(inputs) - len(todo), stale_rows_ignored=stale, prompt_version=prompt_version,
                 cached_rows_other_engine_version=other_version)
    if engine_version and other_version:
        print(f"{other_version} cached outputs reused that were made by another or an unrecorded engine "
              f"version than {engine_version}", flush=True)
    if stale:
        print(f"{stale} cached outputs ignored: made with another prompt, engine, model or token limit "
              f"than {provenance}", flush=True)
    if todo:
        engine = create_engine(EngineConfig(engine=engine_name, model=model, threads=threads))
        started = time.perf_counter()
        await engine.start()
        facts.update(load_ms=round((time.perf_counter() - started) * 1000), model=engine.info.model,
                     precision=engine.info.precision)
        cache.parent.mkdir(parents=True, exist_ok=True)
        with open(cache, "a", encoding="utf-8") as out:
            for index, (key, text) in enumerate(todo):
                messages, extra = messages_for(key, text)
                pieces, logprobs, first_ms, prompt_tokens, deltas = [], [], None, None, []
                t0 = time.perf_counter()
                async for delta in engine.generate(f"quality-{key}", messages, GenerationParams(max_tokens=max_tokens)):
                    if delta.prompt_tokens is not None:
                        prompt_tokens = delta.prompt_tokens
                    if delta.text and first_ms is None:
                        first_ms = round((time.perf_counter() - t0) * 1000, 1)
                    pieces.append(delta.text)
                    logprobs.extend(delta.token_logprobs)
                    deltas.append([delta.text, [round(lp, 5) for lp in delta.token_logprobs]])
                # A verbatim heading (``extra["heading"]``) goes before the answer, as the product joins
                # it (inference.parts.TextJoiner: with the answer's first text, so not before an empty one).
                answer = "".join(pieces).strip()
                output = (extra.get("heading", "") + answer).strip() if answer else ""
                row = {"key": key, "output": output, "confidence": sequence_confidence(logprobs),
                       "tokens": len(logprobs), "ms": round((time.perf_counter() - t0) * 1000, 1),
                       "ttft_ms": first_ms, "prompt_tokens": prompt_tokens, "deltas": deltas,
                       **({"engine_version": engine_version} if engine_version else {}), **extra, **provenance}
                done[key] = row
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"[{index + 1}/{len(todo)}] {key} {row['tokens']} tokens {row['ms']:.0f} ms", flush=True)
        await engine.shutdown()
    return [done[k] for k, _ in inputs if k in done], facts


def _llamacpp_version() -> str | None:
    """llama-cpp-python's installed version (it pins the llama.cpp revision
    it builds), or ``None`` when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama_cpp_python")
    except PackageNotFoundError:
        return None


def crossfit_plan(rows: list[dict[str, str]], fold: str = "both") -> dict[str, tuple[str, frozenset[str]]]:
    """``{ID: (fold name, pool IDs)}`` for the rows to score with retrieved
    examples: the split is made once over *all* laymaker-dev IDs (so
    ``--limit`` does not move it); a row of A gets the pool B and vice
    versa; ``fold`` ``"A"`` or ``"B"`` keeps that half's rows only."""
    from inference.examples import crossfit_folds

    all_rows, _ = laymaker_rows()
    half_a, half_b = crossfit_folds(r["ID"] for r in all_rows)
    plan = {}
    for row in rows:
        name, pool = ("A", half_b) if row["ID"] in half_a else ("B", half_a)
        if fold in ("both", name):
            plan[row["ID"]] = (name, pool)
    return plan


async def run_examples(rows: list[dict[str, str]], *, k: int, placement: str, fold: str, cache: Path,
                       clusters: int = 0, per_cluster: int = 4, hints: bool = False, headings: bool = False,
                       **options) -> tuple[list[dict], dict]:
    """Generate the cross-fitted retrieval outputs (see the module
    docstring); ``options`` go to :func:`run_system`. With ``clusters``,
    each half's pool is clustered (k-means on TF-IDF) and a sentence gets
    its cluster's ``per_cluster`` fixed examples as turns after the system
    message (a prefix shared by the cluster) plus ``k`` retrieved ones;
    with ``hints`` too, HPO's plain words for the sentence's terms follow it
    (:data:`inference.prompts.HINTS_PROMPT_VERSION`); with ``headings``, a
    sentence's leading headings are copied and the model gets the rest
    (:func:`inference.examples.heading_split`, version suffix ``h``)."""
    from inference.examples import FOLD_SEED, ExamplePool, heading_split
    from inference.lay_terms import lay_hints
    from inference.prompts import EXAMPLES_PROMPT_VERSION, ClusterPrompt, build_messages

    plan = crossfit_plan(rows, fold)
    pool = ExamplePool.load()
    pools = {name: pool.subset(ids) for name, ids in {p[0]: p[1] for p in plan.values()}.items()}
    routers = {name: sub.clusters(clusters, per_cluster) for name, sub in pools.items()} if clusters else {}

    def messages_for(key: str, text: str):
        name, _ = plan[key.removeprefix("laymaker-")]
        extra, fixed = {"fold": name}, []
        if headings:
            extra["heading"], text = heading_split(text)
        if clusters:
            extra["cluster"], fixed = routers[name].route(text)
            extra["prefix_ids"] = [e.id for e in fixed]
        shown = {e.id for e in fixed}
        examples = [e for e in pools[name].retrieve(text, k + len(fixed)) if e.id not in shown][:k]
        extra["example_ids"] = [e.id for e in examples] + extra.get("prefix_ids", [])
        pairs = lay_hints(text) if hints else []
        if hints:
            extra["hints"] = len(pairs)
        return build_messages(text, examples=examples, placement=placement, prefix_examples=fixed,
                              hints=pairs), extra

    inputs = [(f"laymaker-{r['ID']}", r["ORIGINAL"]) for r in rows if r["ID"] in plan]
    if clusters:  # one cluster after another: its prefix stays in the KV cache (warm, as in the product)
        inputs.sort(key=lambda item: (plan[item[0].removeprefix("laymaker-")][0],
                                      routers[plan[item[0].removeprefix("laymaker-")][0]].route(
                                          heading_split(item[1])[1] if headings else item[1])[0]))
    variant = {"prompt_version": EXAMPLES_PROMPT_VERSION, "k": k, "placement": placement, "fold_seed": FOLD_SEED}
    if clusters:  # the product's version string for these settings (over a half pool here)
        variant.update(prompt_version=ClusterPrompt(clusters, per_cluster, k, hints=hints, headings=headings).version,
                       clusters=clusters, per_cluster=per_cluster)
    return await run_system(inputs, cache=cache, messages_for=messages_for, variant=variant, **options)


def timing(rows: list[dict]) -> dict:
    """TTFT and E2E P50/P95 (ms) and prompt tokens (mean, P95) of generated
    rows that recorded them; ``None`` where none did."""
    from bench.stats import percentiles

    timed = [r for r in rows if r.get("ttft_ms") is not None]
    ttft, e2e = percentiles([r["ttft_ms"] for r in timed]), percentiles([r["ms"] for r in timed])
    tokens = percentiles([r["prompt_tokens"] for r in timed if r.get("prompt_tokens") is not None])
    return {"timed_n": len(timed), "ttft_p50": ttft["p50"], "ttft_p95": ttft["p95"],
            "e2e_p50": e2e["p50"], "e2e_p95": e2e["p95"],
            "prompt_tokens_mean": tokens["mean"], "prompt_tokens_p95": tokens["p95"]}


def _shard(value: str) -> tuple[int, int]:
    k, _, n = value.partition("/")
    if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        raise argparse.ArgumentTypeError("expected K/N with 0 <= K < N, e.g. 0/2")
    return int(k), int(n)


def score(name: str, sources: list[str], outputs: list[str], references: list[str], *,
          confidences: list[float | None] | None = None, changed: list[bool] | None = None,
          threshold: float | None = None) -> dict:
    """SARI, FKGL, safety pass rate, faithfulness pass rate and flags by
    kind (and the re-run rate when confidences are given: the product's
    reasons, low confidence or a failed safety or faithfulness check)."""
    from clinical.quality import measure as quality
    from clinical.quality import readability

    checks = [quality.output_quality(input_text=s, output_text=o, language="en") for s, o in zip(sources, outputs)]
    grades = [c.readability.output_fkgl for c in checks if c.readability.output_fkgl is not None]
    passed = [c.safety.passed for c in checks]
    result = {
        "system": name, "n": len(sources),
        "sari": round(corpus_sari(sources, outputs, [[r] for r in references]).sari * 100, 2),
        "fkgl": round(statistics.mean(grades), 2) if grades else None,
        "safety_pass_pct": round(100 * sum(passed) / len(passed), 1),
        "missing_by_kind": _kind_totals(checks),
        "faithfulness_pass_pct": round(100 * sum(c.faithfulness.passed for c in checks) / len(checks), 1),
        "faithfulness_flags_by_kind": _flag_totals(checks),
    }
    if changed is not None and any(changed):
        picked = [i for i, c in enumerate(changed) if c]
        result["sari_changed"] = round(corpus_sari([sources[i] for i in picked], [outputs[i] for i in picked],
                                                   [[references[i]] for i in picked]).sari * 100, 2)
    if confidences is not None:
        reasons = [quality.rerun_reasons(confidence=c, safety_passed=p,
                                         threshold=THRESHOLD if threshold is None else threshold,
                                         faithfulness_passed=check.faithfulness.passed)
                   for c, p, check in zip(confidences, passed, checks)]
        result["low_confidence_pct"] = round(100 * sum(quality.LOW_CONFIDENCE in r for r in reasons) / len(reasons), 1)
        result["rerun_pct"] = round(100 * sum(bool(r) for r in reasons) / len(reasons), 1)
        result["rerun_safety_only_pct"] = round(
            100 * sum(r == [quality.SAFETY_FAILED] for r in reasons) / len(reasons), 1)
        known = [c for c in confidences if c is not None]
        result["confidence_median"] = round(statistics.median(known), 3) if known else None
        result["threshold"] = THRESHOLD if threshold is None else threshold
    result["input_fkgl"] = round(statistics.mean(
        g for g in (readability.fkgl(s) for s in sources) if g is not None), 2)
    return result


def _kind_totals(checks) -> dict[str, int]:
    totals: dict[str, int] = {}
    for check in checks:
        for kind, count in check.safety.missing_counts().items():
            totals[kind] = totals.get(kind, 0) + count
    return dict(sorted(totals.items()))


def _flag_totals(checks) -> dict[str, int]:
    totals: dict[str, int] = {}
    for check in checks:
        for kind, count in check.faithfulness.counts_by_kind().items():
            totals[kind] = totals.get(kind, 0) + count
    return dict(sorted(totals.items()))


def _same(a: str, b: str) -> bool:
    return tokenize(a) == tokenize(b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench quality", description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N laymaker sentences (0 = all 250)")
    parser.add_argument("--cochrane", type=int, default=-1,
                        help="the first N Cochrane val abstracts (0 = none, -1 = all 411, the default)")
    parser.add_argument("--engine", default="llamacpp", help="llamacpp (default) or fake (tests)")
    parser.add_argument("--model", default="", help="model path (default: the product's default model)")
    parser.add_argument("--max-tokens", type=int, default=int(os.environ.get("MAX_OUTPUT_TOKENS", "256")))
    parser.add_argument("--threads", type=int, default=int(os.environ.get("INFERENCE_THREADS", "0")),
                        help="llama.cpp threads (0 = all cores; 1 is faster on a busy machine)")
    parser.add_argument("--out", default="docs/quality/quality-report")
    parser.add_argument("--resume", action="store_true", help="reuse outputs cached by an earlier run")
    parser.add_argument("--shard", type=_shard, default=(0, 1), metavar="K/N",
                        help="generate only every N-th input from the K-th (parallel processes on one "
                             "cache; implies --resume); score when every row exists")
    parser.add_argument("--methods", default="today,examples",
                        help="comma-separated: today (the product's prompt), examples (retrieved, cross-fitted)")
    parser.add_argument("--k", type=int, default=None, help="examples per sentence (default: the product's)")
    parser.add_argument("--placement", default=None, help="turns or inline (default: the product's)")
    parser.add_argument("--fold", choices=("A", "B", "both"), default="both",
                        help="score only this cross-fit half with the retrieval method (tuning)")
    parser.add_argument("--clusters", type=int, default=0,
                        help="k-means clusters of the pool, each with fixed examples in a cached prefix (0 = off)")
    parser.add_argument("--per-cluster", type=int, default=4, help="fixed examples per cluster")
    parser.add_argument("--hints", action="store_true",
                        help="with --clusters: HPO's plain words for each sentence's terms follow it (prompt .3)")
    parser.add_argument("--headings", action="store_true",
                        help="with --clusters: leading section headings copied, the model gets the rest (suffix h)")
    parser.add_argument("--timing", action="store_true",
                        help="regenerate today's laymaker rows cached without TTFT / prompt tokens")
    args = parser.parse_args(argv)
    methods = {m.strip() for m in args.methods.split(",") if m.strip()}
    if not methods or methods - {"today", "examples"}:
        parser.error("--methods takes today, examples or both")
    from inference.examples import DEFAULT_K
    from inference.prompts import EXAMPLES_PLACEMENT

    k = DEFAULT_K if args.k is None else args.k
    placement = args.placement or EXAMPLES_PLACEMENT
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")

    rows, columns = laymaker_rows()
    if args.limit:
        rows = rows[: args.limit]
    pairs = cochrane_pairs()
    pairs = pairs if args.cochrane < 0 else pairs[: args.cochrane]
    out = Path(args.out)
    if "today" not in methods:
        pairs = []
    inputs = [(f"laymaker-{r['ID']}", r["ORIGINAL"]) for r in rows] + \
             [(f"cochrane-{i + 1}", s) for i, (s, _) in enumerate(pairs)]
    options = {"engine_name": args.engine, "model": args.model, "max_tokens": args.max_tokens,
               "threads": args.threads, "resume": args.resume or args.shard[1] > 1, "shard": args.shard}
    started = time.perf_counter()
    generated, facts = [], {"engine": args.engine}
    if "today" in methods:
        generated, facts = asyncio.run(run_system(inputs, cache=Path(f"{out}-outputs.jsonl"),
                                                  need_timing=args.timing, **options))
    facts["generation_s"] = round(time.perf_counter() - started, 1)
    retrieved, retrieved_facts = [], {}
    if "examples" in methods:
        retrieved, retrieved_facts = asyncio.run(run_examples(
            rows, k=k, placement=placement, fold=args.fold, cache=Path(f"{out}-examples-outputs.jsonl"),
            clusters=args.clusters, per_cluster=args.per_cluster, hints=args.hints, headings=args.headings,
            **options))
        if "today" not in methods:
            facts = dict(retrieved_facts, generation_s=facts["generation_s"])
    per_sentence = []
    if "examples" in methods and "today" in methods and args.clusters:  # the per-sentence method beside them
        per_sentence, _ = asyncio.run(run_examples(
            rows, k=DEFAULT_K, placement="turns", fold=args.fold, cache=Path(f"{out}-examples-outputs.jsonl"),
            **options))
    without_hints = []
    if "examples" in methods and "today" in methods and args.clusters and args.hints:  # the same clusters, no hints
        without_hints, _ = asyncio.run(run_examples(
            rows, k=k, placement=placement, fold=args.fold, cache=Path(f"{out}-examples-outputs.jsonl"),
            clusters=args.clusters, per_cluster=args.per_cluster, **options))
    without_headings = []
    if "examples" in methods and "today" in methods and args.clusters and args.headings:  # headings sent to the model
        without_headings, _ = asyncio.run(run_examples(
            rows, k=k, placement=placement, fold=args.fold, cache=Path(f"{out}-examples-outputs.jsonl"),
            clusters=args.clusters, per_cluster=args.per_cluster, hints=args.hints, **options))
    expected = len(inputs) if "today" in methods else 0
    if len(generated) < expected or len(retrieved) < len(crossfit_plan(rows, args.fold)) * ("examples" in methods):
        print("some outputs belong to other shards; run again with --resume once they are done to write the report")
        return 0
    by_key = {g["key"]: g for g in generated}
    if "examples" in methods and args.fold != "both":  # score the chosen fold's rows only
        plan = crossfit_plan(rows, args.fold)
        rows = [r for r in rows if r["ID"] in plan]
    if "today" not in methods:  # tuning: the retrieval outputs alone
        by_key = {g["key"]: g for g in retrieved}

    sources = [r["ORIGINAL"] for r in rows]
    references = [r["REFERENCE"] for r in rows]
    changed = [not _same(r["ORIGINAL"], r["REFERENCE"]) for r in rows]
    ours = [by_key[f"laymaker-{r['ID']}"] for r in rows]
    system_name = f"this system ({Path(facts.get('model') or args.engine).name})"
    if "today" not in methods:
        system_name = f"retrieved examples, k={k}, {placement} (fold {args.fold})"
        if args.clusters:
            system_name = (f"{args.clusters} clusters x {args.per_cluster} fixed examples + k={k} retrieved, "
                           f"{placement} (fold {args.fold})")
    from clinical.quality.gate import gate_threshold

    threshold = gate_threshold(Path(facts.get("model") or args.model or args.engine).name,
                               ours[0].get("prompt_version", "") if ours else "")
    laymaker = [score(system_name, sources, [g["output"] for g in ours], references,
                      confidences=[g["confidence"] for g in ours], changed=changed, threshold=threshold)]
    laymaker += [score(column, sources, [r[column] for r in rows], references, changed=changed) for column in columns]
    laymaker.append(score("REFERENCE (clinicians)", sources, references, references, changed=changed))
    laymaker.append(score("identity (input copied)", sources, sources, references, changed=changed))

    cochrane = []
    if pairs:
        ours_c = [by_key[f"cochrane-{i + 1}"] for i in range(len(pairs))]
        c_sources, c_targets = [s for s, _ in pairs], [t for _, t in pairs]
        cochrane = [score(system_name, c_sources, [g["output"] for g in ours_c], c_targets,
                          confidences=[g["confidence"] for g in ours_c], threshold=threshold),
                    score("plain-language summary (reference)", c_sources, c_targets, c_targets),
                    score("identity (input copied)", c_sources, c_sources, c_targets)]
    crossfit = None
    if "today" in methods and "examples" in methods:
        from inference.prompts import EXAMPLES_PROMPT_VERSION, PROMPT_VERSION

        compared = [(f"today's prompt ({PROMPT_VERSION})", ours)]
        if per_sentence:
            compared.append((f"retrieved per sentence, k={DEFAULT_K}, turns ({EXAMPLES_PROMPT_VERSION})",
                             _by_rows(rows, per_sentence)))
        if without_hints:
            compared.append((f"cluster prefixes, {args.clusters} clusters x {args.per_cluster} per half pool, "
                             f"k={k} ({without_hints[0]['prompt_version']})", _by_rows(rows, without_hints)))
        if without_headings:
            compared.append((f"cluster prefixes, {args.clusters} clusters x {args.per_cluster} per half pool, "
                             f"k={k}, headings sent to the model ({without_headings[0]['prompt_version']})",
                             _by_rows(rows, without_headings)))
        name = (f"cluster prefixes{' + HPO plain words' if args.hints else ''}"
                f"{', headings copied' if args.headings else ''}, {args.clusters} clusters x "
                f"{args.per_cluster} per half pool, k={k} "
                f"({retrieved[0]['prompt_version'] if retrieved else ''})" if args.clusters else
                f"retrieved per sentence, k={k}, {placement} ({EXAMPLES_PROMPT_VERSION})")
        compared.append((name, _by_rows(rows, retrieved)))
        crossfit = _crossfit_section(rows, sources, references, changed, compared, k=k, placement=placement,
                                     model=Path(facts.get("model") or args.model or args.engine).name)
    if "today" not in methods:
        crossfit = {"rows": [], "timing": {"retrieved": timing(ours)}}
    ms = [g["ms"] for g in generated if "ms" in g]
    cochrane_ms = [by_key[f"cochrane-{i + 1}"].get("ms", 0) for i in range(len(pairs))]
    report = {
        "command": "python -m bench quality " + " ".join(sys.argv[1:] if argv is None else argv),
        "threshold": threshold, "laymaker_n": len(rows), "laymaker_changed_n": sum(changed),
        "laymaker_system_columns": columns, "cochrane_n": len(pairs), "cochrane_total": len(cochrane_pairs()),
        "cochrane_ms_median": round(statistics.median(cochrane_ms), 1) if cochrane_ms else None, "engine": facts,
        "generation_ms_median": round(statistics.median(ms), 1) if ms else None,
        "generation_s_sum": round(sum(ms) / 1000, 1),
        "laymaker": laymaker, "cochrane": cochrane, "crossfit": crossfit,
        "methods": sorted(methods), "fold": args.fold,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    markdown = render(report)
    out.with_suffix(".md").write_text(markdown, encoding="utf-8")
    print(markdown)
    return 0


def _by_rows(rows: list[dict], generated: list[dict]) -> list[dict]:
    by_key = {g["key"]: g for g in generated}
    return [by_key[f"laymaker-{r['ID']}"] for r in rows]


def _crossfit_section(rows, sources, references, changed, compared: list[tuple[str, list[dict]]], *, k: int,
                      placement: str, model: str) -> dict:
    """The methods of ``compared`` (``[(name, outputs in row order)]``,
    today's prompt first) on the same rows: all, then each cross-fit half
    (fold A was scored with pool B and vice versa). Each method's re-run
    rate uses the gate's threshold for its own prompt version
    (:func:`clinical.quality.gate.gate_threshold`)."""
    from clinical.quality.gate import gate_threshold
    from inference.examples import FOLD_SEED

    folds = {i: g.get("fold") for i, g in enumerate(compared[-1][1])}
    results = []
    for label, picked in [("all", range(len(rows)))] + [
            (f"fold {f}", [i for i, fold in folds.items() if fold == f]) for f in ("A", "B")]:
        picked = list(picked)
        if not picked:
            continue
        for name, outs in compared:
            threshold = gate_threshold(model, outs[0].get("prompt_version", ""))
            result = score(f"{name}, {label}", [sources[i] for i in picked], [outs[i]["output"] for i in picked],
                           [references[i] for i in picked], confidences=[outs[i]["confidence"] for i in picked],
                           changed=[changed[i] for i in picked], threshold=threshold)
            result.update(timing([outs[i] for i in picked]))
            results.append(result)
    timings = {name: timing(outs) for name, outs in compared}
    mine = compared[-1][1]
    overlap = sum(r["ID"] in g.get("example_ids", []) for r, g in zip(rows, mine))
    return {"rows": results, "timing": timings, "k": k, "placement": placement, "self_examples": overlap,
            "fold_seed": FOLD_SEED, "methods": [name for name, _ in compared]}


def _crossfit_table(results: list[dict]) -> list[str]:
    def cell(r: dict, key: str, fmt: str) -> str:
        return fmt.format(r[key]) if r.get(key) is not None else "–"

    lines = ["| method, rows | n | SARI | SARI (changed) | FKGL out | safety pass | faithfulness pass | "
             "re-run (threshold) | TTFT P50 / P95 (ms) | E2E P50 / P95 (ms) | prompt tokens (mean) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(" | ".join([
            f"| {r['system']}", str(r["n"]), cell(r, "sari", "{:.1f}"), cell(r, "sari_changed", "{:.1f}"),
            cell(r, "fkgl", "{:.1f}"), cell(r, "safety_pass_pct", "{:.1f} %"),
            cell(r, "faithfulness_pass_pct", "{:.1f} %"),
            f"{cell(r, 'rerun_pct', '{:.1f} %')} ({cell(r, 'threshold', '{:.3f}')})",
            f"{cell(r, 'ttft_p50', '{:.0f}')} / {cell(r, 'ttft_p95', '{:.0f}')}"
            + (f" (of {r['timed_n']})" if 0 < r.get("timed_n", 0) < r["n"] else ""),
            f"{cell(r, 'e2e_p50', '{:.0f}')} / {cell(r, 'e2e_p95', '{:.0f}')}",
            cell(r, "prompt_tokens_mean", "{:.0f}")]) + " |")
    return lines


def _crossfit_lines(report: dict) -> list[str]:
    section = report.get("crossfit")
    if not section:
        return []
    if not section["rows"]:  # a tuning run: the retrieval method alone
        t = section["timing"]["retrieved"]
        return ["", f"Timing of the {t['timed_n']} generated rows: TTFT P50 {t['ttft_p50']} ms, P95 "
                    f"{t['ttft_p95']} ms; E2E P50 {t['e2e_p50']} ms, P95 {t['e2e_p95']} ms; prompt tokens mean "
                    f"{t['prompt_tokens_mean']}."]
    today = section["timing"][section["methods"][0]]
    timing_lines = []
    for name in section["methods"][1:]:
        t = section["timing"][name]
        if t["prompt_tokens_mean"] is None or today["prompt_tokens_mean"] is None:
            continue
        timing_lines.append(f"* {name}: {t['prompt_tokens_mean'] - today['prompt_tokens_mean']:+.0f} prompt tokens "
                            f"per request on average (mean {t['prompt_tokens_mean']:.0f}); TTFT P50 "
                            f"{today['ttft_p50']} → {t['ttft_p50']} ms, P95 {today['ttft_p95']} → {t['ttft_p95']} ms.")
    return [
        "", "## Retrieved examples, cross-fitted (laymaker-dev)", "",
        "Split once (`inference.examples.crossfit_folds`, seed "
        f"{section['fold_seed']}) into halves A and B over all 250 IDs; each row of A got its examples "
        "from the changed rows of B and vice versa, so no row was scored with a pool it is in (rows whose own "
        f"ID was among their examples, last method: {section['self_examples']}). Cluster prefixes: each half "
        "pool cut into k-means clusters, a sentence gets its cluster's fixed examples as turns after the "
        "system message (a prefix the engine caches per cluster). Same engine, model, greedy decoding and "
        "token limit as above; one request at a time. Re-run: each method at the gate's threshold for its "
        "own prompt version, or a failed safety or faithfulness check. TTFT: request sent to first text; "
        "E2E: to the last token; per sentence, as generated on the shared 2-core machine (see the README's "
        "latency figures for the product through `make run`).", "",
        *_crossfit_table(section["rows"]), "",
        "Prefill added per request against today's prompt:", "",
        *(timing_lines or ["* today's cached rows carry no timing; run with `--timing` to measure them."]),
    ]


def _table(results: list[dict]) -> list[str]:
    def cell(r: dict, key: str, fmt: str) -> str:
        return fmt.format(r[key]) if r.get(key) is not None else "–"

    lines = ["| system | n | SARI | SARI (changed only) | FKGL out | safety pass | faithfulness pass | "
             "low confidence | re-run |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(" | ".join([
            f"| {r['system']}", str(r["n"]), cell(r, "sari", "{:.1f}"), cell(r, "sari_changed", "{:.1f}"),
            cell(r, "fkgl", "{:.1f}"), cell(r, "safety_pass_pct", "{:.1f} %"),
            cell(r, "faithfulness_pass_pct", "{:.1f} %"), cell(r, "low_confidence_pct", "{:.1f} %"), cell(r, "rerun_pct", "{:.1f} %")]) + " |")
    return lines


def render(report: dict) -> str:
    """The Markdown report."""
    ours = report["laymaker"][0]
    lines = [
        "# Quality benchmark", "",
        f"Command: `{report['command'].strip()}`. Engine: {report['engine'].get('engine')}, "
        f"`{Path(report['engine'].get('model') or '-').name}` {report['engine'].get('precision', '')}, "
        "greedy, prompt "
        f"{report['engine'].get('prompt_version', '')} of `inference/prompts.py` (grade 6, English). SARI (Xu et al. 2016, `bench/sari.py`) ×100 against "
        "the clinicians' reference, lower-cased regex tokens; FKGL mean per output (textstat); safety: "
        "`clinical/quality/safety.py`; re-run: confidence < "
        f"{report['threshold']} (the gate's threshold for this model and prompt, clinical/quality/gate.py) or a "
        "failed safety or faithfulness check (the product's gate).", "",
        f"## laymaker-dev ({report['laymaker_n']} sentences, {report['laymaker_changed_n']} changed by the "
        "clinicians)", "",
        "System columns in the CSV: " + ", ".join(f"`{c}`" for c in report["laymaker_system_columns"]) +
        f" ({len(report['laymaker_system_columns'])}; the data's README says six, the file has these).", "",
        *_table(report["laymaker"]), "",
        f"Input FKGL (mean): {ours['input_fkgl']}. Missing safety items, this system: {ours['missing_by_kind']}. "
        f"Faithfulness flags, this system: {ours.get('faithfulness_flags_by_kind', {})}.",
        *_crossfit_lines(report),
    ]
    if report["cochrane"]:
        complete = report["cochrane_n"] == report["cochrane_total"]
        heading = (f"all {report['cochrane_total']}" if complete
                   else f"first {report['cochrane_n']} of {report['cochrane_total']}")
        lines += ["", f"## Cochrane val ({heading} abstracts)", "",
                  ("" if complete else "A subset, the rest still being generated (`--resume` and `--shard` "
                   "carry on from the cache): ") +
                  f"{'Each' if complete else 'each'} abstract took a median "
                  f"{report['cochrane_ms_median'] / 1000:.0f} s here "
                  "(about 450 input tokens, up to 256 output tokens, on a 2-core machine shared with other "
                  "jobs; the later ones in two 1-thread processes at once, `--shard`). The reference is "
                  "the review's plain-language summary, written from the whole review rather than as a rewrite "
                  "of the abstract, so SARI and the safety check compare loosely related texts.", "",
                  *_table(report["cochrane"]), "",
                  f"Input FKGL (mean): {report['cochrane'][0]['input_fkgl']}. Missing safety items, this "
                  f"system: {report['cochrane'][0]['missing_by_kind']}."]
    lines += ["", f"Generation: {report['generation_s_sum']} s summed over inputs, median "
                  f"{report['generation_ms_median']} ms per input, one request at a time per process "
                  f"({report['engine'].get('cached_rows', 0)} outputs reused from the cache of earlier runs).", "", *notes(report), ""]
    return "\n".join(lines)


def notes(report: dict) -> list[str]:
    """How to read the table, with this run's figures."""
    ours = report["laymaker"][0]
    by_name = {r["system"]: r for r in report["laymaker"]}
    identity = by_name.get("identity (input copied)", {})
    reference = by_name.get("REFERENCE (clinicians)", {})
    return [
        "## Reading the table", "",
        f"* **Re-run rate (laymaker-dev).** {ours.get('rerun_pct')} % of outputs would be re-run in full precision; "
        f"{ours.get('low_confidence_pct')} % fall below the confidence threshold alone (median confidence "
        f"{ours.get('confidence_median')}), {ours.get('rerun_safety_only_pct')} % are re-run only because the "
        f"safety check failed. The threshold ({report['threshold']}) is the one calibrated for this model and "
        "prompt by `python -m bench gate_calibrate` (the design's 0.85 re-runs nearly everything on a 1.5B "
        "model: docs/decisions/confidence-gate.md); the checks are the part of the gate that point at a "
        "concrete problem.",
        f"* **SARI** rewards changes that agree with the one clinician reference. Copying the input scores "
        f"{identity.get('sari')} (no additions or deletions, only keeps); the reference against itself scores "
        f"{reference.get('sari')}, not 100, because SARI also scores what was kept from the input. "
        f"{report['laymaker_n'] - report['laymaker_changed_n']} of {report['laymaker_n']} references are "
        "the input unchanged; the 'changed only' column leaves those out. Systems that copy most of the "
        "input (the published columns often do) get high keep scores; a free rewrite with few shared "
        "n-grams scores low even when it is correct.",
        "* **FKGL** of one-sentence outputs is noisy, and textstat counts sentences at every full stop "
        "(decimals and abbreviations included), which lowers the grade of number-dense Cochrane text.",
        f"* **Safety pass** counts outputs in which every number with its unit, dose, drug, side and "
        "negation of the input is present and every medical term is kept or explained by a plain word for "
        "one of its parts (clinical/quality/safety.py, clinical/quality/terms.py). Outputs that copy the "
        f"input pass by construction; the clinicians' references pass {reference.get('safety_pass_pct')} %, "
        "because they drop grades and scores such as '1+', rewrite negations into words the check does not "
        "pair, or misspell or loosely render a term ('dizzyness', 'removal' for a blepharoplasty: "
        "docs/decisions/term-kind.md; the limits are in docs/safety-check.md). A pass is not a correctness "
        "check.",
        *_cochrane_notes(report),
    ]


def _cochrane_notes(report: dict) -> list[str]:
    """How the gate behaves on the long Cochrane abstracts (none without them)."""
    if not report["cochrane"]:
        return []
    ours, reference = report["cochrane"][0], report["cochrane"][1]
    missing = ours.get("missing_by_kind") or {}
    per_output = sum(missing.values()) / ours["n"] if ours["n"] else 0
    return [
        f"* **Cochrane abstracts.** {ours.get('rerun_pct')} % would be re-run: "
        f"{ours.get('low_confidence_pct')} % below the confidence threshold, "
        f"{ours.get('rerun_safety_only_pct')} % only because the safety check failed. The check passes "
        f"{ours.get('safety_pass_pct')} % of outputs, a mean {per_output:.1f} missing items each "
        f"({missing.get('number', 0)} of the {sum(missing.values())} are bare numbers: effect sizes, "
        "confidence intervals, participant counts). A plain summary of a results-dense abstract leaves "
        "most of its figures out by design: the published plain-language summaries pass "
        f"{reference.get('safety_pass_pct')} %. On text this long the rule 'every number of the input "
        "is in the output' re-runs nearly everything and the clinician must read the list of what is "
        "missing; it fits the bedside diagnosis sentences it was written for.",
    ]


if __name__ == "__main__":
    raise SystemExit(main())
