"""Server-sent events for ``POST /api/v1/translations/`` with
``Accept: text/event-stream`` (https://html.spec.whatwg.org/multipage/server-sent-events.html).

Events, each ``event: <name>`` plus one ``data:`` line of JSON:
``started`` (``{"id", "engine", "model", "precision"}``), one ``token``
per decoded piece (``{"text"}``), then ``done`` (the translation, as
``GET`` returns it) or ``error`` (``{"detail"}``), then ``glossary``
(``{"id", "terms"}``) once the engine has written plain definitions. A client that disconnects
cancels the generation (the engine request is aborted and the translation
recorded as cancelled).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from channels.db import database_sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.http import StreamingHttpResponse
from rest_framework.renderers import BaseRenderer

from clinical.models import Translation
from clinical.translation import generation, selectors
from clinical.translation import glossary_writes as glossary_services

_END = object()


class EventStreamRenderer(BaseRenderer):
    """Lets DRF's content negotiation accept ``text/event-stream``; error
    bodies (401, 400 ...) are sent as one ``error`` event."""

    media_type = "text/event-stream"
    format = "sse"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return sse("error", data).encode()


def sse(event: str, data: object) -> str:
    """One server-sent event with a JSON payload."""
    return f"event: {event}\ndata: {json.dumps(data, cls=DjangoJSONEncoder)}\n\n"


def translation_event_stream(*, translation: Translation, engine, received_ns: int) -> StreamingHttpResponse:
    """A streaming response that runs the translation and sends its tokens
    as they are decoded (no buffering: ``X-Accel-Buffering: no`` for nginx)."""
    response = StreamingHttpResponse(_events(translation, engine, received_ns),
                                     content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _events(translation: Translation, engine, received_ns: int) -> AsyncIterator[str]:
    queue: asyncio.Queue = asyncio.Queue()

    async def on_token(text: str) -> None:
        queue.put_nowait(sse("token", {"text": text}))

    async def run() -> Translation:
        try:
            return await generation.translation_generate(
                translation=translation, engine=engine, on_token=on_token, received_ns=received_ns)
        finally:
            queue.put_nowait(_END)

    task = asyncio.create_task(run())
    try:
        yield sse("started", {"id": str(translation.request_id), "engine": engine.info.engine,
                              "model": engine.info.model, "precision": engine.info.precision})
        while (item := await queue.get()) is not _END:
            yield item
        done = await task
        body = await database_sync_to_async(selectors.translation_api_view)(translation=done)
        if done.status == Translation.Status.COMPLETED:
            yield sse("done", body)
            before = list(done.glossary or [])
            if await glossary_services.translation_glossary_explain(translation=done, engine=engine) != before:
                frame = glossary_services.glossary_frame(done)
                yield sse("glossary", {"id": frame["id"], "terms": frame["terms"]})
        else:
            yield sse("error", {"detail": "The translation failed and was recorded.", **body})
    finally:
        if not task.done():  # the client went away: stop the engine request
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
