"""The streaming run: a pending translation goes through the engine token by
token and its row is finalised (:func:`clinical.translation.finish.translation_finish`)
with the figures measured on the way (:class:`StreamMeter`).

A translation is one engine request, or one per sentence
(:func:`inference.parts.translation_parts`): the sentences are generated
one after another and their texts streamed in order as one text, each
after its separator (a space or the note's line break).

Times are ``time.monotonic_ns()`` readings; figures are in ms from the
server receiving the request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.conf import settings

from clinical.models import Translation
from clinical.runtime import replica
from clinical.runtime.log import request_id_var
from clinical.translation.checking import translation_self_check, translation_sentences_self_check
from clinical.translation.finish import TranslationFigures, translation_finish
from inference.base import Delta, Engine, GenerationParams
from inference.confidence import sequence_confidence
from inference.parts import TextJoiner, TranslationPart, translation_parts

logger = logging.getLogger(__name__)

#: The message a transport cancels a translation's task with when the
#: clinician asked to stop it (``Task.cancel(CANCEL_REQUESTED)``; asyncio
#: carries it to the awaiting code as ``CancelledError.args[0]``). Any other
#: cancellation (the client left, the server stops) is not a request to
#: discard the text: see :func:`translation_generate`.
CANCEL_REQUESTED = "cancel requested"


def cancel_requested(exc: asyncio.CancelledError) -> bool:
    """Whether ``exc`` is the clinician's own cancel (:data:`CANCEL_REQUESTED`)."""
    return bool(exc.args) and exc.args[0] == CANCEL_REQUESTED


@dataclass
class StreamMeter:
    """Turns the streams of deltas of a translation's requests (one, or one
    per sentence, in order) into :class:`TranslationFigures`.

    ``received_ns`` is ``time.monotonic_ns()`` when the server received the
    request. Queue wait is measured to the first request's admission and
    TTFT to the first delta carrying a token; prompt tokens are summed over
    the requests, confidence is over every token; the finish reason is the
    last request's, except ``length`` if any request hit its token limit.
    """

    received_ns: int
    admitted_ns: int | None = None
    first_token_ns: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str = ""
    logprobs: list[float] = field(default_factory=list)

    def observe(self, delta: Delta) -> None:
        now = time.monotonic_ns()
        if delta.admitted_ns is not None and self.admitted_ns is None:
            self.admitted_ns = delta.admitted_ns
        if delta.prompt_tokens is not None:
            self.prompt_tokens = (self.prompt_tokens or 0) + delta.prompt_tokens
        if self.first_token_ns is None and (delta.token_logprobs or delta.text):
            self.first_token_ns = now
        self.logprobs.extend(delta.token_logprobs)
        if delta.finish_reason and self.finish_reason != "length":
            self.finish_reason = delta.finish_reason

    def figures(self, *, end_ns: int | None = None) -> TranslationFigures:
        end_ns = end_ns or time.monotonic_ns()

        def ms(at: int | None) -> float | None:
            return None if at is None else round((at - self.received_ns) / 1e6, 2)

        return TranslationFigures(
            queue_wait_ms=ms(self.admitted_ns),
            ttft_ms=ms(self.first_token_ns),
            total_ms=ms(end_ns),
            tokens_in=self.prompt_tokens,
            tokens_out=len(self.logprobs),
            confidence=sequence_confidence(self.logprobs),
            finish_reason=self.finish_reason,
        )


_finish_async = database_sync_to_async(translation_finish)


