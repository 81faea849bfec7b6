"""Worked examples retrieved per sentence, and the sentence splitter.

The example pool is laymaker-dev's clinician-changed rows (ORIGINAL →
REFERENCE, 175 rows), shipped in ``inference/data/laymaker_pool.csv``
(Laymaker corpus, babylonhealth/laymaker, CC BY 4.0, AMIA 2021; see
``inference/data/README.md``). The corpus itself is not read at run
time; ``python -m inference.examples build`` regenerates the pool from
``data/laymaker-dev.csv`` in the repository. Laymaker's held-back ``test-set.csv``
is never read.

Retrieval is TF-IDF (scikit-learn ``TfidfVectorizer``, word 1-2-grams,
sublinear tf) with cosine similarity over the pool's ORIGINAL sentences.
A pool row whose normalised ORIGINAL equals the query (same tokens, any
case or spacing) is never returned, so a sentence is never its own example.
:meth:`ExamplePool.subset` restricts the pool to some IDs (cross-fitting:
:func:`crossfit_folds`).

Plain Python: no Django imports.

    python -m inference.examples build [--source data/laymaker-dev.csv]
    python -m inference.examples show "There is 2+ pitting edema ." [-k 4]
"""

from __future__ import annotations

import argparse
import csv
import functools
import random
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The shipped pool (ID, ORIGINAL, REFERENCE), written by :func:`build_pool`.
POOL_PATH = Path(__file__).resolve().parent / "data" / "laymaker_pool.csv"
#: Where :func:`build_pool` reads from by default (the corpus kept in ``data/``).
DEFAULT_SOURCE = Path(__file__).resolve().parents[1] / "data" / "laymaker-dev.csv"
#: Seed of the one cross-fitting split of laymaker-dev (see :func:`crossfit_folds`).
FOLD_SEED = 22
#: Examples per request in the measured default (docs/quality/quality-report.md).
DEFAULT_K = 6

_TOKEN = re.compile(r"\w+(?:[-'.]\w+)*|[^\w\s]")


def normalise(text: str) -> str:
    """Lower-cased words and punctuation joined by single spaces: the same
    tokens as ``bench.quality.tokenize``, so ``"Edema ."`` equals ``"edema."``."""
    return " ".join(_TOKEN.findall(text.lower()))


@dataclass(frozen=True, slots=True)
class Example:
    """One worked example.

    Attributes:
        id: laymaker-dev ``ID`` (a string of digits).
        original: the clinician's sentence (``ORIGINAL``, as in the data:
            often pre-tokenized, ``"edema ."``).
        reference: the clinicians' plain rewrite (``REFERENCE``).
        score: cosine similarity to the query, 0..1 (0.0 outside retrieval).
    """

    id: str
    original: str
    reference: str
    score: float = 0.0


