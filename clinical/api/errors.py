"""Errors as HTTP answers with a JSON ``detail``, never Django's HTML page
or a 500.

A database or Redis that cannot be reached (at authentication, throttling
or admission) answers 503 with ``Retry-After``: the request was not recorded
and can be sent again. A body nested too deeply for the parser (Python's
recursion limit, about 1,000 levels) is a 400; one larger than
``DATA_UPLOAD_MAX_MEMORY_SIZE`` a 413.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from limits.errors import StorageError
from redis.exceptions import RedisError
from rest_framework import exceptions, views

from clinical.translation.services import unavailable_refusal


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


def exception_handler(exc: Exception, context: dict):
    """DRF ``EXCEPTION_HANDLER``: DRF's own, after :func:`as_api_exception`."""
    return views.exception_handler(as_api_exception(exc), context)
