"""``python -m bench unseen_sample``: sentences the product has never seen,
posted to a running stack as an EHR would, and read back as the patient
gets them.

Every laymaker-dev row has been read while the checks' rules were written,
and Laymaker's test set is held back, so the one other clinical text here,
the Cochrane validation abstracts (``cochrane-val.source``, research prose),
is the honest sample of unseen sentences. Three steps:

* ``draw``: ``--n`` sentences, one per abstract. The abstracts' indices
  (0-based line numbers; the first line is left out, as the product has
  seen it) are shuffled by ``--seed``; each abstract is split by
  the product's splitter (:func:`inference.examples.split_sentences`) and
  one sentence of 8 to 35 words (``str.split``) is drawn by the same
  generator; abstracts with none are skipped. ``--skip N`` leaves out the
  first ``N`` drawn, so a second sample of the same seed shares no
  abstract with the first. Seed 2911 without ``--skip`` gives sample 1
  (docs/quality/unseen-cochrane-sample.jsonl) row for row; ``--skip 40``
  sample 2 and ``--skip 80`` sample 3.
* ``draw --source laymaker-dev --language es``: the Spanish sample,
  ``--n`` laymaker-dev sentences (``ORIGINAL``) that hold a medical term
  HPO has an official Spanish label for
  (:func:`inference.lay_terms.spanish_terms`), shuffled by ``--seed``; each
  row carries ``"language": "es"``. The product's Spanish prompt uses one
  fixed example and no laymaker-dev row, so no row of the sample served
  the prompt. Seed 2911 with ``--n 20`` gives docs/quality/spanish-sample.jsonl.
* ``post``: each row without a ``delivered`` text is sent to
  ``POST /api/v1/translations/`` (in the row's ``language``, default English) (``Authorization: Bearer``; the 201 carries
  the fast text) and its ``GET`` polled, ``Retry-After`` apart, until the
  verification is final (``not_needed``, ``verified`` or ``failed``); the
  row gets ``fast``, ``delivered`` (the GET's ``text``: what the patient
  reads), ``verification``, ``rerun_reason``, ``self_check``, ``safety``,
  ``faithfulness`` and ``seconds`` (POST to final, wall clock). The file is
  rewritten after each row, so a stopped run carries on where it was.
* ``report``: the verdicts a reader wrote into the rows (``verdict``:
  ``correct``, ``lossy`` or ``wrong``; ``reason``) counted, as Markdown.

No reference rewrite exists for these sentences, so no SARI.

    .venv/bin/python -m bench unseen_sample draw --seed 2911 --skip 40 --out docs/quality/unseen-cochrane-sample-2.jsonl
    .venv/bin/python -m bench unseen_sample post --url http://127.0.0.1:8765 --token "$TOKEN" \\
        docs/quality/unseen-cochrane-sample-2.jsonl
    .venv/bin/python -m bench unseen_sample report docs/quality/unseen-cochrane-sample-2.jsonl
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import time
from collections import Counter
from pathlib import Path

from bench.corpora import corpus_file

#: Words per drawn sentence (``str.split``), inclusive: long enough to say
#: something, short enough to read as one bedside sentence.
MIN_WORDS, MAX_WORDS = 8, 35
#: Verifications after which a translation's text no longer changes.
FINAL_VERIFICATIONS = ("not_needed", "verified", "failed")
VERDICTS = ("correct", "lossy", "wrong")


def sentences_draw(abstracts: list[str], *, n: int, seed: int, skip: int = 0) -> list[dict]:
    """``n`` sentences, one per abstract, as rows ``{"n", "line", "input"}``
    (``line``: the abstract's 0-based index in ``abstracts``; ``n`` counts
    from ``skip``); see the module docstring for the draw.

    Raises:
        ValueError: fewer than ``skip + n`` abstracts have a sentence of
            ``MIN_WORDS``..``MAX_WORDS`` words.
    """
    from inference.examples import split_sentences

    rng = random.Random(seed)
    order = list(range(1, len(abstracts)))
    rng.shuffle(order)
    drawn: list[dict] = []
    for index in order:
        fitting = [s for s in split_sentences(abstracts[index]) if MIN_WORDS <= len(s.split()) <= MAX_WORDS]
        if not fitting:
            continue
        drawn.append({"n": len(drawn), "line": index, "input": rng.choice(fitting)})
        if len(drawn) == skip + n:
            return drawn[skip:]
    raise ValueError(f"only {len(drawn)} abstracts have a sentence of {MIN_WORDS}-{MAX_WORDS} words")


def laymaker_spanish_draw(rows: list[dict], *, n: int, seed: int) -> list[dict]:
    """``n`` laymaker-dev rows (``{"ID", "ORIGINAL", ...}``) that hold a term
    with an HPO Spanish label, as rows ``{"n", "line", "input", "language":
    "es"}`` (``line``: the row's ``ID``), in an order shuffled by ``seed``.

    Raises:
        ValueError: fewer than ``n`` rows hold such a term.
    """
    from inference.lay_terms import spanish_terms

    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    drawn = [rows[i] for i in order if spanish_terms(rows[i]["ORIGINAL"])][:n]
    if len(drawn) < n:
        raise ValueError(f"only {len(drawn)} laymaker-dev rows hold a term with a Spanish label")
    return [{"n": k, "line": int(row["ID"]), "input": row["ORIGINAL"].strip(), "language": "es"}
            for k, row in enumerate(drawn)]


def rows_read(path: Path) -> list[dict]:
    """The JSON lines of ``path``."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def rows_write(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` as JSON lines (whole file, then renamed into place)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    tmp.replace(path)


def translation_post(client, text: str, *, language: str = "en", poll_s: float = 2.0,
                     timeout_s: float = 900.0) -> dict:
    """POST ``text`` for output in ``language`` (``client``: an ``httpx.Client`` with the base URL and
    the bearer token) and poll its GET until the verification is final.

    Returns:
        The last GET's body with ``seconds`` (POST to final) added.

    Raises:
        RuntimeError: the POST was refused (its status and body) or the
            verification was not final after ``timeout_s``.
    """
    started = time.monotonic()
    answer = client.post("/api/v1/translations/", json={"text": text, "language": language})
    if answer.status_code != 201:
        raise RuntimeError(f"POST answered {answer.status_code}: {answer.text[:300]}")
    body, location = answer.json(), answer.headers["Location"]
    while body.get("status") == "pending" or body.get("verification") not in FINAL_VERIFICATIONS:
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"verification still {body.get('verification')} after {timeout_s:.0f} s")
        time.sleep(float(answer.headers.get("Retry-After", poll_s)))
        answer = client.get(location)
        if answer.status_code == 429:
            continue
        answer.raise_for_status()
        body = answer.json()
    body["seconds"] = round(time.monotonic() - started, 1)
    return body


