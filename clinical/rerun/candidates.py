"""The re-run's candidates: what the worker generates when the confidence
gate fires, how each is scored, and which one replaces the fast text.

On the CPU the full-precision re-run of the same messages reproduces the
fast text word for word (docs/quality/confidence-survey.md: 7 of 10 identical),
so re-running only that repeats the output the gate did not trust. The
re-run therefore tries up to four candidates, in the order of
``RERUN_CANDIDATES`` (default :data:`CANDIDATE_NAMES`):

``full_precision``
    the translation's own messages, greedy: the seed's design (on a GPU the
    FP32 run of the fast path's FP8 prompt).
``retrieved_examples``
    the prompt with worked examples retrieved for the sentence
    (:func:`inference.examples.default_pool`, ``k`` = 6, the measured
    default), English output and one sentence only (a heading the
    translation copied stays copied). When the fast run
    already used retrieved examples (``EXAMPLES_PROMPT_VERSION``) it
    gets ``k`` = 8, so the prompt is not the same one again.
``span_replacement``
    the input copied, with only its hard terms replaced by plain words: the
    model is asked for ``term => plain words`` lines
    (:data:`SPAN_SYSTEM_PROMPT`), and HPO layperson synonyms
    (:mod:`clinical.quality.glossary`) fill in terms it missed. Each
    replacement is kept only if the text with it still passes the safety and
    faithfulness checks (:func:`span_replacements_apply`), so the candidate
    passes both checks by construction: the safety net. English output only.
``sampled``
    the translation's messages at temperature :data:`SAMPLED_TEMPERATURE`,
    with a seed of its own (:func:`sampled_seed`, from the input and its
    prompt version), so the same translation gets the same sampled
    candidate whatever the worker ran before (and a benchmark repeats).

Each candidate is measured the way the product measures an output
(:func:`clinical.quality.measure.output_quality`: safety, faithfulness,
readability) plus its confidence (:func:`inference.confidence.sequence_confidence`);
:func:`candidate_select` picks the one that replaces the fast text (rule and
its source there) and :func:`candidate_good_enough` says when to stop early.
Plain functions over values: the engine calls are in
:mod:`clinical.rerun.execute`.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from clinical.models import RERUN_AS_WRITTEN, RERUN_KEPT_FAST_TEXT, Translation, TranslationPart, translation_parts
from clinical.quality import measure as quality
from clinical.quality.gate import gate_threshold
from clinical.quality.safety import find_drugs
from inference.base import GenerationParams
from inference.confidence import sequence_confidence
from inference.examples import DEFAULT_K, ExamplePool, default_pool, heading_split, normalise, split_sentences
from inference.lay_terms import easy_word, lay_hints
from inference.prompts import EXAMPLES_PROMPT_VERSION, ClusterPrompt, build_messages

FULL_PRECISION = "full_precision"
RETRIEVED_EXAMPLES = "retrieved_examples"
SPAN_REPLACEMENT = "span_replacement"
SAMPLED = "sampled"
#: ``Rerun.candidate`` when no candidate may replace the fast text
#: (:class:`Incumbent`): the fast text stands.
FAST_TEXT = RERUN_KEPT_FAST_TEXT
#: ``Rerun.candidate`` when the text the re-run would deliver is still
#: doubted by the model's own check and the diagnosis as written is
#: delivered instead (:func:`candidate_as_written`; ``SELF_CHECK_COPY=always``).
AS_WRITTEN = RERUN_AS_WRITTEN
#: Every candidate, in the default order (``RERUN_CANDIDATES``).
CANDIDATE_NAMES = (FULL_PRECISION, RETRIEVED_EXAMPLES, SPAN_REPLACEMENT, SAMPLED)

#: Examples for ``retrieved_examples``: the measured default, or more when the
#: fast run already had that many (a different prompt, not the same one again).
RETRIEVED_K = DEFAULT_K
RETRIEVED_K_AGAIN = 8
#: Temperature of ``sampled`` (0.7: varied wording that still follows the
#: prompt; the logprobs recorded are the untempered ones, see the engines).
SAMPLED_TEMPERATURE = 0.7
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


def candidate_names() -> tuple[str, ...]:
    """The candidates to try, in order, from ``settings.RERUN_CANDIDATES``
    (a comma list of :data:`CANDIDATE_NAMES`).

    Raises:
        ImproperlyConfigured: an unknown name, or none at all.
    """
    names = tuple(settings.RERUN_CANDIDATES)
    unknown = [name for name in names if name not in CANDIDATE_NAMES]
    if unknown or not names:
        raise ImproperlyConfigured(f"RERUN_CANDIDATES must list some of {', '.join(CANDIDATE_NAMES)}; "
                                   f"got {','.join(names) or 'nothing'}")
    return names


@dataclass(frozen=True)
class CandidatePlan:
    """One generation to run for a candidate.

    Attributes:
        name: one of :data:`CANDIDATE_NAMES`.
        messages: the chat to generate from.
        params: sampling settings (``max_tokens`` in tokens).
        prompt_version: the version of ``messages`` (the gate's threshold is
            calibrated per prompt version).
        skipped: why the candidate does not apply to this translation
            (``messages`` is then empty and nothing is generated).
        parts: for a translation generated sentence by sentence or with a
            verbatim heading (:func:`clinical.models.translation_parts`),
            each part (its messages, separator and prefix), generated in order and joined with
            :func:`clinical.models.translation_parts_join` (``messages`` is
            then empty); empty for one request.
    """

    name: str
    messages: list[dict[str, str]]
    params: GenerationParams
    prompt_version: str
    skipped: str = ""
    parts: tuple[TranslationPart, ...] = ()


def copied_heading(translation: Translation) -> tuple[str, str]:
    """``(headings, the rest)`` of the input when the translation's prompt
    copies its headings (:class:`inference.prompts.ClusterPrompt`
    ``headings``; :func:`inference.examples.heading_split`), else ``("",
    input)``: the ``retrieved_examples`` and ``span_replacement``
    candidates rewrite only the rest and keep the headings as written."""
    cluster = ClusterPrompt.parse(translation.prompt_version)
    if cluster is None or not cluster.headings:
        return "", translation.input_text
    return heading_split(translation.input_text)


def sampled_seed(translation: Translation) -> int:
    """The ``sampled`` candidate's seed: the first 8 bytes of the SHA-256 of
    the input text and its prompt version, as an unsigned integer below
    2**63 (vLLM and NumPy take it). Stable across workers and restarts."""
    digest = hashlib.sha256(f"{translation.prompt_version}\n{translation.input_text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def candidate_plan(*, translation: Translation, name: str,
                   messages: list[dict[str, str]] | list[TranslationPart] | None = None,
                   pool: ExamplePool | None = None) -> CandidatePlan:
    """What to generate for candidate ``name`` of ``translation`` (see the
    module docstring); ``span_replacement`` generates its term list here and
    builds its text with :func:`span_candidate_text`.

    ``messages`` (default :func:`clinical.models.translation_parts`) are
    the fast run's messages (or its parts) that ``full_precision`` and ``sampled`` repeat;
    ``pool`` (default the shipped one) is where ``retrieved_examples`` looks.
    Both exist for the cross-fitted benchmark (``python -m bench rerun_fix``),
    which must not show a sentence examples from its own half.

    Raises:
        KeyError: ``name`` is not one of :data:`CANDIDATE_NAMES`.
    """
    max_tokens = settings.MAX_OUTPUT_TOKENS
    if name in (FULL_PRECISION, SAMPLED):
        params = (GenerationParams(max_tokens=max_tokens) if name == FULL_PRECISION else
                  GenerationParams(max_tokens=max_tokens, temperature=SAMPLED_TEMPERATURE,
                                   seed=sampled_seed(translation)))
        if messages and not isinstance(messages[0], TranslationPart):
            return CandidatePlan(name, messages, params, translation.prompt_version)
        parts = list(messages) if messages else translation_parts(translation)
        if len(parts) > 1 or parts[0].prefix:
            return CandidatePlan(name, [], params, translation.prompt_version, parts=tuple(parts))
        return CandidatePlan(name, parts[0].messages, params, translation.prompt_version)
    if name == RETRIEVED_EXAMPLES:
        if translation.language != "en" or len(split_sentences(translation.input_text)) != 1:
            return CandidatePlan(name, [], GenerationParams(), EXAMPLES_PROMPT_VERSION,
                                 skipped="not one sentence in English")
        k = RETRIEVED_K_AGAIN if translation.prompt_version == EXAMPLES_PROMPT_VERSION else RETRIEVED_K
        heading, sentence = copied_heading(translation)
        examples = (pool or default_pool()).retrieve(sentence, k=k)
        messages = build_messages(sentence, reading_level=translation.reading_level,
                                  language=translation.language, examples=examples)
        if heading:
            return CandidatePlan(name, [], GenerationParams(max_tokens=max_tokens), EXAMPLES_PROMPT_VERSION,
                                 parts=(TranslationPart("", messages, heading),))
        return CandidatePlan(name, messages, GenerationParams(max_tokens=max_tokens), EXAMPLES_PROMPT_VERSION)
    if name == SPAN_REPLACEMENT:
        if translation.language != "en":
            return CandidatePlan(name, [], GenerationParams(), SPAN_PROMPT_VERSION,
                                 skipped="the copied sentence is English")
        return CandidatePlan(name, span_messages(copied_heading(translation)[1]),
                             GenerationParams(max_tokens=min(max_tokens, 128)), SPAN_PROMPT_VERSION)
    raise KeyError(name)


# --------------------------------------------------------------- span replacement

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
    within each, through :func:`span_replacements_apply`."""
    model_pairs = sorted(span_lines_parse(answer), key=lambda p: -len(p[0]))
    seen = {term.lower() for term, _ in model_pairs}
    vocabulary = sorted((p for p in span_glossary_pairs(text) if p[0].lower() not in seen), key=lambda p: -len(p[0]))
    return span_replacements_apply(text=text.strip(), pairs=[*model_pairs, *vocabulary], language=language)


