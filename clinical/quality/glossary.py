"""Glossary: the medical terms of a clinician's text, each with a short
definition from a vetted vocabulary, and the name of that vocabulary.

Terms and definitions come only from two vocabularies that installed
packages ship (no network, no model):

* the **Human Phenotype Ontology** (:mod:`inference.lay_terms`): the names
  of the terms under "Phenotypic abnormality" and their exact synonyms.
  The definition is the term's *layperson* synonym when HPO has one
  ("Fluid around heart", source :data:`HPO_LAYPERSON`), else the first
  sentence of its clinical definition (:data:`HPO`);
* the **drug dictionary** (drug-named-entity-recognition 2.0.9, as in the
  safety check, source :data:`DRUG`): for a brand, its generic name; for a
  drug class, the class; for a generic name, no definition (``""``): the
  vocabularies have no plain one, and the pages and the API say so
  (:data:`NO_DEFINITION`).

Each entry names its source for the reader (``source_name``, with the
vocabulary's release: :func:`source_name`). Terms whose words are all on
textstat's Dale-Chall list of easy English words ("pain", "fever") are left
out: they need no definition. Longer terms win over the shorter terms
inside them, and the list keeps input order, at most ``max_terms`` entries.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
from dataclasses import asdict, dataclass

from clinical.quality.safety import find_drugs  # one drug dictionary for both
from inference.lay_terms import (
    HPO,
    HPO_LAYPERSON,
    easy_words,
    find_terms,
    hpo_data_version,
    hpo_obo_path,
    index_cache_path,
    prepare,
    vocabulary,
)

__all__ = ["HPO", "HPO_LAYPERSON", "DRUG", "NO_DEFINITION", "NO_TERM_DEFINITION", "SOURCE_NAMES", "GlossaryTerm",
           "easy_words", "glossary_display", "glossary_terms", "hpo_obo_path", "index_cache_path", "prepare",
           "source_name", "warm"]

#: ``source`` of a drug dictionary entry (the HPO ones: :mod:`inference.lay_terms`).
DRUG = "drug"
#: The drug dictionary: the distribution whose version :func:`source_name` names.
DRUG_PACKAGE = "drug-named-entity-recognition"
#: What the reader is told for a drug name that the vocabularies give no
#: plain definition for (its stored ``definition`` is ``""``).
NO_DEFINITION = "A medicine (no vetted plain definition)."
#: The same for any other term stored without a definition.
NO_TERM_DEFINITION = "No vetted plain definition."
#: ``source`` → the vocabulary's name for the reader, without its release
#: (:func:`source_name` adds it). ``engine``: definitions a language model
#: wrote, which stored rows may hold; no vocabulary stands behind them.
SOURCE_NAMES = {
    HPO_LAYPERSON: "Human Phenotype Ontology (lay synonym)",
    HPO: "Human Phenotype Ontology (clinical definition)",
    DRUG: "drug dictionary",
    "engine": "written by a language model, not a vetted vocabulary",
}


@functools.cache
def _drug_package_version() -> str:
    try:
        return importlib.metadata.version(DRUG_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return ""


def source_name(source: str) -> str:
    """The name of a ``source`` for the reader, with the vocabulary's
    release where it is known: "Human Phenotype Ontology (lay synonym),
    release 2025-01-16" (``hp.obo``'s ``data-version``), "drug dictionary
    (drug-named-entity-recognition 2.0.9)". An unknown ``source`` is
    returned as it is."""
    name = SOURCE_NAMES.get(source, source)
    if source in (HPO, HPO_LAYPERSON):
        try:
            version = hpo_data_version()
        except (OSError, RuntimeError):
            version = ""
        return f"{name}, release {version}" if version else name
    if source == DRUG:
        version = _drug_package_version()
        return f"{name} ({DRUG_PACKAGE} {version})" if version else name
    return name


@dataclass(frozen=True)
class GlossaryTerm:
    """One glossary entry: ``term`` as written in the input, a short
    ``definition`` from the vocabulary (``""`` where it has none), its
    ``source`` (:data:`HPO_LAYPERSON`, :data:`HPO`, :data:`DRUG`) and
    ``source_name`` (:func:`source_name`)."""

    term: str
    definition: str
    source: str
    source_name: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _drug_definition(data: dict) -> str:
    generic = data.get("name") or ""
    surface = data["matching_string"]
    if any(t.startswith("D27.505") for t in data.get("mesh_tree") or ()) and not data.get("drugbank_id"):
        return f"A group of medicines ({generic.lower()})."
    if generic and generic.lower() != surface.lower():
        return f"A medicine: a brand or other name of {generic.lower()}."
    return ""  # a generic name: the dictionary has no plain definition of it


def glossary_terms(text: str, *, max_terms: int = 8) -> list[GlossaryTerm]:
    """The medical terms of ``text`` with their vocabulary definitions and
    sources, in input order, at most ``max_terms``."""

    found: list[tuple[int, GlossaryTerm]] = [
        (start, GlossaryTerm(surface, definition, source, source_name(source)))
        for start, surface, (_, definition, source) in find_terms(text)]
    seen = {t.term.lower() for _, t in found}
    for data in find_drugs(text):
        surface = data["matching_string"]
        if surface.lower() in seen:
            continue
        seen.add(surface.lower())
        position = text.lower().find(surface.lower())
        found.append((position, GlossaryTerm(surface, _drug_definition(data), DRUG, source_name(DRUG))))
    found.sort(key=lambda pair: pair[0])
    unique: list[GlossaryTerm] = []
    for _, term in found:
        if term.term.lower() not in {u.term.lower() for u in unique}:
            unique.append(term)
    return unique[:max_terms]


def glossary_display(entries: list[dict] | None) -> list[dict]:
    """A stored glossary as the pages, the socket and the API show it:
    ``[{"term", "definition", "source", "source_name"}]``, ``definition``
    :data:`NO_DEFINITION` (a drug) or :data:`NO_TERM_DEFINITION` where the
    vocabulary gave none, ``source_name``
    from :data:`SOURCE_NAMES` where the entry was stored without one."""
    shown = []
    for entry in entries or []:
        source = entry.get("source", "")
        shown.append({
            "term": entry.get("term", ""),
            "definition": entry.get("definition") or (NO_DEFINITION if source == DRUG else NO_TERM_DEFINITION),
            "source": source,
            "source_name": entry.get("source_name") or SOURCE_NAMES.get(source, source),
        })
    return shown


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
            print(f"{term.term}: {term.definition or NO_DEFINITION} [{term.source_name}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
