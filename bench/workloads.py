"""The latency benchmark's inputs: real clinical text from ``../shared/data``.

* ``short``: bedside sentences, the ``ORIGINAL`` column of
  ``laymaker-dev.csv`` (MTSamples, CC BY 4.0);
* ``long``: Cochrane review abstracts from ``cochrane-val.source``
  (Devaraj et al. 2021, CC BY 4.0) of 280-340 words, about 450 tokens.

Every driver sends the same texts inside the product's own prompt
(:func:`inference.prompts.build_messages`), the full stack builds it itself.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from bench.shared_data import shared_data_file

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Workload:
    """One kind of request.

    Attributes:
        name: ``short`` or ``long``.
        texts: the clinician texts, used round-robin.
        max_tokens: output cap (tokens).
        ignore_eos: generate exactly ``max_tokens`` (fixed output length).
    """

    name: str
    texts: tuple[str, ...]
    max_tokens: int
    ignore_eos: bool = True


def short_texts(n: int) -> list[str]:
    """The first ``n`` laymaker-dev sentences with at least 6 words."""
    with open(shared_data_file("laymaker-dev.csv"), newline="", encoding="utf-8") as handle:
        rows = [row["ORIGINAL"].strip() for row in csv.DictReader(handle)]
    return [text for text in rows if len(text.split()) >= 6][:n]


def long_texts(n: int, min_words: int = 280, max_words: int = 340) -> list[str]:
    """The first ``n`` Cochrane abstracts of ``min_words``..``max_words``
    words (about 450 SmolLM2 tokens)."""
    with open(shared_data_file("cochrane-val.source"), encoding="utf-8") as handle:
        lines = [line.strip() for line in handle]
    return [text for text in lines if min_words <= len(text.split()) <= max_words][:n]
