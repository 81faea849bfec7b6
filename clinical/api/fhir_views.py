"""``POST /api/fhir/Condition/$plain-language``: FHIR R4 in, FHIR R4 out."""

from __future__ import annotations

import time

from adrf.views import APIView
from channels.db import database_sync_to_async
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, parsers, renderers
from rest_framework.response import Response

from clinical.api import fhir
from clinical.api.errors import as_api_exception, translation_failure_answer
from clinical.api.flow import APIRefusal, api_refusal_audit, api_translation_accept
from clinical.translation import selectors, stream
from clinical.translation.admission import UNAVAILABLE_RETRY_AFTER_S

FHIR_JSON = "application/fhir+json"
ISSUE_BY_STATUS = {400: "invalid", 401: "login", 403: "forbidden", 404: "not-found", 405: "not-supported",
                   406: "not-supported", 413: "too-costly", 415: "not-supported", 429: "throttled",
                   503: "transient"}


class FhirJSONParser(parsers.JSONParser):
    media_type = FHIR_JSON


class FhirJSONRenderer(renderers.JSONRenderer):
    media_type = FHIR_JSON
    format = "fhir"


class PlainLanguageOperationView(APIView):
    """FHIR operation ``$plain-language`` on Condition (DiagnosticReport and
    Bundle accepted too); every answer, errors included, is FHIR JSON."""

    required_scopes = {"POST": "translate"}
    parser_classes = [FhirJSONParser, parsers.JSONParser]
    renderer_classes = [FhirJSONRenderer, renderers.JSONRenderer]

    @extend_schema(
        operation_id="fhir_condition_plain_language",
        request={FHIR_JSON: {"type": "object", "description": "Condition, DiagnosticReport or Bundle (FHIR R4)"}},
        responses={200: OpenApiResponse(description="Parameters (FHIR R4), labelled AIAST"),
                   400: OpenApiResponse(description="OperationOutcome"),
                   401: OpenApiResponse(description="OperationOutcome"),
                   403: OpenApiResponse(description="OperationOutcome"),
                   502: OpenApiResponse(description="OperationOutcome: the engine failed"),
                   503: OpenApiResponse(description="OperationOutcome (`transient`): busy, unavailable, or "
                                        "the engine is restarting; see Retry-After")},
    )
    async def post(self, request):
        """Explain the diagnosis in a FHIR Condition, DiagnosticReport or
        Bundle in plain language; waits for the fast result."""
        received_ns = time.monotonic_ns()
        try:
            text, references = fhir.diagnosis_text(request.data)
        except fhir.FhirInputError as problem:
            await api_refusal_audit(client=request.auth, text=request.data,
                                    error_class=f"FhirInputError:{problem.code}")
            return Response(fhir.operation_outcome(problem.code, problem.diagnostics), status=400)
        try:
            translation, engine = await api_translation_accept(client=request.auth, text=text)
        except APIRefusal as refusal:
            return Response(fhir.operation_outcome(ISSUE_BY_STATUS.get(refusal.status, "exception"),
                                                   refusal.detail),
                            status=refusal.status, headers=refusal.headers)
        events = stream.translation_events(translation=translation, engine=engine, received_ns=received_ns)
        final = await stream.translation_until_final(events)
        stream.translation_detach(events, request_id=str(translation.request_id))  # the stream's close
        if final.kind == stream.UNRECORDED:
            return Response(fhir.operation_outcome("transient", stream.UNRECORDED_MESSAGE),
                            status=503, headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)})
        if final.kind != stream.DONE:  # recorded as error: 503 transient (engine restarting) or 502 exception
            failure = translation_failure_answer(final.translation)
            return Response(fhir.operation_outcome(failure.fhir_issue, failure.detail),
                            status=failure.status, headers=failure.headers)
        view = await database_sync_to_async(selectors.translation_api_view)(translation=final.translation)
        return Response(fhir.plain_language_parameters(api_view=view, references=references))

    def handle_exception(self, exc):
        """Authentication, scope, throttle, parse and unavailable-service
        errors as OperationOutcome."""
        exc = as_api_exception(exc)
        response = super().handle_exception(exc)
        if isinstance(exc, exceptions.APIException):
            detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
            response.data = fhir.operation_outcome(ISSUE_BY_STATUS.get(response.status_code, "exception"),
                                                   str(detail))
        return response
