"""The real clinical text the tests and benchmarks read, in ``data/`` at the
top of the repository (``data/README.md`` says where each file comes from):

* ``laymaker-dev.csv``: bedside sentences (``ORIGINAL``, MTSamples) and the
  clinicians' plain rewrites (``REFERENCE``), the Laymaker corpus, CC BY 4.0;
* ``cochrane-val.source`` / ``.target``: Cochrane review abstracts and their
  plain-language summaries, one per line (Devaraj et al. 2021, CC BY 4.0).

The product never reads them at run time. The latency benchmarks' two
workloads (:class:`Workload`) are drawn from them: ``short`` laymaker-dev
sentences and ``long`` Cochrane abstracts of about 450 tokens. Every driver
sends the same texts inside the product's own prompt
(:func:`inference.prompts.build_messages`); the full stack builds it itself.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "data"


class CorpusMissing(FileNotFoundError):
    """A corpus file is not in ``data/``."""


def corpus_file(name: str) -> Path:
    """The path of ``name`` in ``data/``.

    Raises:
        CorpusMissing: the file is not there; the message is one line that
            names the path.
    """
    path = DATA_DIR / name
    if not path.is_file():
        raise CorpusMissing(
            f"corpus missing: {path} not found. The tests and benchmarks read laymaker-dev.csv and "
            f"cochrane-val.* from data/ (see data/README.md).")
    return path


@dataclass(frozen=True)
class Workload:
    """One kind of request of the latency benchmarks.

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
    with open(corpus_file("laymaker-dev.csv"), newline="", encoding="utf-8") as handle:
        rows = [row["ORIGINAL"].strip() for row in csv.DictReader(handle)]
    return [text for text in rows if len(text.split()) >= 6][:n]


def long_texts(n: int, min_words: int = 280, max_words: int = 340) -> list[str]:
    """The first ``n`` Cochrane abstracts of ``min_words``..``max_words``
    words (about 450 SmolLM2 tokens)."""
    with open(corpus_file("cochrane-val.source"), encoding="utf-8") as handle:
        lines = [line.strip() for line in handle]
    return [text for text in lines if min_words <= len(text.split()) <= max_words][:n]
