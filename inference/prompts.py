"""The prompt that asks for a faithful plain-language explanation.

``PROMPT_VERSION`` is stored with every translation: change it whenever the
wording of :data:`SYSTEM_PROMPT`, the worked example or the message layout
changes.

Version history (measured on the first 10 clinician-changed laymaker-dev
sentences with the default 1.5B model, docs/quality/):

* ``2026-11-22.1``: instructions only, "grade 6 reading level". The model
  read it as "a 6-year-old", wrote stories and analogies ("too many cookies
  in your jar") and invented facts in 6 of 10 outputs.
* ``2026-11-22.2``: explicit rules (keep numbers, doses, drugs, laterality,
  negations; add nothing; no stories) plus one worked example written for
  this project (not from the evaluation data). Outputs are shorter and stay
  closer to the note; errors remain (see the README).
* ``2026-11-22.3``: reading level (US grade 4, 6 or 8) and output language
  (English or Spanish) as parameters. The default, grade 6 in English,
  renders exactly the ``.2`` messages, so ``.2`` measurements still hold.
* ``2026-11-25.1`` (:data:`EXAMPLES_PROMPT_VERSION`): worked
  examples retrieved per sentence from laymaker-dev's clinician rewrites
  (:mod:`inference.examples`) and the instruction to keep the sentence and
  its facts and replace only what a patient would not understand
  (:data:`EXAMPLES_SYSTEM_PROMPT`). Used when ``build_messages`` gets
  ``examples=``; without them it still renders ``2026-11-22.3``
  (:data:`PROMPT_VERSION`), so a caller stores :func:`prompt_version`.
  Measured cross-fitted in docs/quality/quality-report.md.
* ``2026-11-25.2`` (:data:`CLUSTER_PROMPT_VERSION`): the
  ``.1`` system message and examples, laid out so the examples cost a
  cached prefix instead of a prefill per request. The shipped pool is
  clustered (k-means over its TF-IDF rows, :class:`inference.examples.ClusterRouter`);
  each cluster's fixed examples (its rows nearest the centroid) are turns
  right after the system message, so every message but the last is the
  same for all sentences of a cluster and the engine keeps it as one KV
  snapshot; ``k`` more retrieved examples, if any, are listed inline in
  the last message (paid per request). Stored with its settings,
  ``"2026-11-25.2+c24x8k0"`` (:class:`ClusterPrompt`), so a stored
  translation renders the same messages again after the settings change.
  Changing the shipped pool file changes the clusters: give the prompt a
  new version then.
* ``2026-11-25.3`` (:data:`HINTS_PROMPT_VERSION`): the ``.2`` cluster
  prompt, and when the sentence holds medical terms that a vocabulary
  gives plain words for (the Human Phenotype Ontology's layperson
  synonyms, :func:`inference.lay_terms.lay_hints`), the last message
  lists them after the sentence (:func:`hints_line`). Everything before
  the last message is the ``.2`` prefix, so the cached cluster prefixes
  are the same; a sentence without such terms renders the ``.2``
  messages exactly. Stored as ``"2026-11-25.3+c24x8k0"``.
* ``2026-11-29.1`` (:data:`SPANISH_TERMS_PROMPT_VERSION`): Spanish output
  of a diagnosis with medical terms that HPO has an official Spanish label
  for, other than the term itself (:func:`inference.lay_terms.spanish_hints`): the ``2026-11-22.3``
  instructions, and each user message lists its terms with their Spanish
  labels after the note (:func:`spanish_terms_line`): the worked example's
  (:data:`EXAMPLE_SPANISH_TERMS`, answered with them,
  :data:`EXAMPLE_ANSWER_SPANISH_TERMS`) and the diagnosis's. So the
  patient reads the vetted Spanish term, explained, not the model's guess
  at one ("constipado", a cold, for constipated); the worked example shows
  the list used, not copied into the answer. Spanish without such terms
  renders ``2026-11-22.3``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

PROMPT_VERSION = "2026-11-22.3"
#: The version of the messages :func:`build_messages` renders with ``examples``.
EXAMPLES_PROMPT_VERSION = "2026-11-25.1"
#: Cluster prefixes (:class:`ClusterPrompt`; stored with its settings as a suffix).
CLUSTER_PROMPT_VERSION = "2026-11-25.2"
#: Cluster prefixes with the vocabulary's plain words for the sentence's terms.
HINTS_PROMPT_VERSION = "2026-11-25.3"
#: The one-example prompt in Spanish with the vetted Spanish terms listed.
SPANISH_TERMS_PROMPT_VERSION = "2026-11-29.1"
_CLUSTER_VERSION = re.compile("(" + re.escape(CLUSTER_PROMPT_VERSION) + "|" + re.escape(HINTS_PROMPT_VERSION) +
                              r")\+c(\d+)x(\d+)k(\d+)(h?)")


@dataclass(frozen=True, slots=True)
class ClusterPrompt:
    """The settings of a :data:`CLUSTER_PROMPT_VERSION` prompt, which
    decide its messages for a given shipped pool.

    Attributes:
        clusters: k-means clusters of the pool (>= 1).
        per_cluster: fixed examples per cluster, in the cached prefix.
        k: retrieved examples listed inline in the last message.
        hints: the vocabulary's plain words for the sentence's terms follow
            it in the last message (:data:`HINTS_PROMPT_VERSION`).
        headings: a sentence's leading section headings ("NEUROLOGIC :")
            are copied verbatim and the model gets only what follows
            (:func:`inference.examples.heading_split`); suffix ``h``.
    """

    clusters: int
    per_cluster: int
    k: int
    hints: bool = False
    headings: bool = False

    @property
    def version(self) -> str:
        """What a translation stores, e.g. ``"2026-11-25.3+c24x8k0"`` or,
        with headings copied, ``"2026-11-25.2+c24x8k0h"`` (at most 32
        characters for any realistic setting)."""
        base = HINTS_PROMPT_VERSION if self.hints else CLUSTER_PROMPT_VERSION
        return f"{base}+c{self.clusters}x{self.per_cluster}k{self.k}{'h' if self.headings else ''}"

    @classmethod
    def parse(cls, version: str) -> ClusterPrompt | None:
        """The settings in a stored version; ``None`` for any other version."""
        match = _CLUSTER_VERSION.fullmatch(version or "")
        if match is None:
            return None
        base, clusters, per_cluster, k, headings = match.groups()
        return cls(int(clusters), int(per_cluster), int(k), hints=base == HINTS_PROMPT_VERSION,
                   headings=headings == "h")

#: US school grade → the wording the model is given. Grade 6 is the default
#: (the AMA and NIH advise patient materials at grade 6 or below).
READING_LEVELS = {
    4: "the reading level of a 9-year-old, US grade 4",
    6: "the reading level of a 12-year-old",
    8: "the reading level of a 14-year-old, US grade 8",
}
DEFAULT_READING_LEVEL = 6
#: ISO 639-1 code → language name for the prompt.
LANGUAGES = {"en": "English", "es": "Spanish"}
DEFAULT_LANGUAGE = "en"

SYSTEM_PROMPT = """You rewrite a clinician's note so that the patient can understand it.
Rules:
- Use plain, everyday words and short sentences ({reading_level}).
- Briefly explain each medical term in plain words.
- Keep every fact exactly: numbers, units, doses, drug names, left and right, and every negation (no, not, without, denies).
- Add nothing: no new facts, no advice, no comparisons or stories, no greeting.
- Speak to the patient as "you".
Answer with the rewritten text only."""

# One worked example, shown to the model as an earlier turn of the chat,
# answered in the output language.
EXAMPLE_NOTE = "Mild left ventricular hypertrophy. No pericardial effusion."
EXAMPLE_ANSWERS = {
    "en": "The walls of the main pumping chamber on the left side of your heart are a "
          "little thicker than normal. There is no extra fluid around your heart.",
    "es": "Las paredes de la cámara principal de bombeo del lado izquierdo de su corazón son un "
          "poco más gruesas de lo normal. No hay líquido extra alrededor de su corazón.",
}

#: The worked example's terms with their HPO Spanish labels
#: (``inference.lay_terms.spanish_terms(EXAMPLE_NOTE)``), and its answer
#: using them, for :data:`SPANISH_TERMS_PROMPT_VERSION`.
EXAMPLE_SPANISH_TERMS = (("left ventricular hypertrophy", "Hipertrofia ventricular izquierda"),
                         ("pericardial effusion", "Derrame pericárdico"))
EXAMPLE_ANSWER_SPANISH_TERMS = (
    "Tiene una hipertrofia ventricular izquierda leve: las paredes de la cámara principal de bombeo del lado "
    "izquierdo de su corazón son un poco más gruesas de lo normal. No tiene derrame pericárdico: no hay líquido "
    "extra alrededor de su corazón.")


# --- Retrieved examples (EXAMPLES_PROMPT_VERSION) ---------------------------
EXAMPLES_SYSTEM_PROMPT = """You rewrite one sentence of a clinician's note so that the patient can understand it.
Rules:
- Keep the sentence: keep every word a patient understands and replace only the medical words, abbreviations and jargon that a patient would not understand, with plain, everyday words ({reading_level}).
- Keep every fact exactly: numbers, units, doses, drug names, body parts, left and right, who did what, and every negation (no, not, without, denies).
- Add nothing: no new facts, no advice, no explanations beyond the replaced words, no greeting.
Answer with the rewritten sentence only."""

#: Where retrieved examples go: ``"turns"`` (earlier user/assistant turns) or
#: ``"inline"`` (listed inside the last user message). Measured choice, see
#: docs/quality/quality-report.md.
EXAMPLES_PLACEMENT = "turns"
PLACEMENTS = ("turns", "inline")


HINTS_OPENING = "(Plain words from a medical dictionary, use them if they fit: "


def hints_line(hints: Sequence[tuple[str, str]]) -> str:
    """The line that follows the sentence in the last message of a
    :data:`HINTS_PROMPT_VERSION` prompt, e.g. ``"(Plain words from a medical
    dictionary, use them if they fit: hypertension = high blood pressure)"``;
    ``""`` when there are no ``(term, plain words)`` pairs."""
    if not hints:
        return ""
    pairs = "; ".join(f"{term} = {plain}" for term, plain in hints)
    return f"{HINTS_OPENING}{pairs})"


SPANISH_TERMS_OPENING = ("(The Spanish medical terms for these words, from a medical dictionary: "
                         "use them, and explain each in plain words: ")


def spanish_terms_line(terms: Sequence[tuple[str, str]]) -> str:
    """The line that follows the diagnosis in the last message of a
    :data:`SPANISH_TERMS_PROMPT_VERSION` prompt, e.g. ``"(The Spanish
    medical terms ...: pleural effusion = derrame pleural)"``; ``""``
    without ``(term, Spanish label)`` pairs. A label is lower-cased at its
    first letter unless it starts with an abbreviation."""
    if not terms:
        return ""
    pairs = "; ".join(f"{term} = {label if label[:2].isupper() else label[:1].lower() + label[1:]}"
                      for term, label in terms)
    return f"{SPANISH_TERMS_OPENING}{pairs})"


def hints_strip(content: str) -> str:
    """A last message without its :func:`hints_line` or
    :func:`spanish_terms_line`: the sentence."""
    return content.split("\n\n" + HINTS_OPENING, 1)[0].split("\n\n" + SPANISH_TERMS_OPENING, 1)[0]


def prompt_version(examples: Sequence | None = None) -> str:
    """The version to store for messages built with (or without) examples."""
    return PROMPT_VERSION if examples is None else EXAMPLES_PROMPT_VERSION


def _examples_messages(text: str, system: str, examples: Sequence, placement: str,
                       prefix_examples: Sequence = (), hints: Sequence[tuple[str, str]] = ()) -> list[dict[str, str]]:
    """System first, then the fixed ``prefix_examples`` as turns, then the
    examples (least similar first, so the most similar sits next to the
    sentence), then the sentence, followed by :func:`hints_line` when
    ``hints`` are given."""
    if hints:
        text = f"{text}\n\n{hints_line(hints)}"
    ordered = list(examples)[::-1]
    fixed = []
    for example in prefix_examples:
        fixed += [{"role": "user", "content": example.original.strip()},
                  {"role": "assistant", "content": example.reference.strip()}]
    head = [{"role": "system", "content": system}, *fixed]
    if placement == "turns":
        turns = []
        for example in ordered:
            turns += [{"role": "user", "content": example.original.strip()},
                      {"role": "assistant", "content": example.reference.strip()}]
        return [*head, *turns, {"role": "user", "content": text}]
    if placement == "inline":
        if not ordered:
            return [*head, {"role": "user", "content": text}]
        shown = "\n\n".join(f"Note: {e.original.strip()}\nRewritten: {e.reference.strip()}" for e in ordered)
        return [*head, {"role": "user", "content": "How clinicians rewrote similar sentences:\n\n" + shown +
                        f"\n\nRewrite this sentence the same way.\nNote: {text}"}]
    raise KeyError(placement)


def build_messages(diagnosis_text: str, *, reading_level: int = DEFAULT_READING_LEVEL,
                   language: str = DEFAULT_LANGUAGE, examples: Sequence | None = None,
                   placement: str = EXAMPLES_PLACEMENT, prefix_examples: Sequence = (),
                   hints: Sequence[tuple[str, str]] = (),
                   spanish_terms: Sequence[tuple[str, str]] = ()) -> list[dict[str, str]]:
    """Chat messages for one translation.

    Args:
        diagnosis_text: the clinician's text, already validated (non-empty);
            with ``examples``, one sentence (see
            :func:`inference.examples.split_sentences`).
        reading_level: US school grade of the answer, a key of
            :data:`READING_LEVELS`.
        language: ISO 639-1 code of the answer, a key of :data:`LANGUAGES`.
        examples: worked examples for this sentence, most similar first
            (:class:`inference.examples.Example`, anything with
            ``original`` and ``reference``), e.g.
            ``default_pool().retrieve(sentence)``. ``None`` (the default)
            renders the ``PROMPT_VERSION`` messages with the one fixed
            example; a sequence (even empty) renders
            ``EXAMPLES_PROMPT_VERSION``.
        placement: with ``examples``, a key of :data:`PLACEMENTS`.
        prefix_examples: with ``examples``, fixed examples shown as turns
            right after the system message (one set per cluster,
            :meth:`inference.examples.ClusterRouter.route`), so the prefix
            up to them is shared by every sentence of the cluster; pair
            with ``placement="inline"`` to keep the per-sentence examples
            out of that prefix.
        hints: with ``examples``, ``(term, plain words)`` pairs listed after
            the sentence (:func:`hints_line`).
        spanish_terms: without ``examples`` and with ``language="es"``,
            ``(term, Spanish label)`` pairs listed after the diagnosis
            (:func:`spanish_terms_line`; :data:`SPANISH_TERMS_PROMPT_VERSION`).

    Returns:
        ``{"role", "content"}`` dicts, the system message first. Without
        examples: ``[system, example user, example assistant, user]``,
        everything before the last message identical for every request with
        the same level and language. With examples: the system message
        (identical for every request with the same level and language, so
        engines with prefix caching reuse it) then the examples and the
        sentence (``placement``).

    Raises:
        KeyError: unknown reading level, language or placement.
    """
    if examples is not None:
        system = EXAMPLES_SYSTEM_PROMPT.format(reading_level=READING_LEVELS[reading_level])
        if language != "en":
            system += (f"\nThe examples are in English; write your answer in {LANGUAGES[language]}.")
        return _examples_messages(diagnosis_text.strip(), system, examples, placement, prefix_examples, hints)
    system = SYSTEM_PROMPT.format(reading_level=READING_LEVELS[reading_level])
    if language != "en":
        system += f"\nWrite your answer in {LANGUAGES[language]}."
    text, example, answer = diagnosis_text.strip(), EXAMPLE_NOTE, EXAMPLE_ANSWERS[language]
    if spanish_terms and language == "es":
        text = f"{text}\n\n{spanish_terms_line(spanish_terms)}"
        example = f"{example}\n\n{spanish_terms_line(EXAMPLE_SPANISH_TERMS)}"
        answer = EXAMPLE_ANSWER_SPANISH_TERMS
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": example},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": text},
    ]