class ExamplePool:
    """A TF-IDF index over worked examples.

    Args:
        examples: the pool rows; IDs must be unique. The vectorizer is fitted
            on these rows only (so a cross-fitted pool learns nothing, not
            even IDF weights, from the rows it scores).
    """

    def __init__(self, examples: Sequence[Example]) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        if not examples:
            raise ValueError("an example pool needs at least one row")
        self.examples = tuple(examples)
        if len({e.id for e in self.examples}) != len(self.examples):
            raise ValueError("duplicate example IDs")
        self._by_id = {e.id: e for e in self.examples}
        self._normalised = [normalise(e.original) for e in self.examples]
        self._vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True,
                                           token_pattern=r"(?u)\b\w[\w'-]*\b")
        self._matrix = self._vectorizer.fit_transform(self._normalised)  # rows L2-normalised

    @classmethod
    def load(cls, path: Path | str = POOL_PATH) -> ExamplePool:
        """The pool in a CSV with columns ``ID, ORIGINAL, REFERENCE``."""
        with open(path, newline="", encoding="utf-8") as handle:
            rows = [Example(r["ID"], r["ORIGINAL"], r["REFERENCE"]) for r in csv.DictReader(handle)]
        return cls(rows)

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(self._by_id)

    def subset(self, ids: Iterable[str]) -> ExamplePool:
        """A new pool of only the rows whose ID is in ``ids`` (unknown IDs
        are ignored), with its own index."""
        wanted = set(ids)
        return ExamplePool([e for e in self.examples if e.id in wanted])

    def retrieve(self, text: str, k: int = DEFAULT_K) -> list[Example]:
        """The ``k`` pool rows most similar to ``text``, most similar first.

        Rows whose normalised ORIGINAL equals ``text``'s are left out, so
        the query never comes back as its own example. Ties keep pool
        order. Fewer than ``k`` come back only when the pool is smaller.

        Returns:
            :class:`Example` rows with ``score`` = cosine similarity (0..1).
        """
        if k <= 0:
            return []
        query = normalise(text)
        scores = (self._matrix @ self._vectorizer.transform([query]).T).toarray().ravel()
        order = sorted(range(len(self.examples)), key=lambda i: -scores[i])
        picked = []
        for i in order:
            if self._normalised[i] == query:
                continue
            e = self.examples[i]
            picked.append(Example(e.id, e.original, e.reference, float(scores[i])))
            if len(picked) == k:
                break
        return picked


    def clusters(self, n_clusters: int, per_cluster: int = 4, seed: int = FOLD_SEED) -> ClusterRouter:
        """k-means (scikit-learn ``KMeans``, ``n_init=10``) over the pool's
        TF-IDF rows; see :class:`ClusterRouter`."""
        return ClusterRouter(self, n_clusters, per_cluster, seed)


class ClusterRouter:
    """Routes a sentence to the nearest of ``n_clusters`` k-means clusters
    of a pool and gives that cluster's fixed examples: the ``per_cluster``
    members nearest its centroid, most central first (fewer when the
    cluster is smaller). Those are identical for every sentence of the
    cluster, so they sit in a cached prompt prefix, one per cluster (the
    llama.cpp engine keeps ``INFERENCE_PREFIX_SNAPSHOTS`` prefix snapshots,
    :mod:`inference.llamacpp_prefix`).

    The fit is deterministic for a given pool, ``n_clusters``,
    ``per_cluster`` and ``seed``: scikit-learn ``KMeans`` (Lloyd,
    ``n_init=10``, ``random_state=seed``) runs on one OpenMP thread
    (``threadpoolctl``), so the summation order, hence the clusters, do not
    depend on the machine's core count. A stored translation is rendered
    again from these settings (:func:`inference.parts.translation_message_parts`).

    Args:
        pool: the pool whose TF-IDF rows are clustered.
        n_clusters: 1..``len(pool)``.
        per_cluster: fixed examples per cluster, >= 0.
        seed: k-means ``random_state``.

    Raises:
        ValueError: ``n_clusters`` or ``per_cluster`` out of range.
    """

    def __init__(self, pool: ExamplePool, n_clusters: int, per_cluster: int, seed: int) -> None:
        import numpy as np
        from sklearn.cluster import KMeans
        from threadpoolctl import threadpool_limits

        if not 1 <= n_clusters <= len(pool):
            raise ValueError(f"n_clusters must be 1..{len(pool)} for this pool, not {n_clusters}")
        if per_cluster < 0:
            raise ValueError(f"per_cluster must be >= 0, not {per_cluster}")
        self.pool = pool
        self.n_clusters, self.per_cluster, self.seed = n_clusters, per_cluster, seed
        with threadpool_limits(limits=1):
            self._kmeans = KMeans(n_clusters=n_clusters, n_init=10, random_state=seed).fit(pool._matrix)
            distances = self._kmeans.transform(pool._matrix)  # (rows, clusters), Euclidean
        labels = self._kmeans.labels_
        #: Pool rows per cluster (cluster index -> count).
        self.sizes: list[int] = [int((labels == c).sum()) for c in range(n_clusters)]
        self.fixed: list[list[Example]] = []
        for c in range(n_clusters):
            members = [i for i in np.argsort(distances[:, c], kind="stable") if labels[i] == c][:per_cluster]
            self.fixed.append([pool.examples[i] for i in members])

    def route(self, text: str) -> tuple[int, list[Example]]:
        """``(cluster index, its fixed examples)`` for ``text``. A fixed
        example equal to ``text`` (normalised) is left out, so the query is
        never its own example (that cluster's prefix then differs)."""
        query = normalise(text)
        cluster = int(self._kmeans.predict(self.pool._vectorizer.transform([query]))[0])
        return cluster, [e for e in self.fixed[cluster] if normalise(e.original) != query]


