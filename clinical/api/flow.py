"""Accepting an API request into a translation: shared by the JSON and the
FHIR endpoints, so both refuse, audit and admit the same way."""

from __future__ import annotations

from channels.db import database_sync_to_async

from clinical import audit
from clinical.models import Translation
from clinical.translation import admission
from inference.base import Engine


class APIRefusal(Exception):
    """The request was refused (and audited); answer ``status`` with
    ``detail``, ``code`` (the refusal's code, e.g. ``busy``,
    ``engine_restarting``; ``""`` when there is none) and ``headers``."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None, code: str = "") -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers, self.code = status, detail, headers or {}, code

    def body(self) -> dict:
        """The JSON body: ``{"detail", "code"?}``."""
        return {"detail": self.detail} | ({"code": self.code} if self.code else {})


async def api_translation_accept(*, client, text: object, reading_level: int | None = None,
                                 language: str | None = None) -> tuple[Translation, Engine]:
    """Admit ``text`` from API ``client`` (see
    :func:`clinical.translation.admission.translation_accept`).

    Raises:
        APIRefusal: 400 for invalid input, 429 with ``Retry-After`` when the
            client already runs ``API_CLIENT_MAX_CONCURRENT_TRANSLATIONS``,
            503 with ``Retry-After`` for a busy, unavailable or restarting
            engine (``code`` ``busy``, ``unavailable``, ``engine_error``,
            ``engine_restarting``, ``draining``).
    """
    try:
        return await admission.translation_accept(
            user=None, api_client=client, source=Translation.Source.API, text=text,
            reading_level=reading_level, language=language)
    except admission.TranslationRefused as refused:
        if refused.retry_after_s is None:
            raise APIRefusal(400, refused.message, code=refused.code) from None
        retry = {"Retry-After": str(refused.retry_after_s)}
        if refused.code == "too_many_translations":
            raise APIRefusal(429, refused.message, retry, code=refused.code) from None
        raise APIRefusal(503, refused.message, retry, code=refused.code) from None


async def api_refusal_audit(*, client, text: object, error_class: str) -> None:
    """Audit a request refused before its text could be read."""
    await database_sync_to_async(audit.audit_refusal)(
        user=None, api_client=client, source=Translation.Source.API, text=text,
        outcome="rejected", error_class=error_class)
