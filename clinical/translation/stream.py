"""One translation's life as one stream of events, which every transport
wraps: the WebSocket consumer, server-sent events, the JSON API (waiting or
not) and FHIR.

admitted → ``started`` → ``token``... → (``checking``) → ``done`` | ``failed``
| ``unrecorded``, and nothing after that. ``checking``: the text is whole
and the model is checking it (:mod:`clinical.translation.checking`; on two
CPU cores about 0.8 s a sentence) before it is final.

The stream holds the translation's place under its holder's cap
(:mod:`clinical.translation.concurrency`) until the text is final: the
place is given back before the final event is passed on (so the holder may
start the next one at once), or when the stream is cancelled or abandoned.

A transport that stops iterating (the client left) or cancels the task
that iterates stops the engine request; the row is then recorded
``cancelled`` (:func:`clinical.translation.generation.translation_generate`).
Once the text is whole (``checking``) only the clinician's own cancel, the
task cancelled with :data:`CANCEL_REQUESTED`, records it ``cancelled``;
otherwise it completes unchecked.

:func:`translation_detach` finishes a stream after its HTTP response has
been sent, in a context of its own: work spawned from a request's context
inherits that request's thread-sensitive executor, which Django closes with
the response, and every later database call then fails ("CurrentThreadExecutor
already quit or is broken").
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from django.db import DatabaseError
from redis.exceptions import RedisError

from clinical.models import Translation
from clinical.runtime.log import request_id_var
from clinical.translation import concurrency, generation
from inference.base import Engine

logger = logging.getLogger(__name__)

#: Cancel the iterating task with this message when the clinician asked to stop.
CANCEL_REQUESTED = generation.CANCEL_REQUESTED

STARTED, TOKEN, CHECKING, DONE, FAILED, UNRECORDED = "started", "token", "checking", "done", "failed", "unrecorded"
#: What a client is told on ``unrecorded`` (every transport says the same).
UNRECORDED_MESSAGE = ("The database became unreachable, so this translation could not be recorded. "
                      "Please do not use it; try again shortly.")
#: Events after which the translation's text is final (one of them is the
#: last event of every stream that is not cancelled).
FINAL = frozenset({DONE, FAILED, UNRECORDED})

_END = object()


@dataclass(frozen=True)
class TranslationEvent:
    """One event of a translation's stream.

    ``kind``: one of the module's event names; ``translation``: the row as
    of this event (final from ``done``/``failed`` on); ``text``: the piece
    of a ``token`` event; ``sentences``: how many sentences a ``checking``
    event's check covers (1 for a single sentence or a note checked whole).
    """

    kind: str
    translation: Translation
    text: str = ""
    sentences: int = 0


@dataclass(frozen=True)
class _Checking:
    sentences: int


def translation_events(*, translation: Translation, engine: Engine,
                       received_ns: int) -> AsyncIterator[TranslationEvent]:
    """The events of an admitted translation (see the module docstring),
    holding its place (:func:`clinical.translation.concurrency.translation_place`)
    until its text is final. Every transport reads a translation's events
    through this.

    ``received_ns``: ``time.monotonic_ns()`` when the server received the
    request (figures are measured from it, in ms).

    Yields ``started``, one ``token`` per decoded piece, ``checking`` when
    the model's own check of the whole text starts (not where none runs),
    then ``done`` (the
    completed row), ``failed`` (the engine failed; the row says ``error``)
    or ``unrecorded`` (the text was decoded but its final state could not be
    stored: database or Redis unreachable; the sweep finalises the row
    later), the last event. The ``done`` row carries the glossary, from the
    vocabularies only (:mod:`clinical.quality.glossary`).

    Raises:
        asyncio.CancelledError: the iterating task was cancelled; the engine
            request is aborted and the row recorded ``cancelled`` first.
    """
    events = _events(translation=translation, engine=engine, received_ns=received_ns)
    place = concurrency.translation_place(translation)
    return events if place is None else _events_holding_place(events, place=place)


async def _events_holding_place(events: AsyncIterator[TranslationEvent], *,
                                place: concurrency.Place) -> AsyncIterator[TranslationEvent]:
    holder = concurrency.PlaceHolder(place)
    holder.start()
    try:
        async with contextlib.aclosing(events):
            async for event in events:
                if event.kind in FINAL:
                    await holder.stop()
                yield event
    finally:
        # Given back before a "cancelled" frame can reach the client; the
        # shield lets it finish if this task is cancelled once more.
        await asyncio.shield(holder.stop())


async def _events(*, translation: Translation, engine: Engine, received_ns: int) -> AsyncIterator[TranslationEvent]:
    """The events of :func:`translation_events`, without the place."""
    queue: asyncio.Queue = asyncio.Queue()

    async def on_token(text: str) -> None:
        queue.put_nowait(text)

    async def on_check(sentences: int) -> None:
        queue.put_nowait(_Checking(sentences))

    async def run() -> Translation:
        try:
            return await generation.translation_generate(
                translation=translation, engine=engine, on_token=on_token, on_check=on_check,
                received_ns=received_ns)
        finally:
            queue.put_nowait(_END)

    task = asyncio.create_task(run())
    reason = None  # a cancel's message, passed on to the generation (generation.CANCEL_REQUESTED)
    try:
        yield TranslationEvent(STARTED, translation)
        while (item := await queue.get()) is not _END:
            if isinstance(item, _Checking):
                yield TranslationEvent(CHECKING, translation, sentences=item.sentences)
            else:
                yield TranslationEvent(TOKEN, translation, item)
        try:
            done = await task
        except (DatabaseError, RedisError) as exc:
            logger.error("translation not recorded: %s", type(exc).__name__)
            yield TranslationEvent(UNRECORDED, translation)
            return
        if done.status != Translation.Status.COMPLETED:
            yield TranslationEvent(FAILED, done)
            return
        yield TranslationEvent(DONE, done)
    except asyncio.CancelledError as exc:
        reason = exc.args[0] if exc.args else None
        raise
    finally:
        if not task.done():  # cancelled, or the transport stopped iterating
            task.cancel(reason)
            await asyncio.gather(task, return_exceptions=True)


async def translation_until_final(events: AsyncIterator[TranslationEvent]) -> TranslationEvent:
    """Read ``events`` up to its final event (``done``, ``failed`` or
    ``unrecorded``) and return that event; the rest of the stream is left
    for :func:`translation_detach`.

    Raises:
        RuntimeError: the stream ended without a final event.
    """
    async for event in events:
        if event.kind in FINAL:
            return event
    raise RuntimeError("translation stream ended without a final event")


# Streams finished after their response; referenced until they end.
_detached: set[asyncio.Task] = set()


def translation_detach(events: AsyncIterator[TranslationEvent], *, request_id: str) -> asyncio.Task:
    """Finish ``events`` in the background (the rest of the generation, or
    only the stream's close after its final event), in a fresh context so it
    outlives the request that started it (see the module docstring). Errors
    are logged with their class only.

    Returns:
        The task (kept referenced here until it ends).
    """
    async def drain() -> None:
        request_id_var.set(request_id)
        try:
            async for _ in events:
                pass
        except Exception as exc:  # noqa: BLE001 - nobody is waiting for it; the row says what happened
            logger.error("background translation work failed: %s", type(exc).__name__)

    task = asyncio.get_running_loop().create_task(drain(), context=contextvars.Context())
    _detached.add(task)
    task.add_done_callback(_detached.discard)
    return task