# --------------------------------------------------------------- scoring

@dataclass(frozen=True)
class Candidate:
    """One candidate's output, measured.

    Attributes:
        name: one of :data:`CANDIDATE_NAMES`.
        input_text: the translation's input it was measured against.
        text: the output text (stripped).
        logprobs: natural-log probability of each generated token; for
            ``span_replacement``, those of its term list.
        ms: generation time (ms).
        prompt_version: the version of the messages it was generated from.
        quality: the product's measures of ``text`` against the input.
        replaced: ``span_replacement`` only: ``[(term, plain words)]`` kept.
        copied: the text was built from the input, not written by the model
            (``span_replacement``).
        self_check: the model's own check of ``text`` against the input
            (P(yes), :func:`inference.self_check.self_check_run`), ``None``
            where the gate reads the confidence (no self-check threshold) or
            it did not run.
    """

    name: str
    input_text: str
    text: str
    logprobs: tuple[float, ...]
    ms: float
    prompt_version: str
    quality: quality.OutputQuality
    replaced: tuple[tuple[str, str], ...] = ()
    copied: bool = False
    self_check: float | None = None
    confidence: float | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "confidence", sequence_confidence(self.logprobs))

    @property
    def passed(self) -> bool:
        """Both checks pass: nothing of the input lost, nothing added."""
        return self.quality.safety.passed and self.quality.faithfulness.passed

    @property
    def problems(self) -> int:
        """Facts the safety check finds missing plus statements the
        faithfulness check flags (0 when :attr:`passed`)."""
        return len(self.quality.safety.missing) + len(self.quality.faithfulness.flags)

    def record(self) -> dict:
        """The compact record stored on ``Rerun.candidates`` and in the audit
        event, no clinical text: ``{"name", "safety_passed",
        "faithfulness_passed", "safety_missing": {kind: n},
        "faithfulness_flags": {kind: n}, "confidence", "tokens", "ms",
        "fkgl", "prompt_version", "self_check"}`` (+ ``"replaced": n`` for
        span replacement)."""
        record = {
            "name": self.name,
            "safety_passed": self.quality.safety.passed,
            "faithfulness_passed": self.quality.faithfulness.passed,
            "safety_missing": self.quality.safety.missing_counts(),
            "faithfulness_flags": self.quality.faithfulness.counts_by_kind(),
            "confidence": None if self.confidence is None else round(self.confidence, 4),
            "tokens": len(self.logprobs),
            "ms": round(self.ms, 1),
            "fkgl": self.quality.readability.output_fkgl,
            "prompt_version": self.prompt_version,
            "self_check": None if self.self_check is None else round(self.self_check, 4),
        }
        if self.copied:
            record["replaced"] = len(self.replaced)
        return record


