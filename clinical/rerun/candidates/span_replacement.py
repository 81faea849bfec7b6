"""The ``span_replacement`` candidate: the input copied, with only its hard
terms replaced by plain words. The model is asked for ``term => plain
words`` lines (:data:`SPAN_SYSTEM_PROMPT`, :func:`span_messages`), read by
:func:`span_lines_parse`; terms it missed are kept and explained by their
HPO layperson synonyms (:mod:`clinical.quality.glossary`,
:func:`span_glossary_pairs`); each replacement is kept only if the text with it still
passes the safety and faithfulness checks (:func:`span_replacements_apply`),
so the candidate passes both checks by construction. English output only.
"""

from __future__ import annotations

import re

from clinical.quality import measure as quality
from clinical.quality.safety import find_drugs
from inference.lay_terms import easy_word, lay_hints

#: Most words a replacement may have: plain words for a term, not an explanation.
SPAN_MAX_WORDS = 8

#: Version of the span prompt below; recorded per candidate.
SPAN_PROMPT_VERSION = "span-2026-11-25.1"
SPAN_SYSTEM_PROMPT = """You help a patient read one sentence of a clinician's note.
List the medical words, abbreviations and jargon in the sentence that a patient would not understand, one per line, as:
term => plain words
Copy each term exactly as it is written in the sentence. The plain words replace the term inside the sentence, so they must fit there and say the same thing.
Do not list numbers, doses, drug names, left or right, or words such as no and not. Write nothing else."""
SPAN_EXAMPLE_NOTE = "Chest x-ray shows cardiomegaly without pleural effusion ."
SPAN_EXAMPLE_ANSWER = "cardiomegaly => an enlarged heart\npleural effusion => fluid around the lungs"


def span_messages(text: str) -> list[dict[str, str]]:
    """The chat asking for ``term => plain words`` lines for ``text``:
    ``[system, example user, example assistant, user]``."""
    return [{"role": "system", "content": SPAN_SYSTEM_PROMPT},
            {"role": "user", "content": SPAN_EXAMPLE_NOTE},
            {"role": "assistant", "content": SPAN_EXAMPLE_ANSWER},
            {"role": "user", "content": text.strip()}]


_ARROW = re.compile(r"\s*(?:=>|->|→)\s*")
_SIDES_AND_NEGATIONS = re.compile(r"\b(left|right|bilateral|both|no|not|non|without|denies|negative|absent)\b",
                                  re.IGNORECASE)


#: An abbreviation as a whole term: two to five capitals, maybe a plural "s" ("CC", "CHF", "MIs").
_ABBREVIATION = re.compile(r"^([A-Z]{2,5})s?$")


def _spells(abbreviation: str, plain: str) -> bool:
    """``plain`` expands ``abbreviation``: its letters are, in order, the
    first letters of words of ``plain`` ("CC", "chief complaint"; "CHF",
    "congestive heart failure"; other words may come between, "ET",
    "a breathing tube in the trachea" does not)."""
    initials = iter(word[0] for word in re.findall(r"[a-z]+", plain.lower()))
    return all(letter in initials for letter in abbreviation.lower())


def _drops_an_edge_word(words: list[str], plain: str) -> bool:
    """An easy word at the start or end of the term ("stable" of "Stable
    expressive aphasia", "needle" of "needle puncture mark") is missing from
    the plain words (compared by its first four letters): the replacement
    would delete a word the patient could read, and no check counts
    qualifiers such as "stable", "mild" or "needle"."""
    plain_words = re.findall(r"[a-z][a-z'-]*", plain.lower())
    edges = {words[0], words[-1]} if len(words) > 1 else set()
    return any(_easy(w) and not any(p.startswith(w[:4]) for p in plain_words) for w in edges)


def _easy(word: str) -> bool:
    """On the easy list (:func:`inference.lay_terms.easy_word`), itself or
    as a plain inflection of an easy word ("marked", "lungs")."""
    return easy_word(word, ("s", "es", "ed", "d", "ing", "ly"))


def span_lines_parse(answer: str) -> list[tuple[str, str]]:
    """Read the model's ``term => plain words`` lines.

    A line is kept when it has a term and plain words that differ from it,
    the plain words have at most :data:`SPAN_MAX_WORDS` words, and the term
    is hard (a word not on the Dale-Chall easy list, nor an inflection of
    one) and names no number,
    drug, side or negation (those facts must stay as written). An
    abbreviation ("CC") is replaced only by words whose first letters spell
    it (:func:`_spells`: "chief complaint", not the guess "Communication"):
    no check can tell a wrong expansion from a right one, so this lane,
    which copies the sentence to stay faithful, keeps an abbreviation it
    cannot expand letter by letter as written. A term of several words
    whose first or last word is easy keeps that word in its plain words
    (:func:`_drops_an_edge_word`), else the line is dropped and the
    vocabulary's replacement, if any, applies to the hard words alone.

    Returns:
        ``[(term, plain words)]`` in the answer's order, the term as written
        by the model (matched against the sentence later).
    """
    pairs: list[tuple[str, str]] = []
    for line in answer.splitlines():
        parts = _ARROW.split(line.strip(), maxsplit=1)
        if len(parts) != 2:
            continue
        term = parts[0].lstrip("-*•0123456789.) ").strip().strip("\"'`*").strip()
        plain = parts[1].strip().strip("\"'`*").strip().rstrip(".;,").strip()
        words = re.findall(r"[a-z][a-z'-]*", term.lower())
        if (not term or not plain or plain.lower() == term.lower() or len(plain.split()) > SPAN_MAX_WORDS
                or not words or all(_easy(w) for w in words) or re.search(r"\d", term)
                or _SIDES_AND_NEGATIONS.search(term) or find_drugs(term)):
            continue
        if (abbreviation := _ABBREVIATION.match(term)) and not _spells(abbreviation.group(1), plain):
            continue
        if _drops_an_edge_word(words, plain):
            continue
        pairs.append((term, plain))
    return pairs