@functools.cache
def default_pool() -> ExamplePool:
    """The shipped pool (all 175 changed laymaker-dev rows), loaded once
    per process (about 20 ms)."""
    return ExamplePool.load()


@functools.cache
def default_router(n_clusters: int, per_cluster: int) -> ClusterRouter:
    """The shipped pool's clusters (seed :data:`FOLD_SEED`, the seed
    ``bench/quality.py`` uses), fitted once per process and settings (about
    0.9 s on one core for 24 clusters).

    Raises:
        ValueError: see :class:`ClusterRouter`.
    """
    return default_pool().clusters(n_clusters, per_cluster)


def crossfit_folds(ids: Iterable[str], seed: int = FOLD_SEED) -> tuple[frozenset[str], frozenset[str]]:
    """Split ``ids`` once into two disjoint halves ``(A, B)``.

    The IDs are sorted, then shuffled by ``random.Random(seed)``; A is the
    first ``ceil(n/2)``. The same IDs and seed always give the same halves.
    Score A's rows with the pool restricted to B and B's with A.
    """
    ordered = sorted(set(ids), key=lambda i: (len(i), i))
    random.Random(seed).shuffle(ordered)
    half = (len(ordered) + 1) // 2
    return frozenset(ordered[:half]), frozenset(ordered[half:])


# --- sentences ---------------------------------------------------------------

#: A section heading: "ABDOMEN :", "HEENT:" or "PREOPERATIVE DIAGNOSIS :"
#: (capitals, then a colon).
_HEADING_TEXT = r"[A-Z][A-Z /&-]{2,}\s?:"
#: Where a heading starts after a sentence end on the same line.
_HEADING = re.compile(rf"(?<=[.!?])\s+(?={_HEADING_TEXT})")