def candidate_measure(*, translation: Translation, name: str, text: str, logprobs: list[float], ms: float,
                      prompt_version: str, replaced: list[tuple[str, str]] | None = None,
                      self_check: float | None = None) -> Candidate:
    """Measure one candidate's ``text`` against the translation's input
    (:func:`clinical.quality.measure.output_quality`, about 10 ms);
    ``self_check`` is its P(yes) when the model checked it."""
    measured = quality.output_quality(input_text=translation.input_text, output_text=text.strip(),
                                      language=translation.language)
    return Candidate(name=name, input_text=translation.input_text, text=text.strip(), logprobs=tuple(logprobs), ms=ms, prompt_version=prompt_version,
                     quality=measured, replaced=tuple(replaced or ()), copied=name == SPAN_REPLACEMENT,
                     self_check=self_check)


def candidate_tier(candidate: Candidate) -> int:
    """2: a text the model wrote that is not the input again; 1: the input
    with at least one term replaced; 0: the input unchanged (same words and
    punctuation, any case or spacing: :func:`inference.examples.normalise`),
    or a question where the input asks none ("how often does the patient
    urinate?" for "UROLOGICAL : Frequency ."): like the input unchanged it
    passes every check and explains nothing, since it states no finding."""
    if normalise(candidate.text) == normalise(candidate.input_text) or _asks(candidate):
        return 0
    return 1 if candidate.copied else 2


