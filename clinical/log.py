"""Request-id tagging for application logs (PHI stays out of logs).

Log records carry the request id of the translation being processed, taken
from a context variable; clinical text is never passed to a logger.
"""

from __future__ import annotations

import contextvars
import logging

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id`` (``"-"`` outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True
