"""A translation's engine requests (its parts), rendered from its stored
fields, and the joining of their answers into the one text that is stored.

The fast run streams the parts' answers through :class:`TextJoiner`; the
full-precision re-run renders the same parts and joins its answers with
:func:`translation_parts_join`, so both send the same messages and put the
text together the same way. Which prompt a new translation gets is chosen
where the settings are read (:func:`clinical.translation.prompting.translation_prompt_version`);
here only its stored ``prompt_version`` counts.

Plain Python: a translation is anything with the fields of
:class:`StoredTranslation` (a ``clinical.models.Translation`` row).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from inference.examples import (
    DEFAULT_K,
    NoteSentence,
    cluster_messages,
    default_pool,
    default_router,
    heading_split,
    note_sentences,
)
from inference.lay_terms import spanish_hints
from inference.prompts import EXAMPLES_PROMPT_VERSION, SPANISH_TERMS_PROMPT_VERSION, ClusterPrompt, build_messages


class StoredTranslation(Protocol):
    """The stored fields a translation's requests are rendered from."""

    input_text: str
    reading_level: int
    language: str
    prompt_version: str


@dataclass(frozen=True, slots=True)
class TranslationPart:
    """One request of a translation: generated after the one before it,
    its text streamed after that one's.

    Attributes:
        separator: put between the previous part's explanation and this
            one's (``""`` for the first; ``" "`` or the note's line break;
            :class:`inference.examples.NoteSentence`).
        messages: the chat messages of the request.
        prefix: text copied verbatim before the request's answer (the
            sentence's section headings, :func:`inference.examples.heading_split`;
            ``""`` for none).
        source: the input this request explains, headings included (the
            note's unit, :class:`inference.examples.NoteSentence`, or the
            whole input); ``""`` where not given.
    """

    separator: str
    messages: list[dict[str, str]]
    prefix: str = ""
    source: str = ""


def translation_parts(translation: StoredTranslation) -> list[TranslationPart]:
    """The requests of a translation, in order, rendered from its stored
    input, reading level, language and ``prompt_version`` only (so the fast
    run and the full-precision re-run send the same messages, whatever the
    settings are now).

    * ``2026-11-25.2+c…`` and ``2026-11-25.3+c…`` (:class:`inference.prompts.ClusterPrompt`): one
      part per sentence (:func:`inference.examples.note_sentences`), each
      with its cluster's prefix (:func:`inference.examples.cluster_messages`
      on the shipped pool's clusters for the stored settings; deterministic,
      fitted once per process). With the ``h`` suffix a sentence's leading
      headings are the part's ``prefix`` and the model gets the rest
      (:func:`inference.examples.heading_split`).
    * :data:`inference.prompts.EXAMPLES_PROMPT_VERSION`: one part per
      sentence, each with the ``DEFAULT_K`` most similar pool examples.
    * :data:`inference.prompts.SPANISH_TERMS_PROMPT_VERSION`: one part,
      the whole text with the Spanish labels of its terms
      (:func:`inference.lay_terms.spanish_hints`) listed after it.
    * anything else: one part, the whole text with the instructions of
      ``PROMPT_VERSION``.

    A one-sentence input is rendered from ``input_text`` itself, not from
    its sentence split.

    Raises:
        ValueError: a cluster version whose settings do not fit the pool
            (more clusters than rows).
    """
    options = {"reading_level": translation.reading_level, "language": translation.language}
    units = translation_units(translation)
    cluster = ClusterPrompt.parse(translation.prompt_version)
    if cluster is not None:
        router = default_router(cluster.clusters, cluster.per_cluster)
        return [TranslationPart(unit.separator, cluster_messages(
            unit.sentence, router=router, k=cluster.k, hints=cluster.hints, **options), unit.prefix, unit.source)
            for unit in units]
    if translation.prompt_version == SPANISH_TERMS_PROMPT_VERSION:
        return [TranslationPart("", build_messages(translation.input_text, **options,
                                                   spanish_terms=spanish_hints(translation.input_text)),
                                source=translation.input_text)]
    if translation.prompt_version != EXAMPLES_PROMPT_VERSION:
        return [TranslationPart("", build_messages(translation.input_text, **options),
                                source=translation.input_text)]
    pool = default_pool()
    return [TranslationPart(u.separator, build_messages(u.source, examples=pool.retrieve(u.source, k=DEFAULT_K),
                                                        **options), source=u.source)
            for u in units]


@dataclass(frozen=True, slots=True)
class TranslationUnit:
    """Where one request of a translation stands, without its messages
    (:func:`translation_units`).

    Attributes:
        separator: as :attr:`TranslationPart.separator`.
        prefix: as :attr:`TranslationPart.prefix` (the copied headings).
        source: as :attr:`TranslationPart.source` (headings included).
        sentence: what the model is given: ``source`` without ``prefix``.
    """

    separator: str
    prefix: str
    source: str
    sentence: str