def _asks(candidate: Candidate) -> bool:
    """The candidate asks a question and the input asks none."""
    return "?" in candidate.text and "?" not in candidate.input_text


def _fkgl_within(candidate: Candidate, reading_level: int) -> bool:
    fkgl = candidate.quality.readability.output_fkgl
    return fkgl is not None and fkgl <= reading_level


def candidate_select(candidates: list[Candidate], *, reading_level: int,
                     incumbent: Incumbent | None = None,
                     self_check_threshold: float | None = None) -> Candidate | None:
    """The candidate that replaces the fast text, or ``None`` when the fast
    text stands.

    Rule: among the candidates that pass both the safety and the
    faithfulness check (with an ``incumbent``, the fast text that passed both
    checks, :func:`incumbent_for`: only those it allows,
    :meth:`Incumbent.allows`), the best by, in order,

    1. what it is (:func:`candidate_tier`): a text the model wrote that
       differs from the input, above the input with some terms replaced
       (``span_replacement``, the safety net: on laymaker-dev it scored
       SARI 35.4 against 40.4 for retrieved examples, issue 22, and its
       confidence is that of a term list, not of the text), above the
       input unchanged (it passes every check but explains nothing);
    2. the model's own check (P(yes), :attr:`Candidate.self_check`) rounded
       to 0.01 when every candidate that passed has one: it ranks a wrong
       text below a correct or lossy one of the same sentence in 61 of 77
       hand-judged pairs (docs/quality/self-check.md); else confidence
       rounded to 0.01 (geometric-mean token probability: higher is the
       model's more certain reading. It is a weak ranker of failing outputs
       (AUROC 0.57, clinical/quality/gate_calibration.json), so it only
       orders outputs that already passed both checks; across these
       candidates it also follows the measured order, retrieved examples
       above the plain prompt above sampling, which draws less likely
       tokens by design);
    3. FKGL at or under ``reading_level`` (the grade the clinician asked for);
    4. lower FKGL;
    5. earlier in ``RERUN_CANDIDATES``.

    When none passes: with an ``incumbent``, ``None`` (the fast text
    stands); else the one with the fewest failed checks, then the fewest
    problems (missing facts plus flagged statements), then the highest
    confidence, then the earliest: the caller records it and its failed
    checks, so the clinician is told to review it.

    Then, with ``self_check_threshold``: where the text this rule delivers
    (the fast text when it stands) is under it, the model doubts it, and a
    candidate that is the input unchanged (same words, :func:`inference.examples.normalise`),
    passes both checks and is checked at or above the threshold is
    delivered instead (the highest P(yes), then the earliest): a wrong text
    is worse than none, and the clinician is told it is the diagnosis as
    written. Measured on laymaker-dev (docs/quality/rerun-select-self-check.md,
    every candidate of the 62 gated rows replayed, cross-fitted folds,
    hand-judged): on fold A wrong texts 9 -> 6, correct 7 -> 10; on fold B
    wrong 1 -> 1, correct 17 -> 16; SARI of the gated rows 36.9 -> 36.1 and
    46.4 -> 41.4 (a copy explains nothing). Letting the input with terms
    replaced (tier 1) replace a doubted text as well made 2 more texts
    wrong on fold B, so it does not. Off with ``SELF_CHECK_COPY=off``.

    Args:
        candidates: measured candidates in the order they were generated.
        reading_level: the US grade asked for.
        incumbent: the fast text, when it passed both checks.
        self_check_threshold: the threshold the translation was gated by
            (:attr:`clinical.models.Translation.self_check_threshold`), or
            ``None`` where the confidence gated it.

    Raises:
        ValueError: ``candidates`` is empty.
    """
    if not candidates:
        raise ValueError("no candidate to select from")
    chosen = _select(candidates, reading_level=reading_level, incumbent=incumbent)
    if self_check_threshold is None:
        return chosen
    delivered = chosen.self_check if chosen is not None else incumbent.self_check
    if not quality.self_check_doubted(delivered, self_check_threshold):
        return chosen
    order = {id(c): index for index, c in enumerate(candidates)}
    copies = [c for c in candidates if c.passed and normalise(c.text) == normalise(c.input_text)
              and c.self_check is not None and not quality.self_check_doubted(c.self_check, self_check_threshold)]
    if not copies:
        return chosen
    return max(copies, key=lambda c: (round(c.self_check, 2), -order[id(c)]))