def row_update(row: dict, body: dict) -> dict:
    """``row`` with what the patient reads and why, from a final GET body."""
    row.update({"fast": body["fast_text"], "delivered": body["text"], "verification": body["verification"],
                "rerun_reason": body.get("rerun_reason", ""), "self_check": body.get("self_check"),
                "safety": body.get("safety"), "faithfulness": body.get("faithfulness"),
                "seconds": body["seconds"]})
    return row


def verdicts_count(rows: list[dict]) -> Counter:
    """Rows per verdict (``"unjudged"`` for a row without one)."""
    return Counter(row.get("verdict") if row.get("verdict") in VERDICTS else "unjudged" for row in rows)


def render(rows: list[dict]) -> str:
    """Markdown: the verdict counts, then every row."""
    counts = verdicts_count(rows)
    lines = [", ".join(f"**{counts[v]} {v}**" for v in VERDICTS)
             + (f", {counts['unjudged']} not judged" if counts["unjudged"] else "")
             + f" of {len(rows)}; the gate re-ran "
             + f"{sum(1 for r in rows if r.get('verification') in ('verified', 'failed'))}.",
             "", "| n | line | input | delivered (fast text where it differs) | gate | verdict | why |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        shown = row.get("delivered", "")
        if row.get("fast") and row.get("fast") != shown:
            shown += f" (fast: {row['fast']})"
        gate = f"re-run ({row['rerun_reason']})" if row.get("rerun_reason") else "passed"
        if (row.get("self_check") or {}).get("p_yes") is not None:
            gate += f", P(yes) {row['self_check']['p_yes']:.2f}"
        cells = [str(row["n"]), str(row["line"]), row["input"], shown, gate,
                 row.get("verdict", ""), row.get("reason", "")]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench unseen_sample", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    draw = sub.add_parser("draw", help="draw sentences from cochrane-val.source (or laymaker-dev, in Spanish)")
    draw.add_argument("--n", type=int, default=40)
    draw.add_argument("--seed", type=int, default=2911)
    draw.add_argument("--skip", type=int, default=0, help="leave out the first N drawn (an earlier sample)")
    draw.add_argument("--source", choices=("cochrane", "laymaker-dev"), default="cochrane")
    draw.add_argument("--language", choices=("en", "es"), default="en",
                      help="with --source laymaker-dev: es (terms with a Spanish label)")
    draw.add_argument("--out", required=True)
    post = sub.add_parser("post", help="post each row to a running stack and read it back")
    post.add_argument("rows")
    post.add_argument("--url", default="http://127.0.0.1:8000")
    post.add_argument("--token", required=True, help="an API client's token with the translate and read scopes")
    report = sub.add_parser("report", help="the verdicts as Markdown")
    report.add_argument("rows")
    args = parser.parse_args(argv)
    if args.command == "draw" and args.source == "laymaker-dev":
        if args.language != "es":
            parser.error("--source laymaker-dev draws the Spanish sample: give --language es")
        with open(corpus_file("laymaker-dev.csv"), newline="", encoding="utf-8") as handle:
            rows = laymaker_spanish_draw(list(csv.DictReader(handle)), n=args.n, seed=args.seed)
        rows_write(Path(args.out), rows)
        print(f"{len(rows)} sentences written to {args.out}")
    elif args.command == "draw":
        abstracts = corpus_file("cochrane-val.source").read_text(encoding="utf-8").splitlines()
        rows = sentences_draw(abstracts, n=args.n, seed=args.seed, skip=args.skip)
        rows_write(Path(args.out), rows)
        print(f"{len(rows)} sentences written to {args.out}")
    elif args.command == "post":
        import httpx

        path = Path(args.rows)
        rows = rows_read(path)
        with httpx.Client(base_url=args.url, headers={"Authorization": f"Bearer {args.token}"},
                          timeout=300.0) as client:
            for row in rows:
                if "delivered" in row:
                    continue
                row_update(row, translation_post(client, row["input"], language=row.get("language", "en")))
                rows_write(path, rows)
                print(f"[{row['n']}] {row['verification']} {row['seconds']} s", flush=True)
    else:
        print(render(rows_read(Path(args.rows))), end="")
    return 0