def translation_units(translation: StoredTranslation) -> list[TranslationUnit]:
    """The units of :func:`translation_parts`, in order, without rendering
    a prompt (no example pool is loaded): one per note sentence for the
    example prompts, else one for the whole input. Cheap enough to call on
    every read of a translation."""
    cluster = ClusterPrompt.parse(translation.prompt_version)
    if cluster is None and translation.prompt_version != EXAMPLES_PROMPT_VERSION:
        return [TranslationUnit("", "", translation.input_text, translation.input_text)]
    units = note_sentences(translation.input_text)
    if len(units) <= 1:
        units = [NoteSentence(translation.input_text, "")]
    headings = cluster is not None and cluster.headings
    return [_unit(u, headings) for u in units]


def _unit(unit: NoteSentence, headings: bool) -> TranslationUnit:
    prefix, sentence = heading_split(unit.text) if headings else ("", unit.text)
    return TranslationUnit(unit.separator, prefix, unit.text, sentence)


def translation_message_parts(translation: StoredTranslation) -> list[list[dict[str, str]]]:
    """The chat messages of each request of a translation, in order (see
    :func:`translation_parts`): one list per sentence for the example
    prompts, a one-element list for one sentence or the ``PROMPT_VERSION``
    prompt. A re-run that reproduces the translation generates each and
    joins the answers with :func:`translation_parts_join`, as
    :func:`clinical.translation.generation.translation_generate` does."""
    return [part.messages for part in translation_parts(translation)]


#: A text that ends a sentence: . ! ? or an ellipsis, maybe inside
#: closing quotes or brackets.
SENTENCE_END = r"[.!?\u2026]['\"\u201d\u2019)\]]*$"
_SENTENCE_END = re.compile(SENTENCE_END)
#: Where no period is added: the end of a sentence, or a clause mark
#: (comma, colon, semicolon, dash, an opening bracket) that a period after
#: it would not mend.
_OPEN_END = re.compile(SENTENCE_END + r"|[,:;\-\u2013\u2014(\[]$")


_LOWER_FIRST_WORD = re.compile(r"[a-z]+(?![A-Za-z0-9])")
#: An answer's text so far that may still be the start of a longer first
#: word ("p" of "pH", "x" of "x2"): lower-case letters only.
_OPEN_FIRST_WORD = re.compile(r"[a-z]+")


def line_start_capitalized(text: str) -> str:
    """``text`` with its first word capitalised when that word is all in
    lower-case letters ("the patient denies..." -> "The patient denies...";
    the model often copies the lower-case rewrites of its examples). A word
    with a capital or a digit in it ("pH", "mL", "x2") is left as written."""
    if _LOWER_FIRST_WORD.match(text):
        return text[0].upper() + text[1:]
    return text


class TextJoiner:
    """Joins the streamed pieces of several requests into one text, the
    way it is stored: each request's text without its leading and trailing
    whitespace, after its separator (only once it has text, so an empty
    answer adds nothing) and its part's verbatim prefix, which is streamed
    with the answer's first text (so every streamed piece carries model
    text, and an empty answer drops its heading too). Whitespace at the
    end of a piece is held back until more text of the same request
    follows, so what is streamed, put together, is exactly the stored text.

    Sentences of one line (separator ``" "``) keep their boundary: where
    the text so far ends without a sentence's end (:data:`SENTENCE_END`)
    and not on a comma, a period goes before the separator, and an answer
    that then starts with a lower-case word (and has no copied heading)
    gets a capital ("soft, not painful. No enlarged liver", not "soft, not
    painful no enlarged liver"). After an answer cut at the token limit
    the mark is an ellipsis instead ("There is… Stable."), so the cut
    shows. Line breaks are kept as written: notes list findings line by
    line without periods. An answer that starts the text or a line (and
    has no copied heading) starts with a capital too. Both capitals follow
    one rule (:func:`line_start_capitalized`): a first word with a capital
    or a digit ("pH", "mL", "x2") is left as written.

    That rule reads the answer's whole first word, which the engine may
    stream in fragments ("p", "H"): an answer that starts with lower-case
    letters is held back until its first word ends (a space or mark in a
    later piece, or :meth:`end`), so such a word reaches the screen one
    token after the engine sent it. TTFT is measured at the engine's first
    token (``clinical.translation.generation.StreamMeter``), not here.
    """

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self._separator = ""
        self._pending = ""
        self._head = ""  # the answer's first text, held until its first word ends
        self._started = False
        self._prefix = ""
        self._after_cut = False

    def begin(self, separator: str, prefix: str = "", *, after_cut: bool = False) -> None:
        """A new request starts; its text goes after ``separator`` and
        ``prefix`` (:attr:`TranslationPart.prefix`). ``after_cut``: the
        previous request's answer stopped at the token limit. The previous
        request's answer is ended first (:meth:`end`; a caller that streams
        calls that itself, to stream what it returns)."""
        self.end()
        self._separator, self._pending, self._head, self._started = separator, "", "", False
        self._prefix = prefix.lstrip()
        self._after_cut = after_cut

    def feed(self, text: str) -> str:
        """The part of ``text`` to stream now (possibly empty)."""
        if self._started:
            return self._show(self._pending + text)
        self._head = (self._head + text).lstrip()
        if self._prefix or not _OPEN_FIRST_WORD.fullmatch(self._head):
            return self._start()
        return ""  # "p" may begin "pH": wait for the word's end

    def end(self) -> str:
        """The request's answer is complete: the part held back to stream
        now (a one-word answer such as "stable"), possibly empty."""
        return "" if self._started else self._start()

    def _start(self) -> str:
        text, self._head = self._head, ""
        if not text:
            return ""
        separator = self._separator if self.pieces else ""
        capital = not self._prefix and (not self.pieces or "\n" in separator)
        if separator == " ":  # the same line: the previous sentence ends here
            previous = self.pieces[-1]
            if self._after_cut or not _OPEN_END.search(previous):
                separator = ("\u2026" if self._after_cut else ".") + separator
            capital = not self._prefix and bool(_SENTENCE_END.search(separator.rstrip() or previous))
        if capital:
            text = line_start_capitalized(text)
        self._started = True
        return self._show(separator + self._prefix + text)

    def _show(self, text: str) -> str:
        shown = text.rstrip()
        self._pending = text[len(shown):]
        if shown:
            self.pieces.append(shown)
        return shown

    @property
    def text(self) -> str:
        """Everything streamed so far."""
        return "".join(self.pieces)