def candidate_as_written(*, translation: Translation, chosen: Candidate | None,
                         self_check_threshold: float | None) -> Candidate | None:
    """The diagnosis as written (:data:`AS_WRITTEN`, the input unchanged,
    no logprobs, not checked by the model), where the text the re-run would
    deliver is still doubted: ``chosen``'s P(yes), or the fast text's
    (``translation.self_check``) where ``chosen`` is ``None`` and the fast
    text stands, is under ``self_check_threshold``. ``None`` where it is not
    doubted, where no threshold applies, or where that P(yes) is unknown
    (the check did not run: nothing says the text is wrong).

    A wrong text is worse than none for a patient: measured on laymaker-dev
    (the 62 gated rows' every candidate replayed, docs/quality/rerun-select-self-check.md,
    one reader's verdicts over the 235 judged rows as delivered), this rule
    after :func:`candidate_select`'s trusted copy gives wrong texts 12 -> 6,
    correct 130 -> 125 (the model's check also doubts some correct texts,
    and a copy of a sentence the clinicians changed counts as lossy),
    SARI 36.6 -> 35.0 (a copy explains nothing). The clinician is told
    (:func:`clinical.frames.rerun_change_note`) and the page keeps the
    doubted text as the fast draft to read. ``SELF_CHECK_COPY=trusted``
    keeps only the trusted copy of :func:`candidate_select`.
    """
    p_yes = chosen.self_check if chosen is not None else translation.self_check
    if not quality.self_check_doubted(p_yes, self_check_threshold):
        return None
    return candidate_measure(translation=translation, name=AS_WRITTEN, text=translation.input_text, logprobs=[],
                             ms=0.0, prompt_version=translation.prompt_version)


def _select(candidates: list[Candidate], *, reading_level: int, incumbent: Incumbent | None) -> Candidate | None:
    """:func:`candidate_select` before its self-check fallback."""
    order = {id(c): index for index, c in enumerate(candidates)}
    if incumbent is not None:
        candidates = [c for c in candidates if incumbent.allows(c)]
    passing = [c for c in candidates if c.passed]
    if passing:
        checked = all(c.self_check is not None for c in passing)
        return max(passing, key=lambda c: (
            candidate_tier(c),
            _score(c, checked),
            _fkgl_within(c, reading_level),
            -(c.quality.readability.output_fkgl if c.quality.readability.output_fkgl is not None else math.inf),
            -order[id(c)]))
    if incumbent is not None:
        return None
    return min(candidates, key=lambda c: (
        (not c.quality.safety.passed) + (not c.quality.faithfulness.passed),
        c.problems,
        -(c.confidence or 0.0),
        order[id(c)]))


