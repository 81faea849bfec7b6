"""Request-id tagging for application logs (PHI stays out of logs).

Every log record carries ``record.request_id``: the id of the translation
being processed in the current context (``"-"`` outside one), taken from a
context variable by a log-record factory installed when this module is
imported (settings' LOGGING imports it). Clinical text is never passed to a
logger; the request id is what ties log lines to an audit record.
"""

from __future__ import annotations

import contextvars
import logging

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

_base_factory = logging.getLogRecordFactory()


def _record_with_request_id(*args, **kwargs) -> logging.LogRecord:
    record = _base_factory(*args, **kwargs)
    record.request_id = request_id_var.get()
    return record


if not getattr(_base_factory, "adds_request_id", False):
    _record_with_request_id.adds_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(_record_with_request_id)


class RequestIdFilter(logging.Filter):
    """For handlers: make sure ``record.request_id`` exists (records made
    before this module was imported lack it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True
