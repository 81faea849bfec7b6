"""The re-run's candidates, by name, and what to generate for each
(:func:`candidate_plan`); the candidates themselves are described in
:mod:`clinical.rerun.candidates`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from clinical.models import RERUN_AS_WRITTEN, RERUN_KEPT_FAST_TEXT, Translation
from clinical.rerun.candidates.span_replacement import SPAN_PROMPT_VERSION, span_messages
from inference.base import GenerationParams
from inference.examples import DEFAULT_K, ExamplePool, default_pool, heading_split, split_sentences
from inference.parts import TranslationPart, translation_parts
from inference.prompts import EXAMPLES_PROMPT_VERSION, ClusterPrompt, build_messages

FULL_PRECISION = "full_precision"
RETRIEVED_EXAMPLES = "retrieved_examples"
SPAN_REPLACEMENT = "span_replacement"
SAMPLED = "sampled"
#: ``Rerun.candidate`` when no candidate may replace the fast text
#: (:class:`~clinical.rerun.candidates.selection.Incumbent`): the fast text stands.
FAST_TEXT = RERUN_KEPT_FAST_TEXT
#: ``Rerun.candidate`` when the text the re-run would deliver is still
#: doubted by the model's own check and the diagnosis as written is
#: delivered instead (:func:`~clinical.rerun.candidates.selection.candidate_as_written`;
#: ``SELF_CHECK_COPY=always``).
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
            verbatim heading (:func:`inference.parts.translation_parts`),
            each part (its messages, separator and prefix), generated in order and joined with
            :func:`inference.parts.translation_parts_join` (``messages`` is
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
    """What to generate for candidate ``name`` of ``translation`` (the
    candidates: :mod:`clinical.rerun.candidates`); ``span_replacement``
    generates its term list here and builds its text with
    :func:`~clinical.rerun.candidates.span_replacement.span_candidate_text`.

    ``messages`` (default :func:`inference.parts.translation_parts`) are
    the fast run's messages (or its parts) that ``full_precision`` and ``sampled`` repeat;
    ``pool`` (default the shipped one) is where ``retrieved_examples`` looks.
    Both exist for cross-fitted measurement (docs/decisions/rerun-candidates.md),
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