def _score(candidate: Candidate, checked: bool) -> float:
    """The candidate's rank score rounded to 0.01: its self-check when
    ``checked``, else its confidence (-1 when missing)."""
    value = candidate.self_check if checked else candidate.confidence
    return round(value, 2) if value is not None else -1.0


def candidate_good_enough(candidate: Candidate, *, model_name: str, incumbent: Incumbent | None = None,
                          self_check_threshold: float | None = None) -> bool:
    """Stop generating further candidates: ``candidate`` was written by the
    model and is not the input again (:func:`candidate_tier` 2), passes both
    checks, and the gate itself would not have re-run it: its self-check is
    at or above ``self_check_threshold`` where both are known
    (:func:`clinical.quality.gate.self_check_threshold` of the translation),
    else its confidence is at or above the gate's threshold for
    ``model_name`` and its prompt version
    (:func:`clinical.quality.gate.gate_threshold`); with an ``incumbent``,
    it may also replace the fast text (:meth:`Incumbent.allows`). Saves the
    CPU the re-run lane shares with the clinicians."""
    if not (candidate.passed and candidate_tier(candidate) == 2
            and (incumbent is None or incumbent.allows(candidate))):
        return False
    if self_check_threshold is not None and candidate.self_check is not None:
        return not quality.self_check_doubted(candidate.self_check, self_check_threshold)
    return (candidate.confidence is not None
            and candidate.confidence >= gate_threshold(model_name, candidate.prompt_version))


@dataclass(frozen=True)
class Incumbent:
    """The fast text, when it passed both checks and was re-run for a low
    self-check or low confidence alone: a candidate must be clearly better
    to replace it. Where both it and the candidate carry a self-check
    (:attr:`Candidate.self_check`), "better" is a higher P(yes) by more than
    ``margin``; else the confidence rule below.

    Confidence (geometric-mean token probability) ranks failing outputs
    weakly on this model (AUROC 0.63, docs/quality/rerun-fix.md), and a
    candidate from other messages (other examples, sampling) is another
    text, not a more exact reading of the same one; so such a candidate
    replaces a passing fast text only when it passes both checks, was
    written by the model (:func:`candidate_tier` 2) and its confidence is
    more than ``margin`` above the fast text's (a tie keeps the fast text).
    ``full_precision`` (the same messages in full precision: the design's
    re-run) is always allowed. The margin (``RERUN_REPLACE_MARGIN``, default
    0) was measured on both cross-fit halves of laymaker-dev
    (docs/quality/rerun-select.md): a margin chosen on one half lowered SARI
    on the other, so the default only keeps a passing fast text against a
    candidate that is not more confident than it.

    Attributes:
        confidence: the fast text's confidence (0-1), ``None`` if unknown
            (then only ``full_precision`` may replace it).
        margin: confidence (or P(yes)) a candidate must add beyond a tie
            (0-1; ``math.inf``: none but ``full_precision`` may).
        self_check: the fast text's self-check (P(yes)), ``None`` if it did
            not run.
    """

    confidence: float | None
    margin: float
    self_check: float | None = None

    def allows(self, candidate: Candidate) -> bool:
        """``candidate`` may replace the fast text (if it passes the checks)."""
        if candidate.name == FULL_PRECISION:
            return True
        if not (candidate.passed and candidate_tier(candidate) == 2):
            return False
        if self.self_check is not None and candidate.self_check is not None:
            return candidate.self_check > self.self_check + self.margin
        return (self.confidence is not None and candidate.confidence is not None
                and candidate.confidence > self.confidence + self.margin)


def incumbent_for(translation: Translation, *, margin: float | None = None) -> Incumbent | None:
    """The fast text as :class:`Incumbent` when it was re-run for a low
    self-check or low confidence alone (``rerun_reason`` is
    ``low_self_check`` or ``low_confidence``: it passed both checks);
    ``None`` when it failed a check (any candidate that passes may replace
    it). ``margin`` defaults to ``settings.RERUN_REPLACE_MARGIN``."""
    reasons = [r for r in (translation.rerun_reason or "").split(",") if r]
    if reasons not in ([quality.LOW_CONFIDENCE], [quality.LOW_SELF_CHECK]):
        return None
    return Incumbent(confidence=translation.confidence,
                     margin=settings.RERUN_REPLACE_MARGIN if margin is None else margin,
                     self_check=translation.self_check)
