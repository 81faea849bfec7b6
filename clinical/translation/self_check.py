"""The model's own check of a finished output, run by the web process on
its engine between the last streamed word and the row's final state, so
the gate (:func:`clinical.translation.services.translation_finish`) can read
it (:mod:`inference.self_check`; the threshold:
:func:`clinical.quality.gate.self_check_threshold`)."""

from __future__ import annotations

import asyncio
import logging
import time

from clinical.models import Translation
from clinical.quality import gate
from inference.base import Engine, EngineBusy, EnginePreempted
from inference.self_check import self_check_run

logger = logging.getLogger(__name__)


async def translation_self_check(*, translation: Translation, engine: Engine, text: str) -> float | None:
    """Ask ``engine`` whether ``text`` (the streamed output) says what the
    translation's input says: one prompt and one answer token (about 0.8 s
    on 2 CPU cores for a sentence; docs/quality/self-check.md).

    Runs only where the gate reads it: a self-check threshold exists for the
    translation's model and prompt version (:func:`clinical.quality.gate.self_check_threshold`)
    and ``text`` is not empty; and, on a CPU engine, only while no other
    translation is waiting or running (:meth:`inference.base.Engine.interactive_queue_depth`):
    there the check costs the cores the clinicians share. Background work
    like the glossary's: it gives way to a translation that arrives while it
    runs, so their time to first word does not include it.

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
        return None
    try:
        engine.admit(background=True)
    except EngineBusy:
        logger.info("self-check skipped, engine queue full")
        return None
    request_id = f"{translation.request_id}-check"
    started = time.perf_counter()
    try:
        p_yes = await self_check_run(engine, request_id, translation.input_text, text, background=True)
    except asyncio.CancelledError:
        await engine.abort(request_id)
        raise
    except EnginePreempted:
        logger.info("self-check gave way to a translation request_id=%s", request_id)
        return None
    except Exception as exc:  # noqa: BLE001 - the confidence gate stands in
        logger.error("self-check failed: %s", type(exc).__name__)
        return None
    logger.info("self-check p_yes=%.3f ms=%.0f", p_yes, (time.perf_counter() - started) * 1000)
    return p_yes
