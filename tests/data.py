"""Real clinical text from ``data/`` (:mod:`bench.corpora`)."""

from __future__ import annotations

import csv
import functools

from bench.corpora import corpus_file


@functools.cache
def laymaker_sentences() -> list[str]:
    """The ORIGINAL column of laymaker-dev.csv (250 MTSamples sentences)."""
    with open(corpus_file("laymaker-dev.csv"), newline="", encoding="utf-8") as handle:
        return [row["ORIGINAL"].strip() for row in csv.DictReader(handle)]


def diagnosis_sentence(index: int = 0) -> str:
    """A laymaker sentence that reads like a diagnosis (contains a medical term)."""
    medical = [s for s in laymaker_sentences() if any(
        w in s.lower() for w in ("diagnos", "disease", "pain", "fracture", "carcinoma", "infection", "history"))]
    return medical[index % len(medical)]
