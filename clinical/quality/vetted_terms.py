"""Medical terms replaced by plain words that no vetted vocabulary gives
for them: part of the safety check (:func:`clinical.quality.safety.safety_check`,
kind ``lay_term``; English output, and Spanish output held to HPO's
Spanish labels: :func:`spanish_term_findings`).

A small model's commonest wrong text is a term given a lay word that
means something else: "a small left pleural effusion" as "fluid in the
left lung" (the fluid is around the lung), "aortic stenosis" as "less
space to fill with blood". The looser term check
(:mod:`clinical.quality.terms`) passes both, since one plain word
("fluid") is enough for it. This check holds the replacement against the
vocabulary instead:

* a **vetted term** is a Human Phenotype Ontology term written in the input
  (:func:`inference.lay_terms.find_terms`) that HPO gives one or more
  *layperson synonyms* for (:func:`inference.lay_terms.layperson_synonyms`:
  "Pleural effusion": "Fluid around lungs"; 3,532 terms under "Phenotypic
  abnormality" in HPO 2025-01-16);
* the output **keeps** it when one of its words that is not an easy word
  (Dale-Chall) starts an output word with its first six letters (all but
  the last of a shorter word), as the term check reads keeping: the model
  kept the term, and the term check asks that it be explained;
* else the output **replaced** it, and the replacement **matches** a
  layperson synonym when every content word of that synonym (stop words
  such as "of", "the" aside; "around", "in", "less" are content: they
  carry the meaning) is in the output, compared by stem
  (:func:`word_stem`: "lungs" matches "lung", "narrowed" "narrowing");
* a replaced term that matches none is a finding: its text is the term as
  written in the input.

Limits by design: the vocabulary is HPO's findings; a term it has no
layperson synonym for (procedures, drugs, anatomy, "mitral
regurgitation") is not held against one here; the order of the words is
not read ("fluid around lungs" and "lungs around fluid" both match).
Measured over the stored texts: ``python -m bench unexplained_terms``
(its ``lay_term`` section) and ``docs/decisions/vetted-lay-terms.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clinical.quality.textnorm import normalize
from inference.lay_terms import easy_word, find_terms, layperson_synonyms, spanish_term_spans

#: Words of a layperson synonym that carry no meaning of their own.
STOP_WORDS = frozenset({"a", "an", "the", "of", "and", "or", "to", "with", "for", "by", "is", "are", "be",
                        "your", "their", "its"})
#: Endings taken off before two words are compared (longest first).
ENDINGS = ("ations", "ation", "ness", "ings", "ing", "ies", "ied", "es", "ed", "ly", "s", "y", "e")
#: Letters of a stem compared; a shorter stem is compared whole.
STEM_LETTERS = 6
#: Letters of an input word that keep a term in the output (as the term check).
KEEP_LETTERS = 6

_WORD = re.compile(r"[a-z]+")


@dataclass(frozen=True)
class LayTermFinding:
    """A vetted term the output replaced with words that match none of its
    layperson synonyms: ``term`` as written in the input, its character
    offsets there, its HPO name and the synonyms it was held against."""

    term: str
    start: int
    end: int
    name: str
    layperson: tuple[str, ...]


def word_stem(word: str) -> str:
    """A lower-case word without its commonest English ending, cut to
    :data:`STEM_LETTERS` letters: "lungs" and "lung" give "lung",
    "narrowing" and "narrowed" "narrow", "inflammation" "inflam"."""
    for ending in ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            word = word[: -len(ending)]
            break
    return word[:STEM_LETTERS]


def _kept(word: str, output_words: list[str]) -> bool:
    stem = word[:min(KEEP_LETTERS, len(word) - 1)]
    return any(w.startswith(stem) for w in output_words)


def _matches(synonym: str, output_stems: set[str]) -> bool:
    words = [w for w in _WORD.findall(normalize(synonym)) if w not in STOP_WORDS]
    return bool(words) and all(word_stem(w) in output_stems for w in words)


def lay_term_findings(*, input_text: str, output_text: str) -> list[LayTermFinding]:
    """The vetted terms of ``input_text`` that ``output_text`` replaced
    with words matching none of their layperson synonyms (rules in the
    module docstring), in input order (English output; about 0.1 ms a
    sentence once the HPO index is loaded)."""
    synonyms = layperson_synonyms()
    output_words = _WORD.findall(normalize(output_text))
    output_stems = {word_stem(w) for w in output_words}
    findings = []
    for start, surface, (name, _, _) in find_terms(input_text):
        lays = synonyms.get(name)
        if not lays:
            continue
        hard = [w for w in _WORD.findall(normalize(surface)) if not easy_word(w, ("s", "es"))]
        if any(_kept(w, output_words) for w in hard):
            continue
        if any(_matches(lay, output_stems) for lay in lays):
            continue
        findings.append(LayTermFinding(surface, start, start + len(surface), name, lays))
    return sorted(findings, key=lambda f: f.start)


#: Spanish words of a label that carry no meaning of their own.
SPANISH_STOP_WORDS = frozenset({"a", "al", "con", "de", "del", "el", "en", "la", "las", "lo", "los", "o", "para",
                                "por", "su", "sus", "u", "un", "una", "unas", "unos", "y", "e"})
#: Letters of a Spanish word compared (accents folded): "aórtica" and
#: "aórtico" share "aorti"; a shorter word is compared whole.
SPANISH_STEM_LETTERS = 5


def _spanish_words(text: str) -> list[str]:
    return _WORD.findall(normalize(text))


def _spanish_label_kept(label: str, output_stems: set[str]) -> bool:
    """The Spanish output says ``label``: its first content word (the
    head noun: "estenosis", "derrame") and its other content words, one of
    them allowed missing when there are two or more ("estenosis aórtica"
    for "Estenosis de la válvula aórtica"); a parenthesis in the label is
    left out and "a / b" is either."""
    for alternative in re.sub(r"\([^)]*\)", " ", label).split("/"):
        words = [w for w in _spanish_words(alternative) if w not in SPANISH_STOP_WORDS]
        if not words:
            continue
        stems = [w[:SPANISH_STEM_LETTERS] for w in words]
        present = [stem in output_stems for stem in stems[1:]]
        if stems[0] in output_stems and sum(present) >= len(present) - (1 if len(present) >= 2 else 0):
            return True
    return False


def spanish_term_findings(*, input_text: str, output_text: str) -> list[LayTermFinding]:
    """The terms of ``input_text`` (English) that HPO has an official Spanish
    label for (:func:`inference.lay_terms.spanish_term_spans`) and that the
    Spanish ``output_text`` does not say by that label (the head noun and
    the other content words, compared by their first
    :data:`SPANISH_STEM_LETTERS` letters, accents folded; one word of three
    or more may be missing). No Spanish lay vocabulary exists in a vetted
    source reachable here, so the Spanish output keeps the vetted term
    (and explains it), as the Spanish prompt asks
    (:data:`inference.prompts.SPANISH_TERMS_PROMPT_VERSION`): "constipado"
    (a cold) for constipated, or "un poco menos de espacio" for an aortic
    stenosis, is a finding. In input order; ``name`` and ``layperson`` are
    the Spanish label."""
    output_stems = {w[:SPANISH_STEM_LETTERS] for w in _spanish_words(output_text)}
    findings = []
    for start, surface, label in spanish_term_spans(input_text):
        if _spanish_label_kept(label, output_stems):
            continue
        findings.append(LayTermFinding(surface, start, start + len(surface), label, (label,)))
    return sorted(findings, key=lambda f: f.start)
