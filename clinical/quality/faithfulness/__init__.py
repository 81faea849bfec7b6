"""Deterministic faithfulness check: what does the output state that the
input does not? The mirror of :mod:`clinical.quality.safety` (what the input
states that the output lost). Rules, rates and examples:
``docs/quality/faithfulness.md``; its examples table is run by
``tests/quality/test_faithfulness.py``.

Each flag has a ``kind`` (see :data:`KINDS`) and the offending span of the
output. Each kind's rule, vocabulary and sources are in the module that
checks it:

* ``number`` and ``unit``: a number whose value the input does not hold, a
  unit after a number that the input gives no number of
  (:mod:`clinical.quality.faithfulness.number`).
* ``drug``: a medicine the input does not name by any of its names
  (:mod:`clinical.quality.faithfulness.drug`).
* ``laterality``: a side the input does not name, or the other one
  (:mod:`clinical.quality.faithfulness.laterality`).
* ``body_site``: an organ or body part the input does not support
  (:mod:`clinical.quality.faithfulness.body_site`, over the UBERON index of
  :mod:`clinical.quality.faithfulness.anatomy`).
* ``vital_sign``: a vital sign named in the output when nothing in the
  input grounds it (:mod:`clinical.quality.vitals`).
* ``organ_function``: a claim that something fails, is damaged or does not
  work, in an output that names a body site, when the input has no word of
  lost function or harm (:mod:`clinical.quality.function_claims`).
* ``direction``: a direction of change of a measure the input does not
  state (:mod:`clinical.quality.faithfulness.direction`).
* ``negation``: polarity: negated in the output and affirmed in the input,
  the other way round, or a double negative the input does not have
  (:mod:`clinical.quality.faithfulness.negation`).
* ``person``: who is who: first person, a sex, a doer or a relative the
  input does not give (:mod:`clinical.quality.faithfulness.person`).

The flag and result types and the kinds per language are in
:mod:`clinical.quality.faithfulness.common`.

English and Spanish outputs (``language``); the input is English. For
Spanish only ``number``, ``unit``, ``laterality`` and ``person`` are
checked: the drug dictionary, the anatomy vocabulary, the vital signs'
words, the function claims, the direction words and the negation cues are
English (a Spanish output would be flagged for every organ it names), so
those kinds are skipped, not guessed.

Pure Python over dictionaries and compiled regular expressions: median
0.33-0.37 ms, P95 about 1 ms per laymaker sentence once :func:`warm` has loaded the
drug dictionary and the anatomy index (``python -m bench faithfulness_rates``).
"""

from __future__ import annotations

from clinical.quality.faithfulness.anatomy import anatomy_cache_path, anatomy_index, find_sites, prepare, uberon_path
from clinical.quality.faithfulness.body_site import site_flags
from clinical.quality.faithfulness.common import (
    KINDS,
    LANGUAGE_KINDS,
    LANGUAGES,
    FaithfulnessFlag,
    FaithfulnessResult,
)
from clinical.quality.faithfulness.direction import direction_flags
from clinical.quality.faithfulness.drug import drug_flags
from clinical.quality.faithfulness.laterality import laterality_flags
from clinical.quality.faithfulness.negation import negation_flags
from clinical.quality.faithfulness.number import number_flags
from clinical.quality.faithfulness.person import person_flags
from clinical.quality.function_claims import organ_function_spans
from clinical.quality.textnorm import normalize
from clinical.quality.vitals import vital_sign_spans

__all__ = ["KINDS", "LANGUAGES", "LANGUAGE_KINDS", "FaithfulnessFlag", "FaithfulnessResult", "anatomy_cache_path",
           "faithfulness_check", "prepare", "uberon_path", "warm"]


def faithfulness_check(source: str, output: str, *, language: str = "en") -> FaithfulnessResult:
    """Flag what ``output`` states that ``source`` does not (each kind's
    rule in its module: see the package docstring).

    Args:
        source: the clinician's text (English).
        output: the model's rewrite, in ``language``.
        language: ``"en"`` or ``"es"``; for ``"es"`` only the kinds in
            :data:`LANGUAGE_KINDS` are checked.

    Returns:
        :class:`FaithfulnessResult` with flags sorted by output offset.

    Raises:
        TypeError: ``source`` or ``output`` is not a string.
        ValueError: ``language`` is not one of :data:`LANGUAGES`.
        RuntimeError: the anatomy ontology package is not installed.
    """
    if not isinstance(source, str) or not isinstance(output, str):
        raise TypeError("source and output must be strings")
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, not {language!r}")
    source_norm, output_norm = normalize(source), normalize(output)
    kinds = LANGUAGE_KINDS[language]
    flags: list[FaithfulnessFlag] = []
    if output_norm.strip():
        flags += number_flags(source, source_norm, output, output_norm, language)
        flags += laterality_flags(source, output, output_norm)
        flags += person_flags(source_norm, output, output_norm, language)
        if "drug" in kinds:
            flags += drug_flags(source, source_norm, output)
        # the output's anatomy names, read once for the two kinds that need them
        named = find_sites(output_norm, anatomy_index()) if {"body_site", "organ_function"} & set(kinds) else []
        if "body_site" in kinds:
            flags += site_flags(source_norm, output, output_norm, named)
        if "vital_sign" in kinds:
            flags += [FaithfulnessFlag("vital_sign", output[start:end], start, end, f"{sign} not in input")
                      for start, end, sign in vital_sign_spans(source_norm, output_norm)]
        if "organ_function" in kinds:
            flags += [FaithfulnessFlag("organ_function", output[start:end], start, end,
                                       "failure or damage not in input")
                      for start, end in organ_function_spans(source_norm, output_norm,
                                                             [start for start, *_ in named])]
        if "direction" in kinds:
            flags += direction_flags(source_norm, output, output_norm)
        if "negation" in kinds:
            flags += negation_flags(source_norm, output, output_norm)
    flags.sort(key=lambda f: (f.start, f.end, f.kind))
    return FaithfulnessResult(flags=tuple(flags), checked=kinds)


def warm() -> None:
    """Load the drug dictionary, the number words, the anatomy index (a few
    seconds once per process; the index is cached on disk) and the stop
    words of the negation kind's head-word rule."""
    faithfulness_check("Aspirin 81 mg daily to the left heart, no fever.", "Two hearts on the right.")
    faithfulness_check("Nonspecific bowel gas pattern.", "No gas.")
