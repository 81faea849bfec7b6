"""The stream's checking step: the model's own check of a finished output
(the question and its P(yes): :mod:`inference.self_check`), run by the web
process on its engine between the last streamed word and the row's final
state, so the gate (:func:`clinical.translation.finish.translation_finish`)
can read it (the threshold: :func:`clinical.quality.gate.self_check_threshold`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from clinical.models import Translation
from clinical.quality import gate
from clinical.runtime.metrics import SELF_CHECKS
from inference.base import Engine, EngineBusy, EnginePreempted
from inference.self_check import self_check_run

logger = logging.getLogger(__name__)


async def translation_self_check(*, translation: Translation, engine: Engine, text: str,
                                 source: str | None = None, request_suffix: str = "check",
                                 on_start: Callable[[], Awaitable[None]] | None = None) -> float | None:
    """Ask ``engine`` whether ``text`` (the streamed output) says what the
    translation's input says (``source``: one sentence of it, for
    :func:`translation_sentences_self_check`): one prompt and one answer
    token (about 0.8 s on 2 CPU cores for a sentence; docs/quality/self-check.md).
    The engine request's id is ``<request id>-<request_suffix>``;
    ``on_start`` is awaited just before the engine is asked (not where the
    check is skipped before that), so a client can be told it is checking.

    Runs only where the gate reads it: a self-check threshold exists for the
    translation's model and prompt version (:func:`clinical.quality.gate.self_check_threshold`)
    and ``text`` is not empty; and, on a CPU engine, only while no other
    translation is waiting or running (:meth:`inference.base.Engine.interactive_queue_depth`):
    there the check costs the cores the clinicians share. Background work
    (``GenerationParams.background``): it gives way to a translation that
    arrives while it runs, so their time to first word does not include it,
    and does not resume: the text is gated by its confidence instead. Each
    outcome is counted (``clinical_self_checks_total{outcome}``,
    :mod:`clinical.runtime.metrics`), so the share of texts the weaker gate
    stood in for is reported.

    Returns:
        P(yes) in [0, 1], or ``None`` when it did not run or gave no answer
        (not applicable, translations waiting on a CPU engine, the engine's
        queue full, preempted by a translation, or an engine failure, logged
        without text): the gate then reads the confidence.

    Raises:
        asyncio.CancelledError: after the engine request is aborted.
    """
    if not text.strip() or gate.self_check_threshold(translation.model_name, translation.prompt_version) is None:
        return None
    if engine.info.device == "cpu" and engine.interactive_queue_depth() > 0:
        # Other clinicians' translations are waiting or running: on a CPU the check's prompt
        # would take their cores (about 2.5 CPU-s a check) and hold this one's "done" behind
        # them (8 clinicians at once: E2E P50 1.9x, docs/benchmarks/ward-self-check.md).
        logger.info("self-check skipped, translations waiting")
        SELF_CHECKS.labels(outcome="translations_waiting").inc()
        return None
    if on_start is not None:
        await on_start()
    try:
        engine.admit(background=True)
    except EngineBusy:
        logger.info("self-check skipped, engine queue full")
        SELF_CHECKS.labels(outcome="queue_full").inc()
        return None
    request_id = f"{translation.request_id}-{request_suffix}"
    started = time.perf_counter()
    try:
        p_yes = await self_check_run(engine, request_id, translation.input_text if source is None else source,
                                     text, background=True)
    except asyncio.CancelledError:
        await engine.abort(request_id)
        raise
    except EnginePreempted:
        logger.info("self-check gave way to a translation request_id=%s", request_id)
        SELF_CHECKS.labels(outcome="gave_way").inc()
        return None
    except Exception as exc:  # noqa: BLE001 - the confidence gate stands in
        logger.error("self-check failed: %s", type(exc).__name__)
        SELF_CHECKS.labels(outcome="failed").inc()
        return None
    logger.info("self-check p_yes=%.3f ms=%.0f", p_yes, (time.perf_counter() - started) * 1000)
    SELF_CHECKS.labels(outcome="ran").inc()
    return p_yes


async def translation_sentences_self_check(*, translation: Translation, engine: Engine,
                                           pairs: list[tuple[str, str]],
                                           on_start: Callable[[], Awaitable[None]] | None = None) -> list[float | None]:
    """The model's own check of a note sentence by sentence: each
    ``(input sentence, its text)`` pair in ``pairs`` is checked as
    :func:`translation_self_check` checks a whole output (same threshold
    rule, same CPU rule, one request ``<request id>-check-<n>`` each, ``n``
    from 1), one after another. A pair whose text is empty is not checked.
    ``on_start`` is awaited once, before the first check that runs.

    Why not the whole note at once: the threshold was calibrated on
    sentences, and on notes the one answer misses wrong sentences. Measured
    on laymaker-dev's fast texts joined into notes (docs/decisions/sentence-gating.md): of 20 notes of six sentences, 12
    held a sentence hand-judged wrong; the whole-note check doubted 5 of
    those 12, the sentence checks 12 of 12. A note the whole-note check
    doubted was delivered as written whole, its good sentences too.

    Returns:
        One P(yes) or ``None`` per pair, in order (see :func:`translation_self_check`).

    Raises:
        asyncio.CancelledError: after the running engine request is aborted.
    """
    started = False

    async def first_start() -> None:
        nonlocal started
        if not started and on_start is not None:
            started = True
            await on_start()

    answers: list[float | None] = []
    for n, (source, text) in enumerate(pairs, start=1):
        answers.append(await translation_self_check(translation=translation, engine=engine, text=text,
                                                    source=source, request_suffix=f"check-{n}",
                                                    on_start=first_start)
                       if text.strip() else None)
    return answers