async def translation_generate(
    *,
    translation: Translation,
    engine: Engine,
    on_token: Callable[[str], Awaitable[None]] | None = None,
    on_check: Callable[[int], Awaitable[None]] | None = None,
    received_ns: int,
    max_tokens: int | None = None,
) -> Translation:
    """Stream a pending translation through ``engine`` and finalise its row,
    holding this replica's lease on it meanwhile (:mod:`clinical.runtime.replica`).

    Each piece of text is passed to ``on_token`` as it arrives (callers
    that only want the end result pass none). Once the text is whole the
    model checks it (:func:`clinical.translation.checking.translation_self_check`,
    where the gate reads it; a note sentence by sentence) before the row is
    finalised; ``on_check`` is awaited with the number of sentences to be
    checked (1 for a single request) as the first check starts, and not
    where no check runs. The row ends
    ``completed`` (with confidence and figures), ``error`` (engine failure;
    the partial text is kept) or, when the calling task is cancelled,
    ``cancelled`` after the engine request is aborted. Cancelled while the
    whole text is being checked, the row is ``cancelled`` (its whole text
    kept; not gated, not re-run) where the clinician asked to stop it
    (:data:`CANCEL_REQUESTED`), and otherwise (the client left, the server
    stops) ``completed`` without the check, gated by its confidence: the
    text can still be read from the history and the API.

    Returns:
        The finalised translation.

    Raises:
        asyncio.CancelledError: re-raised after the row is finalised.
    """
    async with replica.translation_lease(translation):
        request_id = str(translation.request_id)
        request_id_var.set(request_id)
        meter = StreamMeter(received_ns=received_ns)
        joiner = TextJoiner()
        params = GenerationParams(max_tokens=max_tokens or settings.MAX_OUTPUT_TOKENS,
                                  ignore_eos=settings.INFERENCE_IGNORE_EOS)
        current = request_id
        try:
            # Rendering fits the example clusters on a process's first use
            # (about 1 s): not on the event loop.
            parts = await asyncio.to_thread(translation_parts, translation)
            answers: list[str] = []  # each part's text, for the sentence checks
            cuts: list[bool] = []
            cut = False  # the previous part's answer stopped at the token limit
            for index, part in enumerate(parts):
                # The first request keeps the translation's id (logs, abort).
                current = request_id if index == 0 else f"{request_id}-{index + 1}"
                joiner.begin(part.separator, part.prefix, after_cut=cut)
                cut = False
                answers.append("")
                async for delta in engine.generate(current, part.messages, params):
                    meter.observe(delta)
                    answers[-1] += delta.text or ""
                    if delta.finish_reason:
                        cut = delta.finish_reason == "length"
                    shown = joiner.feed(delta.text) if delta.text else ""
                    if shown and on_token is not None:
                        await on_token(shown)
                shown = joiner.end()  # a first word held back (TextJoiner) ends with its answer
                cuts.append(cut)
                if shown and on_token is not None:
                    await on_token(shown)
        except asyncio.CancelledError:
            await engine.abort(current)
            meter.finish_reason = "abort"
            await asyncio.shield(_finish_async(
                translation_id=translation.pk, status=Translation.Status.CANCELLED,
                output_text=joiner.text, figures=meter.figures()))
            logger.info("translation cancelled after %d tokens", len(meter.logprobs))
            raise
        except Exception as exc:  # noqa: BLE001 - any failure ends the row in error
            logger.error("translation failed: %s", type(exc).__name__)
            return await _finish_async(
                translation_id=translation.pk, status=Translation.Status.ERROR,
                output_text=joiner.text, figures=meter.figures(),
                error_class=type(exc).__name__)
        figures = meter.figures()  # the stream's times, before the check below

        async def checking() -> None:
            if on_check is not None:
                await on_check(len(parts))

        try:
            if len(parts) > 1:
                figures.self_check, figures.sentence_checks = await _sentences_check(
                    translation, engine, parts, answers, cuts, on_start=checking)
            else:
                figures.self_check = await translation_self_check(translation=translation, engine=engine,
                                                                  text=joiner.text, on_start=checking)
        except asyncio.CancelledError as exc:
            # The text is whole: it completes, gated by its confidence, unless
            # the clinician stopped it (the socket then says "cancelled").
            stopped = cancel_requested(exc)
            await asyncio.shield(_finish_async(
                translation_id=translation.pk,
                status=Translation.Status.CANCELLED if stopped else Translation.Status.COMPLETED,
                output_text=joiner.text, figures=figures))
            logger.info("translation %s during its check", "cancelled" if stopped else "completed unchecked")
            raise
        done = await _finish_async(
            translation_id=translation.pk, status=Translation.Status.COMPLETED,
            output_text=joiner.text, figures=figures)
        logger.info("translation completed parts=%d tokens=%s ttft_ms=%s total_ms=%s",
                    len(parts), done.tokens_out, done.ttft_ms, done.total_ms)
        return done


async def _sentences_check(translation: Translation, engine: Engine, parts: list[TranslationPart],
                           answers: list[str], cuts: list[bool], *,
                           on_start: Callable[[], Awaitable[None]]) -> tuple[float | None, list[dict]]:
    """A note's sentence checks (:func:`clinical.translation.checking.translation_sentences_self_check`):
    ``(lowest P(yes) or None where none ran, Translation.sentence_checks)``.
    Each sentence is its part's source (the note's unit) and its text the
    part's answer after its copied heading."""
    pairs = [(part.source, (part.prefix.lstrip() + answer.strip()) if answer.strip() else "")
             for part, answer in zip(parts, answers, strict=True)]
    p_yes = await translation_sentences_self_check(translation=translation, engine=engine, pairs=pairs,
                                                   on_start=on_start)
    checks = [{"input": part.source, "answer": answer.strip(), "cut": cut, "p_yes": p}
              for part, answer, cut, p in zip(parts, answers, cuts, p_yes, strict=True)]
    ran = [p for p in p_yes if p is not None]
    return (min(ran) if ran else None), checks
