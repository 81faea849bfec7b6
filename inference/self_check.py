"""The model's own check of a rewrite: asked whether the plain-language text
says the same thing as the clinical sentence, what probability it gives
"Yes".

One greedy answer token on the same engine that wrote the text
(:func:`self_check_run`). ``P(yes)`` is read from that token alone: its
probability when it is "Yes", one minus it when it is "No"
(:func:`yes_probability`); the two answers held 99.7 % of the first
token's probability on average over 640 pairs of the default model (top 20
logprobs through llama-cpp-python), so the other tokens change little.

Measured on laymaker-dev (docs/quality/self-check.md, ``python -m bench
self_check``): on 217 hand-judged cross-fitted fast texts of the default
model it ranks the wrong ones below the correct and lossy ones at AUROC
0.83, against 0.70 for the translation's confidence (the mean token
probability); 820 ms a pair on 2 cores. The gate's measure where a
threshold is calibrated (:func:`clinical.quality.gate.self_check_threshold`):
the web process checks each output after its stream
(:mod:`clinical.translation.checking`) and the re-run checks each of its
candidates (:mod:`clinical.rerun.execute`).
"""

from __future__ import annotations

import math

from inference.base import Engine, GenerationParams, generate_full

#: Stored beside a self-check score: change it with the wording below.
SELF_CHECK_PROMPT_VERSION = "2026-11-27.1"
SELF_CHECK_SYSTEM = ("You check plain-language rewrites of sentences from clinical notes before a patient "
                     "reads them.")
SELF_CHECK_QUESTION = ("Does the rewrite say the same thing as the clinical sentence, with no fact added, "
                       "dropped or changed? Answer Yes or No.\n\nClinical sentence: {source}\nRewrite: {text}")
_ANSWERS = {"yes": True, "no": False}


def self_check_messages(source: str, text: str) -> list[dict[str, str]]:
    """``[system, user]`` chat messages asking whether ``text`` (the
    rewrite) says what ``source`` (the clinical sentence or note) says.

    The system message and the question's opening are the same for every
    pair, so an engine that keeps prefix snapshots reads them once.
    """
    return [{"role": "system", "content": SELF_CHECK_SYSTEM},
            {"role": "user", "content": SELF_CHECK_QUESTION.format(source=source.strip(), text=text.strip())}]


def yes_probability(answer: str, logprob: float) -> float:
    """``P(yes)`` from the greedy answer token ``answer`` and its natural-log
    probability ``logprob``: ``exp(logprob)`` for "Yes", ``1 - exp(logprob)``
    for "No" (case and spaces ignored), 0.5 for any other token (the model
    did not answer).

    Returns:
        A probability in [0, 1].
    """
    verdict = _ANSWERS.get(answer.strip().lower().rstrip("."))
    if verdict is None:
        return 0.5
    p = min(1.0, math.exp(logprob))
    return p if verdict else 1.0 - p


async def self_check_run(engine: Engine, request_id: str, source: str, text: str, *,
                         background: bool = True) -> float:
    """Ask ``engine`` whether ``text`` keeps ``source``'s meaning.

    Args:
        engine: a started engine (the one that wrote ``text``).
        request_id: the engine request's id (e.g. the translation's, with a
            suffix).
        source, text: the clinical input and its rewrite.
        background: yield to interactive requests (a clinician waiting for
            a first word).

    Returns:
        ``P(yes)`` in [0, 1] (:func:`yes_probability`).

    Raises:
        EnginePreempted: a background check gave way to an interactive request.
        EngineError: generation failed.
    """
    generated = await generate_full(engine, request_id, self_check_messages(source, text),
                                    GenerationParams(max_tokens=1, temperature=0.0, background=background))
    if not generated.token_logprobs:
        return 0.5
    return yes_probability(generated.text, generated.token_logprobs[0])

