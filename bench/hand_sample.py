"""The hand-judged sample (docs/quality/hand-judged.md): 40 changed
laymaker-dev sentences drawn by a fixed seed, 20 from each cross-fit half,
with today's output and the retrieval method's output side by side for a
person to mark correct / lossy / wrong.

    .venv/bin/python -m bench hand_sample > /tmp/sample.md

Reads the committed output caches (``docs/quality/quality-report-outputs.jsonl``
and ``...-examples-outputs.jsonl``); the judgements are written by hand.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from bench.quality import laymaker_rows
from inference.examples import crossfit_folds, normalise

SEED = 40
PER_FOLD = 20


def sample_ids(seed: int = SEED, per_fold: int = PER_FOLD) -> list[tuple[str, str]]:
    """``[(fold, ID)]``: ``per_fold`` changed rows from each half, drawn by
    ``random.Random(seed)`` from the sorted IDs, in ID order per fold."""
    rows, _ = laymaker_rows()
    half_a, _ = crossfit_folds(r["ID"] for r in rows)
    changed = sorted((r["ID"] for r in rows if normalise(r["ORIGINAL"]) != normalise(r["REFERENCE"])), key=int)
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


def main(argv: list[str] | None = None) -> int:
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


if __name__ == "__main__":
    raise SystemExit(main())
