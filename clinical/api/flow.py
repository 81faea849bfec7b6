"""Accepting an API request into a translation: shared by the JSON and the
FHIR endpoints, so both refuse, audit and admit the same way."""

from __future__ import annotations

from channels.db import database_sync_to_async
from django.core.exceptions import ValidationError

from clinical import audit, services
from clinical.engine import engine_get
from clinical.models import Translation
from inference.base import Engine, EngineBusy


class APIRefusal(Exception):
    """The request was refused (and audited); answer ``status`` with
    ``detail`` and ``headers``."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers or {}


async def api_translation_accept(*, client, text: object, reading_level: int | None = None,
                                 language: str | None = None) -> tuple[Translation, Engine]:
    """Admit ``text`` from API ``client``: a pending translation on a started
    engine with room in its queue.

    Raises:
        APIRefusal: 400 invalid text, 503 busy (with ``Retry-After``) or
            engine unavailable; each audited as rejected or error.
    """
    try:
        engine = await engine_get()
        engine.admit()
    except EngineBusy as busy:
        await database_sync_to_async(audit.audit_refusal)(
            user=None, api_client=client, source=Translation.Source.API, text=text,
            outcome="rejected", error_class="EngineBusy")
        raise APIRefusal(503, f"The service is busy. Retry in {busy.retry_after_s} s.",
                         {"Retry-After": str(busy.retry_after_s)}) from None
    except Exception as exc:  # noqa: BLE001 - the engine could not load
        await database_sync_to_async(audit.audit_refusal)(
            user=None, api_client=client, source=Translation.Source.API, text=text,
            outcome="error", error_class=type(exc).__name__)
        raise APIRefusal(503, "The translation engine is unavailable.", {"Retry-After": "30"}) from None
    try:
        translation = await database_sync_to_async(services.translation_create)(
            user=None, api_client=client, text=text, source=Translation.Source.API,
            engine_info=engine.info, reading_level=reading_level, language=language)
    except ValidationError as exc:
        raise APIRefusal(400, exc.messages[0]) from None
    return translation, engine


async def api_refusal_audit(*, client, text: object, error_class: str) -> None:
    """Audit a request refused before its text could be read."""
    await database_sync_to_async(audit.audit_refusal)(
        user=None, api_client=client, source=Translation.Source.API, text=text,
        outcome="rejected", error_class=error_class)
