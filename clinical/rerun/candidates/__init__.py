"""The re-run's candidates: what the worker generates when the confidence
gate fires, how each is scored, and which one replaces the fast text.

On the CPU the full-precision re-run of the same messages reproduces the
fast text word for word (docs/decisions/rerun-candidates.md: 7 of 10 identical),
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
:mod:`clinical.rerun.execute`. By job: :mod:`~clinical.rerun.candidates.plan`
(the names and what to generate for each),
:mod:`~clinical.rerun.candidates.span_replacement` (the copied text with
terms replaced) and :mod:`~clinical.rerun.candidates.selection` (measuring,
ranking and choosing); every public name is importable from this package.
"""

from __future__ import annotations

from clinical.rerun.candidates.plan import (
    AS_WRITTEN,
    CANDIDATE_NAMES,
    FAST_TEXT,
    FULL_PRECISION,
    RETRIEVED_EXAMPLES,
    RETRIEVED_K,
    RETRIEVED_K_AGAIN,
    SAMPLED,
    SAMPLED_TEMPERATURE,
    SPAN_REPLACEMENT,
    CandidatePlan,
    candidate_names,
    candidate_plan,
    copied_heading,
    sampled_seed,
)
from clinical.rerun.candidates.selection import (
    Candidate,
    Incumbent,
    candidate_as_written,
    candidate_good_enough,
    candidate_measure,
    candidate_select,
    candidate_tier,
    incumbent_for,
)
from clinical.rerun.candidates.span_replacement import (
    SPAN_EXAMPLE_ANSWER,
    SPAN_EXAMPLE_NOTE,
    SPAN_MAX_WORDS,
    SPAN_PROMPT_VERSION,
    SPAN_SYSTEM_PROMPT,
    span_candidate_text,
    span_glossary_pairs,
    span_lines_parse,
    span_messages,
    span_replacements_apply,
)

__all__ = [
    "AS_WRITTEN", "CANDIDATE_NAMES", "FAST_TEXT", "FULL_PRECISION", "RETRIEVED_EXAMPLES", "RETRIEVED_K",
    "RETRIEVED_K_AGAIN", "SAMPLED", "SAMPLED_TEMPERATURE", "SPAN_EXAMPLE_ANSWER", "SPAN_EXAMPLE_NOTE",
    "SPAN_MAX_WORDS", "SPAN_PROMPT_VERSION", "SPAN_REPLACEMENT", "SPAN_SYSTEM_PROMPT", "Candidate", "CandidatePlan",
    "Incumbent", "candidate_as_written", "candidate_good_enough", "candidate_measure", "candidate_names",
    "candidate_plan", "candidate_select", "candidate_tier", "copied_heading", "incumbent_for", "sampled_seed",
    "span_candidate_text", "span_glossary_pairs", "span_lines_parse", "span_messages", "span_replacements_apply",
]
