"""SARI, the text simplification metric of Xu, Napoles, Pavlick, Chen and
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

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

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
