"""Which prompt a new translation gets, from the settings now: stored as
its ``prompt_version``, from which its requests are rendered
(:func:`inference.parts.translation_parts`) by the fast run and the re-run
alike."""

from __future__ import annotations

from django.conf import settings

from inference.examples import note_sentences
from inference.lay_terms import spanish_hints
from inference.prompts import EXAMPLES_PROMPT_VERSION, PROMPT_VERSION, SPANISH_TERMS_PROMPT_VERSION, ClusterPrompt


def translation_prompt_version(*, text: str, language: str) -> str:
    """The prompt a new translation gets (stored as its ``prompt_version``).

    English input of 1 to ``PROMPT_MAX_SENTENCES`` sentences
    (:func:`inference.examples.note_sentences`) gets worked examples and is
    generated sentence by sentence: with ``PROMPT_CLUSTERS`` > 0 the
    cluster prefixes (:class:`inference.prompts.ClusterPrompt` of
    ``PROMPT_CLUSTERS``, ``PROMPT_CLUSTER_EXAMPLES``, ``PROMPT_RETRIEVED_K``
    ``PROMPT_HINTS`` and ``PROMPT_HEADINGS``, e.g. ``"2026-11-25.2+c24x8k0h"``), else 6 examples retrieved per
    sentence (:data:`inference.prompts.EXAMPLES_PROMPT_VERSION`; measured
    cross-fitted on laymaker-dev, docs/decisions/example-pool.md). Anything else
    (Spanish output: the examples are English; a longer note;
    ``PROMPT_EXAMPLES`` off) gets one request with the instructions and
    one fixed example (:data:`inference.prompts.PROMPT_VERSION`); Spanish
    output of a text with terms whose HPO Spanish label differs from the
    term gets those labels listed too
    (:func:`inference.lay_terms.spanish_hints`,
    :data:`inference.prompts.SPANISH_TERMS_PROMPT_VERSION`).
    """
    if language == "es" and spanish_hints(text):
        return SPANISH_TERMS_PROMPT_VERSION
    if not settings.PROMPT_EXAMPLES or language != "en":
        return PROMPT_VERSION
    if not 1 <= len(note_sentences(text)) <= settings.PROMPT_MAX_SENTENCES:
        return PROMPT_VERSION
    if settings.PROMPT_CLUSTERS > 0:
        return ClusterPrompt(settings.PROMPT_CLUSTERS, settings.PROMPT_CLUSTER_EXAMPLES,
                             settings.PROMPT_RETRIEVED_K, hints=settings.PROMPT_HINTS,
                             headings=settings.PROMPT_HEADINGS).version
    return EXAMPLES_PROMPT_VERSION
