"""Server-sent events for ``POST /api/v1/translations/`` with
``Accept: text/event-stream`` (https://html.spec.whatwg.org/multipage/server-sent-events.html).

Events, each ``event: <name>`` plus one ``data:`` line of JSON:
``started`` (``{"id", "engine", "model", "precision"}``), one ``token``
per decoded piece (``{"text"}``), ``checking`` (``{"id", "sentences"}``:
the text is whole and the model's own check of it has started; not sent
where no check runs), then ``done`` (the translation, as
``GET`` returns it) or ``error`` (``{"code", "detail", "retry_after_s"?}``
and the translation: ``code`` ``engine_restarting`` with ``retry_after_s``
when the engine died under it, else ``engine_error``,
:func:`clinical.api.errors.translation_failure_answer`; a request refused
before it started gets ``{"detail", "code"?}``); nothing follows them. A
client that disconnects cancels the generation (the engine request is
aborted and the translation recorded as cancelled).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from channels.db import database_sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.http import StreamingHttpResponse
from rest_framework.renderers import BaseRenderer

from clinical.api.errors import translation_failure_answer
from clinical.models import Translation
from clinical.translation import selectors, stream
from clinical.web import frames


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
    """The translation's events (:mod:`clinical.translation.stream`) as SSE;
    payloads are the socket frames' (:mod:`clinical.web.frames`) without
    ``type``, but ``done``, which is the translation as ``GET`` returns it."""
    async for event in stream.translation_events(translation=translation, engine=engine, received_ns=received_ns):
        if event.kind == stream.STARTED:
            yield sse("started", _payload(frames.started_frame(translation, engine.info)))
        elif event.kind == stream.TOKEN:
            yield sse("token", _payload(frames.token_frame(event.text)))
        elif event.kind == stream.CHECKING:
            yield sse("checking", _payload(frames.checking_frame(translation, event.sentences)))
        elif event.kind == stream.DONE:
            yield sse("done", await database_sync_to_async(selectors.translation_api_view)(
                translation=event.translation))
        elif event.kind == stream.FAILED:
            body = await database_sync_to_async(selectors.translation_api_view)(translation=event.translation)
            yield sse("error", translation_failure_answer(event.translation).body(body))
        elif event.kind == stream.UNRECORDED:
            yield sse("error", {"detail": stream.UNRECORDED_MESSAGE})


def _payload(frame: dict) -> dict:
    return {key: value for key, value in frame.items() if key != "type"}