@functools.cache
def _punkt():
    """NLTK's Punkt splitter: the trained English model when its data is
    installed (``punkt_tab``), else Punkt with default parameters (no data
    needed, no download attempted)."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    try:
        from nltk.data import find

        find("tokenizers/punkt_tab/english/")
        from nltk.tokenize import PunktTokenizer

        return PunktTokenizer("english")
    except LookupError:
        tokenizer = PunktSentenceTokenizer()
        # Abbreviations common in clinical notes (Punkt's parameters, lower case, no final dot).
        tokenizer._params.abbrev_types.update(
            {"dr", "mr", "mrs", "ms", "vs", "e.g", "i.e", "b.i.d", "t.i.d", "q.i.d", "p.o", "q.d",
             "p.r.n", "approx", "no", "st", "fig"})
        return tokenizer


def _line_pieces(line: str) -> list[str]:
    """One stripped line of a note split by Punkt and before headings."""
    return [s.strip() for piece in _punkt().tokenize(line) for s in _HEADING.split(piece) if s.strip()]


def split_sentences(text: str) -> list[str]:
    """Split a clinical note into sentences, in order.

    Lines are split first (notes put one finding per line), then each line
    by NLTK's Punkt; a capitalised heading with a colon ("ABDOMEN :") stays
    with the findings that follow it on its line, and a heading that
    follows a sentence on the same line starts a new one. Blank pieces are
    dropped. A heading alone on its line stays a piece of its own here;
    :func:`note_sentences` joins it to the findings after it.

    Returns:
        The sentences, stripped, in their order in ``text``.
    """
    sentences: list[str] = []
    for line in text.splitlines():
        if line.strip():
            sentences.extend(_line_pieces(line.strip()))
    return sentences


#: A piece that is only a heading: "PHYSICAL EXAMINATION :", "HEENT:".
_HEADING_ONLY = re.compile(_HEADING_TEXT)
#: The headings a unit starts with, and the whitespace after them:
#: "NEUROLOGIC : ", "PHYSICAL EXAMINATION :\nGENERAL : ".
_LEADING_HEADINGS = re.compile(rf"(?:{_HEADING_TEXT}\s*)+")


def heading_split(text: str) -> tuple[str, str]:
    """Split the section headings off the start of a unit
    (:func:`note_sentences`): ``"NEUROLOGIC : I can not assess."`` gives
    ``("NEUROLOGIC : ", "I can not assess.")``.

    A heading names the section, not a finding: the cluster prompt with
    ``headings`` (:class:`inference.prompts.ClusterPrompt`) copies it
    verbatim and gives the model only what follows, which is what the
    clinicians' rewrites in laymaker-dev do with most headings, and so the
    model cannot turn "NEUROLOGIC" into "neurologist" or merge the section
    into the finding ("Normal tone" read as a normal nervous system).

    Returns:
        ``(headings with the whitespace after them, the rest)``;
        ``("", text)`` when ``text`` starts with no heading or is nothing
        but headings (the model then gets all of it, as before).
    """
    match = _LEADING_HEADINGS.match(text)
    if match is None or not text[match.end():].strip():
        return "", text
    return match.group(0), text[match.end():]


@dataclass(frozen=True, slots=True)
class NoteSentence:
    r"""One unit of a note that is generated on its own.

    Attributes:
        text: the sentence as written (stripped); a heading alone on its
            line or at the end of one comes with the findings after it,
            joined by the line break or space that separated them.
        separator: what separates its explanation from the one before:
            ``""`` for the first, ``" "`` within a line, ``"\n"`` after a
            line break, ``"\n\n"`` after blank lines.
    """

    text: str
    separator: str


def note_sentences(text: str) -> list[NoteSentence]:
    r"""The units of a note generated one after another
    (:func:`split_sentences`), headings joined to their findings, with the
    separator each explanation gets before it.

    ``"PHYSICAL EXAMINATION :\nGENERAL : Alert. Vital signs stable."`` gives
    ``["PHYSICAL EXAMINATION :\nGENERAL : Alert.", "Vital signs stable."]``
    with separators ``""`` and ``" "``. A heading with nothing after it is
    a unit of its own.

    Returns:
        The units in their order in ``text``; empty for blank text.
    """
    units: list[NoteSentence] = []
    heading: tuple[str, str] | None = None  # (text, separator) waiting for its findings
    blank = False
    for line in text.splitlines():
        if not line.strip():
            blank = bool(units or heading)
            continue
        for index, piece in enumerate(_line_pieces(line.strip())):
            separator = ("\n\n" if blank else "\n") if index == 0 else " "
            is_heading = _HEADING_ONLY.fullmatch(piece) is not None
            if heading is not None:  # the heading, then what separated it from this piece, then the piece
                piece, separator, heading = heading[0] + separator + piece, heading[1], None
            if is_heading:
                heading = (piece, separator)
            else:
                units.append(NoteSentence(piece, separator if units else ""))
        blank = False
    if heading is not None:
        units.append(NoteSentence(heading[0], heading[1] if units else ""))
    return units


def messages_per_sentence(text: str, *, reading_level: int | None = None, language: str | None = None,
                          k: int = DEFAULT_K, pool: ExamplePool | None = None) -> list[tuple[str, list[dict[str, str]]]]:
    """The retrieval prompt (``EXAMPLES_PROMPT_VERSION``) for each sentence
    of ``text`` (:func:`note_sentences`), in order: what a caller generates
    one after another and streams in order.

    Args:
        text: the clinician's text (one or more sentences).
        reading_level, language: as for :func:`inference.prompts.build_messages`
            (``None``: its defaults).
        k: retrieved examples per sentence.
        pool: the example pool (default: the shipped one).

    Returns:
        ``[(sentence, messages)]``; empty for blank text.
    """
    from inference.prompts import build_messages

    pool = pool or default_pool()
    options = {key: value for key, value in (("reading_level", reading_level), ("language", language))
               if value is not None}
    return [(unit.text, build_messages(unit.text, examples=pool.retrieve(unit.text, k), **options))
            for unit in note_sentences(text)]


#: A fixed phrase (not patient data) that ends the prompts which only warm
#: a cluster's prefix (:func:`cluster_prefix_messages`).
WARMUP_SENTENCE = "No acute distress."


def cluster_messages(sentence: str, *, router: ClusterRouter, k: int = 0, reading_level: int | None = None,
                     language: str | None = None, hints: bool = False) -> list[dict[str, str]]:
    """The cluster prompt (``CLUSTER_PROMPT_VERSION``) for one sentence:
    the system message, the fixed examples of the sentence's cluster as
    turns (:meth:`ClusterRouter.route`; the cached prefix, shared by the
    cluster), then the sentence, with ``k`` more examples retrieved from
    the router's pool listed inline in that last message (paid per
    request; none of them is a fixed one or the sentence itself).

    The same as ``bench/quality.py`` ``run_examples`` renders with
    ``--clusters N --per-cluster M --k K --placement inline`` for a pool
    (there, each cross-fitted half; here, the pool the router was fitted on).
    With ``hints`` (:data:`inference.prompts.HINTS_PROMPT_VERSION`), the
    plain words HPO gives for the sentence's terms
    (:func:`inference.lay_terms.lay_hints`) follow it in the last message.

    Returns:
        ``{"role", "content"}`` messages; every message but the last is
        the same for all sentences of a cluster (unless the sentence is
        itself one of the cluster's fixed examples).
    """
    from inference.prompts import build_messages

    _, fixed = router.route(sentence)
    shown = {e.id for e in fixed}
    examples = [e for e in router.pool.retrieve(sentence, k + len(fixed)) if e.id not in shown][:k] if k > 0 else []
    options = {key: value for key, value in (("reading_level", reading_level), ("language", language))
               if value is not None}
    if hints:
        from inference.lay_terms import lay_hints

        options["hints"] = lay_hints(sentence)
    return build_messages(sentence, examples=examples, placement="inline", prefix_examples=fixed, **options)


def cluster_prefix_messages(cluster: int, *, router: ClusterRouter, reading_level: int | None = None,
                            language: str | None = None) -> list[dict[str, str]]:
    """Messages whose prefix (all but the last) is ``cluster``'s, ending
    with :data:`WARMUP_SENTENCE`: a one-token request on them leaves that
    prefix in the engine's cache (a warm-up, no patient data)."""
    from inference.prompts import build_messages

    options = {key: value for key, value in (("reading_level", reading_level), ("language", language))
               if value is not None}
    return build_messages(WARMUP_SENTENCE, examples=[], placement="inline",
                          prefix_examples=router.fixed[cluster], **options)


# --- building the shipped pool ---------------------------------------------

def build_pool(source: Path | str = DEFAULT_SOURCE, dest: Path | str = POOL_PATH) -> int:
    """Write the changed rows of laymaker-dev (``ORIGINAL`` and
    ``REFERENCE`` differ after :func:`normalise`) to ``dest`` as
    ``ID, ORIGINAL, REFERENCE``, in the source's order.

    Returns:
        The number of rows written.
    """
    source = Path(source)
    if source.name.lower().startswith("test"):
        raise ValueError("Laymaker's test set is held back: never build a pool from it")
    with open(source, newline="", encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if normalise(r["ORIGINAL"]) != normalise(r["REFERENCE"])]
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["ID", "ORIGINAL", "REFERENCE"])
        writer.writerows([r["ID"], r["ORIGINAL"], r["REFERENCE"]] for r in rows)
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inference.examples", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="write inference/data/laymaker_pool.csv from laymaker-dev.csv")
    build.add_argument("--source", default=str(DEFAULT_SOURCE))
    build.add_argument("--dest", default=str(POOL_PATH))
    show = sub.add_parser("show", help="print the examples retrieved for a sentence")
    show.add_argument("text")
    show.add_argument("-k", type=int, default=DEFAULT_K)
    args = parser.parse_args(argv)
    if args.command == "build":
        n = build_pool(args.source, args.dest)
        print(f"{n} changed rows written to {args.dest}")
    else:
        for e in default_pool().retrieve(args.text, args.k):
            print(f"{e.score:.3f} [{e.id}] {e.original}\n      -> {e.reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
