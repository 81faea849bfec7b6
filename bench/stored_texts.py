"""Reports over the stored texts (the committed output caches of ``bench
quality``, the corpora), no model run: three commands.

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
threshold, :data:`REPLAY_THRESHOLD`), as a Markdown table with empty verdict cells.
``--third`` draws a third 40 the same way (seed :data:`THIRD_SEED`, none of
the first two samples': rules were written from rows of the second too),
and ``--sample 4`` a fourth (:data:`FOURTH_SEED`, none of the first 120:
rules were written from rows of the third). ``--rest``: the changed rows
in none of the four (15: the four samples took 160 of the 175).
``--unchanged``: the rows the clinicians left as written (75), which the
product may still change, and so damage: judged for what a text adds or
changes, since the input was plain already.

``python -m bench unexplained_terms``: the share of delivered texts
(laymaker-dev: the re-run lane's text where the row was re-run, else the
cross-fitted fast text; the unseen Cochrane samples' delivered texts) that
keep a medical term or clinical abbreviation with no plain explanation next
to it (:func:`unexplained_terms`), with Wilson 95 % intervals, the most
frequent such terms, and a seeded sample of 40 hits and 20 clean texts
with their hand verdicts (``docs/quality/unexplained-terms-judged.json``).

    .venv/bin/python -m bench unexplained_terms [--out docs/quality/unexplained-terms]

writes ``<out>.md`` and ``<out>.json`` and prints the Markdown.
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
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
#: The cluster variant of the stored re-run records (12 x 8, k 0, headings copied).
RERUN_VARIANT = [12, 8, 0, "h"]


#: The confidence gate's threshold the stored re-run replay was made at
#: (``docs/quality/rerun-fix-rows.jsonl``: every gated row's candidates
#: replayed, 62 rows); its texts are the stored "as delivered" texts. The
#: shipped gate's threshold, 0.4823, is calibrated with the safety check's
#: ``lay_term`` kind (42 failing rows, 25 without it;
#: docs/decisions/vetted-lay-terms.md), so the replay is read at its own.
REPLAY_THRESHOLD = 0.5539


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
    return rerun_records(path, variant=RERUN_VARIANT, threshold=REPLAY_THRESHOLD)


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


# -- unexplained_terms --------------------------------------------------------------
#: All-caps words of 2 to 6 letters that a lay reader knows without a gloss:
#: the infections, tests and wards patients meet in the news and on signs
#: (HIV, AIDS, DNA, CT, MRI, ICU, ER), countries and common English
#: shorthand (UK, US, USA, TV, OK, ID). Everything else of that shape is an
#: abbreviation to explain (STEMI, BPD, HCV, COPD, RR, CI).
KNOWN_ABBREVIATIONS = frozenset({"HIV", "AIDS", "DNA", "CT", "MRI", "ICU", "ER", "UK", "US", "USA", "TV", "OK", "ID",
                                 "COVID", "UN", "EU", "AM", "PM"})
#: Health words of everyday English that a grade-6 reader knows though they
#: are not on the Dale-Chall easy list: a term made only of these and easy
#: words is not counted ("nausea", "wrist pain", "headaches").
LAY_WORDS = frozenset("""
allergy allergies allergic arthritis asthma cancer cataract cataracts chronic constipation depression diabetes
diarrhea diarrhoea exam fatigue flu headache headaches infection joint joints migraine nausea overweight
pregnancy pregnant snoring spinning stroke social system tumor tumors tumour tumours vomiting wrist anxiety
weight visual history physical
""".split())
_ABBREVIATION = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2,6}(?:s)?(?![A-Za-z0-9])")
#: An all-caps word next to another all-caps word of four letters or more is
#: part of a section heading ("CENTRAL NERVOUS SYSTEM :"), not an abbreviation.
_HEADING = re.compile(r"[A-Z]{4,}\s+$")
_HEADING_AFTER = re.compile(r"\s+[A-Z]{4,}(?![A-Za-z])")
#: Roman numerals (type II, stage III) are not abbreviations.
_ROMAN = re.compile(r"[IVX]+")
#: What follows a term and explains it: a parenthesis, an apposition (a
#: comma or dash and then "a", "an", "the", "which", "that", "meaning",
#: "or", "also", "i.e."), or "which means", "means", "meaning", "is a",
#: "refers to" directly after it.
_GLOSS_AFTER = re.compile(r"\s*(?:\(|[,:;]\s*(?:a|an|the|which|that|meaning|or|also|i\.e\.|also called)\b"
                          r"|\s*(?:--?|\u2013|\u2014)\s*\w|\s+(?:which|that)\s+(?:means?|is|are)\b"
                          r"|\s+(?:means?|meaning|is\s+an?|are|refers?\s+to|or)\b)", re.IGNORECASE)
#: What precedes a term and introduces it as a name: "called", "known as",
#: "named", "termed", "(" (the term glosses the plain words before it:
#: "a heart attack (STEMI)").
_GLOSS_BEFORE = re.compile(r"(?:\bcalled|\bknown\s+as|\bnamed|\btermed|\bso-called|\()\s*[\"'\u201c\u2018]?$",
                           re.IGNORECASE)
UNEXPLAINED_SEED = 4040
UNEXPLAINED_SAMPLE = 40
CLEAN_SAMPLE = 20


@dataclass(frozen=True)
class Unexplained:
    """One term or abbreviation left unexplained in a text: ``term`` as
    written, ``kind`` ``"term"`` (medical word or HPO term) or
    ``"abbreviation"``, and its character offsets ``start``/``end``."""

    term: str
    kind: str
    start: int
    end: int


def _explained(text: str, start: int, end: int) -> bool:
    """The term at ``text[start:end]`` has a plain explanation next to it
    (:data:`_GLOSS_AFTER` right after it, :data:`_GLOSS_BEFORE` right before it)."""
    before = _GLOSS_BEFORE.search(text[max(0, start - 20):start])
    if before and before.group(0).startswith("("):
        return bool(re.match(r"\s*\)", text[end:]))  # "(STEMI)", not "(RR 0.43, 95 % CI ...)"
    return bool(before) or bool(_GLOSS_AFTER.match(text, end))


def unexplained_terms(text: str) -> list[Unexplained]:
    """The medical terms and clinical abbreviations of ``text`` that have no
    plain explanation next to them, in text order, each once (by lower-case
    form).

    A **term** is a word of :func:`clinical.quality.terms.input_terms` (at
    least five letters, not a Dale-Chall easy word, built on a medical word
    part or a one-word HPO term with a layperson synonym) or a word span of
    :func:`inference.lay_terms.find_terms` (any HPO term not made of easy
    words only: "pleural effusion", "tricuspid regurgitation"). An
    **abbreviation** is an all-caps word of 2 to 6 letters (an ``s`` plural
    allowed) that is not in :data:`KNOWN_ABBREVIATIONS`, not a Roman numeral,
    not a Dale-Chall easy word or word of :data:`LAY_WORDS` in capitals
    ("BACK", "SYSTEM"), and not next to another all-caps word of four
    letters or more (a section heading: "CENTRAL NERVOUS SYSTEM :"). A term made
    only of easy words and :data:`LAY_WORDS` is not counted. Either is
    **explained** when a parenthesis or apposition follows it, or "which
    means", "means", "is a", "or" (:data:`_GLOSS_AFTER`), or when "called",
    "known as" precedes it or it stands alone in parentheses after the plain
    words it names ("a heart attack (STEMI)", :data:`_GLOSS_BEFORE`). An
    easy word in capitals followed by a number is an abbreviation ("OR 0.61").

    Returns:
        ``[Unexplained]``; empty for a clean text.
    """
    from clinical.quality.terms import input_terms
    from inference.lay_terms import easy_word, find_terms

    def hard(surface: str) -> bool:
        return any(not easy_word(w, ("s", "es", "ed", "d", "ing", "ly", "er", "ness")) and w not in LAY_WORDS
                   for w in re.findall(r"[a-z]+", surface.lower()))

    spans: list[tuple[int, int, str]] = [(t.start, t.end, "term") for t in input_terms(text) if hard(t.word)]
    for start, surface, _ in find_terms(text):
        if hard(surface):
            spans.append((start, start + len(surface), "term"))
    for m in _ABBREVIATION.finditer(text):
        word = m.group(0).rstrip("s") if m.group(0)[-1] == "s" else m.group(0)
        if (word in KNOWN_ABBREVIATIONS or _ROMAN.fullmatch(word)
                or (not hard(word) and not re.match(r"\s*\d", text[m.end():]))  # "OR 0.61" is odds ratio
                or _HEADING.search(text[max(0, m.start() - 12):m.start()])
                or _HEADING_AFTER.match(text, m.end())):
            continue
        spans.append((m.start(), m.end(), "abbreviation"))
    # a span inside a longer one is part of it ("effusion" of "pleural effusion")
    spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
    found: list[Unexplained] = []
    seen: set[str] = set()
    covered_to = -1
    for start, end, kind in spans:
        if end <= covered_to:
            continue
        covered_to = max(covered_to, end)
        surface = text[start:end]
        if surface.lower() in seen or _explained(text, start, end):
            continue
        seen.add(surface.lower())
        found.append(Unexplained(surface, kind, start, end))
    return found


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval ``(low, high)`` for ``k`` successes in ``n``
    trials (95 % for the default ``z``); ``(0.0, 1.0)`` for ``n == 0``."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def delivered_texts() -> dict[str, list[tuple[str, str]]]:
    """The stored delivered texts by set, ``{set name: [(row key, text)]}``:
    ``laymaker-dev`` (250 rows: the re-run lane's text of
    ``docs/quality/rerun-fix-rows.jsonl`` at the calibrated threshold where
    the row was re-run, else the cross-fitted fast text of
    ``docs/quality/quality-report-examples-outputs.jsonl``, prompt
    :data:`CLUSTER_VERSION`) and each unseen Cochrane sample's ``delivered``
    texts (``docs/quality/unseen-cochrane-sample*.jsonl``)."""
    fast = laymaker_outputs(Path(DEFAULT_OUTPUTS), CLUSTER_VERSION)
    reruns = _delivered(Path("docs/quality/rerun-fix-rows.jsonl"))
    sets = {"laymaker-dev": [(f"laymaker-{i}", reruns[i]["text"] if i in reruns else fast[i])
                             for i in sorted(fast, key=int)]}
    for path in sorted(Path("docs/quality").glob("unseen-cochrane-sample*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        sets[path.stem] = [(f"{path.stem}:{row['n']}", row["delivered"]) for row in rows]
    return sets


JUDGED = Path("docs/quality/unexplained-terms-judged.json")


def _judged(path: Path) -> dict[str, list]:
    """Hand verdicts, ``{"<row key>|<term>": [verdict, why]}`` (verdict
    ``"yes"``/``"no"`` for a hit: truly unexplained for a lay reader; for a
    clean text ``"<row key>|"``: ``"clean"`` or ``"missed: <term>"``)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def unexplained_terms_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench unexplained_terms",
                                     description="Share of delivered texts that keep a medical term or "
                                                 "abbreviation unexplained.")
    parser.add_argument("--out", default="docs/quality/unexplained-terms")
    parser.add_argument("--judged", default=str(JUDGED), help="hand verdicts of the sample (JSON)")
    parser.add_argument("--top", type=int, default=15, help="most frequent terms listed per set")
    args = parser.parse_args(argv)
    sets = delivered_texts()
    judged = _judged(Path(args.judged))
    reruns = len(_delivered(Path("docs/quality/rerun-fix-rows.jsonl")))
    summary: dict = {"laymaker_reruns": reruns,
                     "definition": inspect.cleandoc(unexplained_terms.__doc__.split("Returns:")[0]),
                     "known_abbreviations": sorted(KNOWN_ABBREVIATIONS), "lay_words": sorted(LAY_WORDS), "sets": {}}
    hits: list[tuple[str, Unexplained, str]] = []
    clean: list[tuple[str, str]] = []
    overall: Counter = Counter()
    for name, texts in sets.items():
        counts: Counter = Counter()
        flagged = []
        for key, text in texts:
            found = unexplained_terms(text)
            if found:
                flagged.append({"key": key, "terms": [u.term for u in found], "text": text})
                hits += [(key, u, text) for u in found]
            else:
                clean.append((key, text))
            counts.update(u.term.lower() for u in found)
        overall.update(counts)
        low, high = wilson(len(flagged), len(texts))
        summary["sets"][name] = {"n": len(texts), "with_unexplained": len(flagged),
                                 "share": round(len(flagged) / len(texts), 4), "wilson95": [round(low, 4),
                                                                                            round(high, 4)],
                                 "top_terms": counts.most_common(args.top), "flagged": flagged}
    rng = random.Random(UNEXPLAINED_SEED)
    sample = rng.sample(hits, min(UNEXPLAINED_SAMPLE, len(hits)))
    clean_sample = rng.sample(clean, min(CLEAN_SAMPLE, len(clean)))
    verdicts = [judged.get(f"{key}|{u.term}") for key, u, _ in sample]
    yes = sum(1 for v in verdicts if v and v[0] == "yes")
    judged_n = sum(1 for v in verdicts if v)
    clean_verdicts = [judged.get(f"{key}|") for key, _ in clean_sample]
    missed = sum(1 for v in clean_verdicts if v and v[0].startswith("missed"))
    clean_n = sum(1 for v in clean_verdicts if v)
    summary["overall_top_terms"] = overall.most_common(args.top)
    summary["precision"] = {"seed": UNEXPLAINED_SEED, "judged": judged_n, "yes": yes,
                            "precision": round(yes / judged_n, 4) if judged_n else None,
                            "wilson95": [round(x, 4) for x in wilson(yes, judged_n)],
                            "sample": [{"key": key, "term": u.term, "kind": u.kind, "text": text,
                                        "verdict": v} for (key, u, text), v in zip(sample, verdicts, strict=True)]}
    summary["misses"] = {"judged": clean_n, "with_missed_term": missed,
                         "miss_rate": round(missed / clean_n, 4) if clean_n else None,
                         "wilson95": [round(x, 4) for x in wilson(missed, clean_n)],
                         "sample": [{"key": key, "text": text, "verdict": v}
                                    for (key, text), v in zip(clean_sample, clean_verdicts, strict=True)]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    markdown = _unexplained_markdown(summary)
    out.with_suffix(".md").write_text(markdown, encoding="utf-8")
    print(markdown)
    return 0


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _unexplained_markdown(summary: dict) -> str:
    lines = ["# Delivered texts that keep a medical term or abbreviation unexplained", "",
             "`.venv/bin/python -m bench unexplained_terms` (code: `bench/stored_texts.py`, "
             "`unexplained_terms`; hand verdicts: `docs/quality/unexplained-terms-judged.json`). "
             f"The texts: laymaker-dev's {summary['sets']['laymaker-dev']['n']} delivered texts (the re-run lane's text of "
             "`docs/quality/rerun-fix-rows.jsonl` at the gate's calibrated threshold for the "
             f"{summary['laymaker_reruns']} rows it re-ran, "
             "the cross-fitted fast text of `docs/quality/quality-report-examples-outputs.jsonl` for the rest, "
             "which were delivered as they are) and the `delivered` texts of the three unseen Cochrane samples "
             "(`docs/quality/unseen-cochrane-sample*.jsonl`).", "",
             "| set | n | with an unexplained term | share | Wilson 95 % |", "|---|---|---|---|---|"]
    for name, s in summary["sets"].items():
        lines.append(f"| {name} | {s['n']} | {s['with_unexplained']} | {_pct(s['share'])} | "
                     f"{_pct(s['wilson95'][0])} – {_pct(s['wilson95'][1])} |")
    lines += ["", "Most frequent unexplained terms, all sets: "
              + ", ".join(f"{t} ({n})" for t, n in summary["overall_top_terms"]) + "."]
    for name, s in summary["sets"].items():
        lines.append(f"- {name}: " + ", ".join(f"{t} ({n})" for t, n in s["top_terms"]))
    p = summary["precision"]
    lines += ["", "## The detector", "", summary["definition"], "",
              "Known abbreviations (not counted): " + ", ".join(summary["known_abbreviations"]) + ".", "",
              "Lay health words (not counted): " + ", ".join(summary["lay_words"]) + ".", "",
              f"## Precision: {p['judged']} hits judged by hand", "",
              f"Drawn with `random.Random({p['seed']})` from every (text, term) hit of all sets. "
              "Yes: a term or abbreviation that a grade-6 reader would not understand, with no plain "
              "explanation next to it. The verdicts are keyed by text and term: a change to the detector "
              "draws another sample, to be judged again. :data:`LAY_WORDS` and the heading rule are written "
              "from these same texts' hits, so on new texts the precision may be lower."]
    if p["precision"] is not None:
        lines.append(f"Precision {p['yes']}/{p['judged']} = {_pct(p['precision'])} "
                     f"(Wilson 95 % {_pct(p['wilson95'][0])} – {_pct(p['wilson95'][1])}).")
    lines += ["", "| text | term | kind | verdict | why | text |", "|---|---|---|---|---|---|"]
    for row in p["sample"]:
        verdict, why = row["verdict"] or ("", "")
        lines.append(f"| {row['key']} | {_cell(row['term'])} | {row['kind']} | {verdict} | {_cell(why)} | "
                     f"{_cell(row['text'])} |")
    m = summary["misses"]
    lines += ["", f"## Misses: {m['judged']} texts passed as clean, judged by hand", "",
              "Drawn with the same generator after the hits. A miss: a text that keeps a term a grade-6 reader "
              "would need explained which the detector does not see (drug names and multi-word terms outside "
              "HPO and the word parts are not looked for).", ""]
    if m["miss_rate"] is not None:
        lines.append(f"{m['with_missed_term']}/{m['judged']} keep a term the detector missed: "
                     f"{_pct(m['miss_rate'])} (Wilson 95 % {_pct(m['wilson95'][0])} – {_pct(m['wilson95'][1])}).")
    lines += ["", "| text | verdict | why | text |", "|---|---|---|---|"]
    for row in m["sample"]:
        verdict, why = row["verdict"] or ("", "")
        lines.append(f"| {row['key']} | {verdict} | {_cell(why)} | {_cell(row['text'])} |")
    return "\n".join(lines) + "\n"
