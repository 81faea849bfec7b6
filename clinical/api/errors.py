"""Errors of backing services as HTTP answers.

A database or Redis that cannot be reached (at authentication, throttling
or admission) answers 503 with ``Retry-After`` and a JSON ``detail``, never
a 500: the request was not recorded and can be sent again.
"""

from __future__ import annotations

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


def as_api_exception(exc: Exception) -> Exception:
    """``exc`` itself, or :class:`ServiceUnavailable` for an unreachable
    database or Redis."""
    if isinstance(exc, (DatabaseError, RedisError, StorageError)):
        refusal = unavailable_refusal()
        unavailable = ServiceUnavailable(refusal.message)
        unavailable.wait = refusal.retry_after_s
        return unavailable
    return exc


def exception_handler(exc: Exception, context: dict):
    """DRF ``EXCEPTION_HANDLER``: DRF's own, after :func:`as_api_exception`."""
    return views.exception_handler(as_api_exception(exc), context)
