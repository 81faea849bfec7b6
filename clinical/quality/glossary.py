"""Glossary: the medical terms of a clinician's text, each with a short
definition.

Terms come from two vocabularies that installed packages ship (no network):

* the **Human Phenotype Ontology** (:mod:`inference.lay_terms`): the names
  of the terms under "Phenotypic abnormality" and their exact synonyms.
  The vocabulary definition is the term's *layperson* synonym when HPO has
  one ("Fluid around heart"), else the first sentence of its clinical
  definition;
* **drug names** (drug-named-entity-recognition 2.0.9, as in the safety
  check): "a medicine" and, for a brand, its generic name.

Terms whose words are all on textstat's Dale-Chall list of easy English
words ("pain", "fever") are left out: they need no definition. Longer
terms win over the shorter terms inside them, and the list keeps input
order, at most ``max_terms`` entries.

HPO definitions are written for clinicians, so the engine is asked to write
a plain one after the main text (:func:`inference.prompts.glossary_messages`,
:func:`clinical.translation.glossary_writes.translation_glossary_explain`);
:func:`glossary_merge` puts those in and keeps the vocabulary's definition,
marked by its ``source``, for any term the engine did not define.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

from clinical.quality.safety import find_drugs  # one drug dictionary for both
from inference.lay_terms import (
    HPO,
    HPO_LAYPERSON,
    easy_words,
    find_terms,
    hpo_obo_path,
    index_cache_path,
    prepare,
    vocabulary,
)

__all__ = ["ENGINE", "HPO", "HPO_LAYPERSON", "DRUG", "GlossaryTerm", "easy_words", "glossary_merge",
           "glossary_terms", "hpo_obo_path", "index_cache_path", "prepare", "warm"]

#: ``source`` values: written by the engine, HPO layperson synonym, HPO
#: clinical definition (both from :mod:`inference.lay_terms`), drug dictionary.
ENGINE, DRUG = "engine", "drug"


@dataclass(frozen=True)
class GlossaryTerm:
    """One glossary entry: ``term`` as written in the input, a short
    ``definition``, and its ``source`` (see the constants above)."""

    term: str
    definition: str
    source: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _drug_definition(data: dict) -> str:
    generic = data.get("name") or ""
    surface = data["matching_string"]
    if any(t.startswith("D27.505") for t in data.get("mesh_tree") or ()) and not data.get("drugbank_id"):
        return f"A group of medicines ({generic.lower()})."
    if generic and generic.lower() != surface.lower():
        return f"A medicine: a brand or other name of {generic.lower()}."
    return "A medicine."


def glossary_terms(text: str, *, max_terms: int = 8) -> list[GlossaryTerm]:
    """The medical terms of ``text`` with vocabulary definitions, in input
    order, at most ``max_terms``."""

    found: list[tuple[int, GlossaryTerm]] = [(start, GlossaryTerm(surface, definition, source))
                                             for start, surface, (_, definition, source) in find_terms(text)]
    seen = {t.term.lower() for _, t in found}
    for data in find_drugs(text):
        surface = data["matching_string"]
        if surface.lower() in seen:
            continue
        seen.add(surface.lower())
        position = text.lower().find(surface.lower())
        found.append((position, GlossaryTerm(surface, _drug_definition(data), DRUG)))
    found.sort(key=lambda pair: pair[0])
    unique: list[GlossaryTerm] = []
    for _, term in found:
        if term.term.lower() not in {u.term.lower() for u in unique}:
            unique.append(term)
    return unique[:max_terms]


def glossary_merge(terms: list[GlossaryTerm], plain: dict[str, str]) -> list[GlossaryTerm]:
    """Replace vocabulary definitions with the engine's plain ones
    (``plain``: term → definition, keys matched case-insensitively)."""
    lookup = {k.lower(): v for k, v in plain.items()}
    return [GlossaryTerm(t.term, lookup[t.term.lower()], ENGINE) if lookup.get(t.term.lower()) else t
            for t in terms]


def warm() -> None:
    """Load the HPO index now (from its cache, well under a second; about
    5 s when it must be built)."""
    vocabulary()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clinical.quality.glossary", description=__doc__.split("\n")[0])
    parser.add_argument("--prepare", action="store_true", help="build and cache the HPO index (offline)")
    parser.add_argument("text", nargs="?", help="text to find glossary terms in")
    args = parser.parse_args(argv)
    if args.prepare:
        print(f"HPO index ready in {prepare()}")
    if args.text:
        for term in glossary_terms(args.text):
            print(f"{term.term}: {term.definition} [{term.source}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