def translation_parts_join(parts: Sequence[TranslationPart | TranslationUnit], texts: Sequence[str], *,
                           cut: Sequence[bool] = ()) -> str:
    """The one text of a translation from its parts' answers, joined by
    the :class:`TextJoiner` the fast run streams through, so a re-run's
    text is put together exactly as the fast text was stored.

    Args:
        parts: :func:`translation_parts` or :func:`translation_units` of
            the translation (only their separators and prefixes are read).
        texts: the answer to each part, in order (as many as ``parts``).
        cut: for each part, whether its answer stopped at the token limit
            (finish reason ``"length"``), so the next sentence follows an
            ellipsis as in the stream; empty: none was.

    Raises:
        ValueError: not one text per part, or ``cut`` neither empty nor
            one flag per part.
    """
    return translation_parts_spans(parts, texts, cut=cut)[0]


def translation_parts_spans(parts: Sequence[TranslationPart | TranslationUnit], texts: Sequence[str], *,
                            cut: Sequence[bool] = ()) -> tuple[str, list[tuple[int, int] | None]]:
    """:func:`translation_parts_join`, and where each part's text stands in
    the joined text.

    Args:
        parts: :func:`translation_parts` or :func:`translation_units` of
            the translation (only their separators and prefixes are read).
        texts, cut: as :func:`translation_parts_join`.

    Returns:
        ``(text, spans)``: one ``(start, end)`` character offset pair into
        ``text`` per part, the part's copied heading included and its
        separator (and the period or ellipsis the joiner put before it,
        which ends the sentence before) excluded; ``None`` for a part
        whose answer was empty (it adds nothing to the text).

    Raises:
        ValueError: as :func:`translation_parts_join`.
    """
    if len(parts) != len(texts):
        raise ValueError(f"{len(texts)} texts for {len(parts)} parts")
    if cut and len(cut) != len(parts):
        raise ValueError(f"{len(cut)} cut flags for {len(parts)} parts")
    joiner = TextJoiner()
    spans: list[tuple[int, int] | None] = []
    for index, (part, text) in enumerate(zip(parts, texts)):
        joiner.begin(part.separator, part.prefix, after_cut=bool(cut) and index > 0 and cut[index - 1])
        before = len(joiner.text)
        joiner.feed(text)
        joiner.end()
        added = joiner.text[before:]
        if not added:
            spans.append(None)
            continue
        lead = 1 if before and added[0] in ".\u2026" else 0  # the mark ending the sentence before
        lead += len(added[lead:]) - len(added[lead:].lstrip())
        spans.append((before + lead, len(joiner.text)))
    return joiner.text, spans


def translation_messages(translation: StoredTranslation) -> list[dict[str, str]]:
    """The chat messages of a translation made in one request (the fast
    run and the full-precision re-run use the same).

    Raises:
        ValueError: the translation was generated sentence by sentence in
            several requests, or its part has a verbatim heading; use
            :func:`translation_parts` (a single request of the first
            sentence would re-run only part of the text).
    """
    parts = translation_parts(translation)
    if len(parts) != 1 or parts[0].prefix:
        raise ValueError(f"translation {getattr(translation, 'pk', None)} was generated in {len(parts)} requests, one per "
                         "sentence or with a verbatim heading: use translation_message_parts and translation_parts")
    return parts[0].messages
