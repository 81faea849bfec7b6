"""Errors as HTTP answers with a JSON ``detail``, never Django's HTML page
or a 500.

A database or Redis that cannot be reached (at authentication, throttling
or admission) answers 503 with ``Retry-After``: the request was not recorded
and can be sent again. A body nested too deeply for the parser (Python's
recursion limit, about 1,000 levels) is a 400; one larger than
``DATA_UPLOAD_MAX_MEMORY_SIZE`` a 413.

A translation that was admitted and then failed (its row and audit record
say ``error``) is answered by :func:`translation_failure_answer`, the one
mapping the JSON API, its server-sent events and FHIR share:

=====================  ======  =================  ==================
code                   HTTP    ``Retry-After``    FHIR issue code
=====================  ======  =================  ==================
``engine_restarting``  503     30 s               ``transient``
``engine_error``       502     none               ``exception``
=====================  ======  =================  ==================

``engine_restarting``: the engine died under the translation (vLLM's
engine core exited, llama.cpp failed in a decode) and the replica is
rebuilding it; the socket's ``error`` frame says the same
(:func:`clinical.translation.finish.translation_failure`). A request refused at
admission because the engine is dead is a 503 with the same code
(:func:`clinical.translation.admission.engine_restarting_refusal`).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from limits.errors import StorageError
from redis.exceptions import RedisError
from rest_framework import exceptions, views

from clinical.models import Translation
from clinical.translation.admission import unavailable_refusal
from clinical.translation.finish import translation_failure


class ServiceUnavailable(exceptions.APIException):
    """HTTP 503: the database or Redis is unreachable; ``wait`` seconds
    become the ``Retry-After`` header."""

    status_code = 503
    default_code = "unavailable"


class PayloadTooLarge(exceptions.APIException):
    """HTTP 413: the body is over ``DATA_UPLOAD_MAX_MEMORY_SIZE``."""

    status_code = 413
    default_code = "too_large"


def as_api_exception(exc: Exception) -> Exception:
    """``exc`` itself, or the API exception that answers it:
    :class:`ServiceUnavailable` for an unreachable database or Redis, a 400
    for a body nested too deeply, :class:`PayloadTooLarge` for one too
    large."""
    if isinstance(exc, RecursionError):
        return exceptions.ParseError("The JSON body is nested too deeply to read.")
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge(f"The body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes.")
    if isinstance(exc, (DatabaseError, RedisError, StorageError)):
        refusal = unavailable_refusal()
        unavailable = ServiceUnavailable(refusal.message)
        unavailable.wait = refusal.retry_after_s
        return unavailable
    return exc


#: Characters of a client's value an error message repeats at most (DRF's
#: messages quote the value: '"<value>" is not a valid choice.').
ECHO_MAX_CHARS = 200


def echo_truncate(detail):
    """``detail`` (DRF's error data: strings, lists and dicts of them) with
    every string over :data:`ECHO_MAX_CHARS` cut to that length and marked
    with how long it was, so an answer never repeats a large value back."""
    if isinstance(detail, dict):
        return {key: echo_truncate(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [echo_truncate(value) for value in detail]
    if isinstance(detail, str) and len(detail) > ECHO_MAX_CHARS:
        cut = detail[:ECHO_MAX_CHARS] + f"... ({len(detail):,} characters)"
        return exceptions.ErrorDetail(cut, code=getattr(detail, "code", None))
    return detail


def exception_handler(exc: Exception, context: dict):
    """DRF ``EXCEPTION_HANDLER``: DRF's own, after :func:`as_api_exception`,
    with echoed values cut (:func:`echo_truncate`)."""
    response = views.exception_handler(as_api_exception(exc), context)
    if response is not None and response.data is not None:
        response.data = echo_truncate(response.data)
    return response


#: HTTP status and FHIR ``IssueType`` of each failure code.
_FAILURE_HTTP = {"engine_restarting": (503, "transient"), "engine_error": (502, "exception")}


@dataclass(frozen=True)
class FailureAnswer:
    """How the API answers a failed translation.

    Attributes:
        status: HTTP status of a synchronous answer (503 or 502).
        code: ``engine_restarting`` or ``engine_error``.
        detail: the message (no patient text).
        retry_after_s: seconds for ``Retry-After`` (``None``: no header).
        fhir_issue: the FHIR ``OperationOutcome.issue.code``.
    """

    status: int
    code: str
    detail: str
    retry_after_s: int | None
    fhir_issue: str

    @property
    def headers(self) -> dict[str, str]:
        """``Retry-After`` when a retry can help, else nothing."""
        return {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else {}

    def body(self, view: dict) -> dict:
        """The JSON (and server-sent ``error`` event) body: ``code``,
        ``detail``, ``retry_after_s`` when set, then the translation as
        ``GET`` returns it (``view``; its ``status`` is ``error``)."""
        head = {"code": self.code, "detail": self.detail}
        if self.retry_after_s is not None:
            head["retry_after_s"] = self.retry_after_s
        return head | view


def translation_failure_answer(translation: Translation) -> FailureAnswer:
    """The answer to a translation whose row ended ``error`` (see the
    module docstring's table), from its ``error_class``."""
    failure = translation_failure(translation)
    status, issue = _FAILURE_HTTP.get(failure.code, (502, "exception"))
    return FailureAnswer(status=status, code=failure.code, detail=failure.message,
                         retry_after_s=failure.retry_after_s, fhir_issue=issue)