def span_glossary_pairs(text: str) -> list[tuple[str, str]]:
    """Replacements from the vocabulary: each HPO term of ``text`` that has
    a layperson synonym (:func:`inference.lay_terms.lay_hints`), e.g.
    ``("pericardial effusion", "fluid around heart")``."""
    return lay_hints(text)


_ARTICLE_BEFORE = re.compile(r"(?<!\w)(a|an|the)\s+$", re.IGNORECASE)
_ARTICLE_START = re.compile(r"^(a|an|the)\s+", re.IGNORECASE)
#: The word before a bare term that makes the term's own article wrong: a
#: determiner ("her generalized malaise") or a modifier ("No obvious
#: lymphadenopathy", "Immediate hyperemia": an adjective's common English
#: endings, past participles such as "enlarged", and the degree words of
#: clinical notes that have none of them). A plain "a growth" after it would
#: read "obvious a growth".
_BARE_TERM_BEFORE = re.compile(
    r"(?<!\w)(?:her|his|your|my|their|its|our|this|that|these|those|any|some|no)\s+$"
    r"|(?<![\w-])(?:[a-z]+(?:ous|ate|al|ic|ive|ful|ent|ant|ary|ar|ible|able|less|ed)"
    r"|mild|moderate|severe|marked|slight|small|large|new|old|diffuse|stable|gross|early|late|recent|prior|"
    r"further|other|more|less|much|little|few|several|many)\s+$",
    re.IGNORECASE)


def _article_fit(text: str, start: int, plain: str) -> tuple[int, str]:
    """Where a replacement at ``start`` begins, and its words, so that the
    article before it still fits: "an adrenal adenoma" with "a tumor of the
    adrenal gland" gives "a tumor of the adrenal gland", not "an a tumor";
    "a edema"-style mismatches become "an"/"a" by the plain words' first letter;
    after a determiner or a modifier and no article ("her generalized
    malaise", "No obvious lymphadenopathy") the plain words lose their own
    article ("her feeling of being unwell", "No obvious growth ...").
    Dropping it is always grammatical there: the term stood bare."""
    before = _ARTICLE_BEFORE.search(text[:start])
    if before is None:
        # "her a feeling" → "her feeling"; "No obvious a growth" → "No obvious growth"
        if _BARE_TERM_BEFORE.search(text[:start]):
            return start, _ARTICLE_START.sub("", plain, count=1)
        return start, plain
    if _ARTICLE_START.match(plain):
        fitted = plain if before.group(1)[:1].islower() else plain[:1].upper() + plain[1:]
        return before.start(), fitted
    if before.group(1).lower() in ("a", "an"):
        article = "an" if plain[:1].lower() in "aeiou" else "a"
        article = article if before.group(1)[:1].islower() else article.capitalize()
        return before.start(), f"{article} {plain}"
    return start, plain


def span_replacements_apply(*, text: str, pairs: list[tuple[str, str]],
                            language: str = "en") -> tuple[str, list[tuple[str, str]]]:
    """Copy ``text`` and replace the terms of ``pairs`` (the first
    occurrence not inside one already replaced, whole words, any case) by their plain words, one at a time, keeping a
    replacement only when the text with it still passes the safety and
    faithfulness checks against ``text``. So the result passes both checks whenever ``text``
    itself does (a copy always passes the safety check).

    Returns:
        ``(new text, [(term as written in text, plain words)])`` with the
        replacements kept, in the order applied.
    """
    spans: list[tuple[int, int, str]] = []
    kept: list[tuple[str, str]] = []

    def render(chosen: list[tuple[int, int, str]]) -> str:
        out, at = [], 0
        for start, end, plain in sorted(chosen):
            out += [text[at:start], plain]
            at = end
        result = "".join(out) + text[at:]
        return result[:1].upper() + result[1:] if chosen and min(chosen)[0] == 0 else result

    for term, plain in pairs:
        match = next((m for m in re.finditer(rf"(?<!\w){re.escape(term)}(?!\w)", text, re.IGNORECASE)
                      if not any(m.start() < end and start < m.end() for start, end, _ in spans)), None)
        if match is None:
            continue
        start, fitted = _article_fit(text, match.start(), plain)
        trial = [*spans, (start, match.end(), fitted)]
        measured = quality.output_quality(input_text=text, output_text=render(trial), language=language)
        if measured.safety.passed and measured.faithfulness.passed:
            spans = trial
            kept.append((match.group(0), plain))
    return render(spans), kept


def span_candidate_text(*, text: str, answer: str, language: str = "en") -> tuple[str, list[tuple[str, str]]]:
    """The ``span_replacement`` text: ``text`` with the model's replacements
    (``answer``, :func:`span_lines_parse`) then the vocabulary's
    (:func:`span_glossary_pairs`) for terms it missed, longer terms first
    within each, through :func:`span_replacements_apply`; the vocabulary's
    also for a term whose model replacement the checks undid. A vocabulary
    term is kept and explained by its layperson synonym in parentheses
    ("pleural effusion (fluid around lungs)"): the patient reads the word
    the clinician will say, and its meaning in the vocabulary's words."""
    model_pairs = sorted(span_lines_parse(answer), key=lambda p: -len(p[0]))
    # after the model's: a term whose replacement was kept is taken by then, one the checks undid is not
    vocabulary = sorted(((term, f"{term} ({plain})") for term, plain in span_glossary_pairs(text)),
                        key=lambda p: -len(p[0]))
    return span_replacements_apply(text=text.strip(), pairs=[*model_pairs, *vocabulary], language=language)
