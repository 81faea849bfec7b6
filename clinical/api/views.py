"""REST API views: thin async views (adrf) that call services.

The views are async so a request waiting for the model never holds one of
Django's sync threads; generation runs on the process's event loop, on the
same engine as the WebSocket path.
"""

from __future__ import annotations

import logging
import time
import uuid

from adrf.views import APIView
from channels.db import database_sync_to_async
from django.conf import settings
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from clinical.api.errors import echo_truncate, translation_failure_answer
from clinical.api.flow import APIRefusal, api_refusal_audit, api_translation_accept
from clinical.api.serializers import ErrorSerializer, TranslationRequestSerializer, TranslationSerializer
from clinical.api.streaming import EventStreamRenderer, translation_event_stream
from clinical.models import Translation
from clinical.translation import selectors, stream
from clinical.translation.admission import UNAVAILABLE_RETRY_AFTER_S

logger = logging.getLogger(__name__)

class TranslationCreateView(APIView):
    required_scopes = {"POST": "translate"}
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        operation_id="translations_create",
        request=TranslationRequestSerializer,
        parameters=[OpenApiParameter("wait", bool, description="Wait for the fast result (default true); "
                                     "false returns 202 at once with a Location to poll.")],
        description="With `Accept: text/event-stream` the answer streams as server-sent events: "
                    "`started`, one `token` per piece, `checking` (`{id, sentences}`: the text is whole and "
                    "the model is checking it, not sent where no check runs), then `done` (the "
                    "translation) or `error` (`code` "
                    "`engine_restarting` with `retry_after_s` when the engine died, else `engine_error`), the "
                    "last event. The translation's `glossary` (its medical terms, each defined by a vetted "
                    "vocabulary and naming it) comes with it.",
        responses={201: OpenApiResponse(TranslationSerializer, description="The fast text; `Retry-After` "
                                        "(s) while the full-precision verification is still to come."),
                   202: OpenApiResponse(TranslationSerializer, description="Accepted; poll `Location`, "
                                        "waiting `Retry-After` seconds between GETs."),
                   400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer, 429: ErrorSerializer,
                   502: OpenApiResponse(TranslationSerializer, description="The engine failed; recorded "
                                        "(`code` `engine_error`, `detail`)."),
                   503: OpenApiResponse(ErrorSerializer, description="Busy, unavailable, or the engine is "
                                        "restarting (`code` `engine_restarting`: it died, before or while "
                                        "writing this translation, which was then recorded as failed); see "
                                        "Retry-After.")},
    )
    async def post(self, request):
        """Translate a diagnosis into plain language."""
        received_ns = time.monotonic_ns()
        client = request.auth
        body = TranslationRequestSerializer(data=request.data)
        if not body.is_valid():
            await api_refusal_audit(
                client=client, error_class="ValidationError:api",
                text=request.data.get("text") if isinstance(request.data, dict) else request.data)
            return Response(echo_truncate(body.errors), status=status.HTTP_400_BAD_REQUEST)
        wait = request.query_params.get("wait", "true").lower() not in ("false", "0", "no")
        try:
            translation, engine = await api_translation_accept(
                client=client, text=body.validated_data["text"],
                reading_level=body.validated_data["reading_level"], language=body.validated_data["language"])
        except APIRefusal as refusal:
            return Response(refusal.body(), status=refusal.status, headers=refusal.headers)
        location = reverse("api-translation-detail", args=[translation.request_id])
        if request.accepted_renderer.format == EventStreamRenderer.format:
            response = translation_event_stream(translation=translation, engine=engine,
                                                received_ns=received_ns)
            response["Location"] = location
            return response
        events = stream.translation_events(translation=translation, engine=engine, received_ns=received_ns)
        if not wait:  # the whole run after the 202
            stream.translation_detach(events, request_id=str(translation.request_id))
            data = await database_sync_to_async(selectors.translation_api_view)(translation=translation)
            return Response(data, status=status.HTTP_202_ACCEPTED,
                            headers={"Location": location, **poll_headers(data)})
        final = await stream.translation_until_final(events)
        stream.translation_detach(events, request_id=str(translation.request_id))  # the stream's close
        if final.kind == stream.UNRECORDED:
            return Response({"detail": stream.UNRECORDED_MESSAGE},
                            status=status.HTTP_503_SERVICE_UNAVAILABLE,
                            headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)})
        data = await database_sync_to_async(selectors.translation_api_view)(translation=final.translation)
        if final.kind != stream.DONE:  # recorded as error: 503 engine_restarting or 502 engine_error
            failure = translation_failure_answer(final.translation)
            return Response(failure.body(data), status=failure.status,
                            headers={"Location": location, **failure.headers})
        return Response(data, status=status.HTTP_201_CREATED, headers={"Location": location, **poll_headers(data)})


def poll_headers(data: dict) -> dict[str, str]:
    """``Retry-After`` (seconds, ``API_POLL_AFTER_S``) while a translation's
    fast text or its full-precision verification is still to come, else
    nothing. The asynchronous request-reply pattern: a client that waits this
    long between GETs stays within its throttle rate."""
    unfinished = (data["status"] == Translation.Status.PENDING
                  or data["verification"] in (Translation.Verification.PENDING, Translation.Verification.RUNNING))
    return {"Retry-After": str(settings.API_POLL_AFTER_S)} if unfinished else {}


class TranslationDetailView(APIView):
    required_scopes = {"GET": "read"}

    @extend_schema(operation_id="translations_retrieve",
                   responses={200: OpenApiResponse(TranslationSerializer, description="`Retry-After` (s) "
                                                   "while the text or its verification is still to come."),
                              401: ErrorSerializer, 403: ErrorSerializer,
                              404: ErrorSerializer, 429: ErrorSerializer},
                   parameters=[OpenApiParameter("request_id", OpenApiTypes.UUID, OpenApiParameter.PATH)])
    async def get(self, request, request_id):
        """The current state of one of this client's translations, with the
        verified full-precision text once the re-run has finished. An id that
        is not a UUID is a 404 like an unknown one."""
        try:
            request_id = uuid.UUID(str(request_id))
        except ValueError:
            raise NotFound("No such translation.") from None
        try:
            data = await database_sync_to_async(selectors.translation_api_get)(
                api_client=request.auth, request_id=request_id)
        except Translation.DoesNotExist:
            raise NotFound("No such translation.") from None
        return Response(data, headers=poll_headers(data))
