"""The entrance of a translation: a request is admitted (the replica is
not draining, the clinician's rate, the cap on translations running at
once, a started engine with room in its queue, a valid text) and stored as
a ``pending`` row, or refused with a reason every transport reports the
same way (:class:`TranslationRefused`), and audited.

Services (keyword-only, sync writes atomic) called by the WebSocket
consumer, the REST and FHIR views and management commands, which hold no
logic of their own. The run itself is :mod:`clinical.translation.stream`;
the exit is :mod:`clinical.translation.finish`.
"""

from __future__ import annotations

import logging
import math
import unicodedata
import uuid

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction
from limits.errors import StorageError
from redis.exceptions import RedisError

from clinical import audit
from clinical.models import Translation
from clinical.runtime import drain, metrics
from clinical.translation import concurrency, ratelimit
from clinical.translation import engine as process_engine
from clinical.translation.prompting import translation_prompt_version
from clinical.translation.text_checks import input_language_check, submitted_characters_check
from inference.base import EngineBusy, EngineDead, EngineInfo
from inference.prompts import (
    DEFAULT_LANGUAGE,
    DEFAULT_READING_LEVEL,
    LANGUAGES,
    READING_LEVELS,
)

logger = logging.getLogger(__name__)


def translation_text_clean(*, text: object) -> str:
    """Validate and normalise a diagnosis text.

    Returns:
        The text, NFC-normalised and stripped of surrounding whitespace.

    Raises:
        ValidationError: with ``code`` ``"invalid"`` (not a string, or
            characters no submitted text may hold:
            :func:`clinical.translation.text_checks.submitted_characters_check`),
            ``"empty"`` (also a text of invisible format characters only,
            such as zero-width spaces), ``"too_long"`` (over
            ``settings.MAX_INPUT_CHARS`` characters) or
            ``"unsupported_language"`` (not English:
            :func:`clinical.translation.text_checks.input_language_check`).
    """
    if not isinstance(text, str):
        raise ValidationError("The diagnosis text must be a string.", code="invalid")
    cleaned = unicodedata.normalize("NFC", text).strip()
    if not "".join(ch for ch in cleaned if unicodedata.category(ch) != "Cf").strip():
        raise ValidationError("Please enter a diagnosis text to translate.", code="empty")
    limit = settings.MAX_INPUT_CHARS
    if len(cleaned) > limit:
        raise ValidationError(
            f"The text is {len(cleaned):,} characters long; the limit is {limit:,}.",
            code="too_long",
        )
    submitted_characters_check(cleaned, what="The text")
    input_language_check(cleaned)
    return cleaned


def translation_options_clean(*, reading_level: object, language: object) -> tuple[int, str]:
    """Validate the reading level (US grade) and the output language.

    Returns:
        ``(reading_level, language)``; ``None`` values become the defaults
        (grade 6, English).

    Raises:
        ValidationError: code ``"invalid_option"``.
    """
    level = DEFAULT_READING_LEVEL if reading_level is None else reading_level
    lang = DEFAULT_LANGUAGE if language is None else language
    if not isinstance(level, int) or isinstance(level, bool) or level not in READING_LEVELS:
        raise ValidationError(f"The reading level must be one of {sorted(READING_LEVELS)}.", code="invalid_option")
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise ValidationError(f"The language must be one of {sorted(LANGUAGES)}.", code="invalid_option")
    return int(level), str(lang)


def translation_create(*, user, text: object, source: str = Translation.Source.WEB,
                       engine_info: EngineInfo | None = None, api_client=None,
                       reading_level: object = None, language: object = None,
                       request_id: uuid.UUID | None = None) -> Translation:
    """Accept a request: validate the text and options and store a
    ``pending`` row (``request_id``: the one its admission reserved a place
    under, else a new one).

    Raises:
        ValidationError: see :func:`translation_text_clean` and
            :func:`translation_options_clean`; no translation is stored,
            only its ``rejected`` audit event.
    """
    try:
        cleaned = translation_text_clean(text=text)
        reading_level, language = translation_options_clean(reading_level=reading_level, language=language)
    except ValidationError as exc:
        audit.audit_refusal(user=user, api_client=api_client, source=source, text=text,
                            outcome="rejected", error_class=f"ValidationError:{exc.code}",
                            engine_info=engine_info)
        raise
    return _translation_insert(user=user, api_client=api_client, text=cleaned, source=source,
                               engine_info=engine_info, reading_level=reading_level, language=language,
                               request_id=request_id or uuid.uuid4())


@transaction.atomic
def _translation_insert(*, user, api_client, text: str, source: str, engine_info: EngineInfo | None,
                        reading_level: int, language: str, request_id: uuid.UUID) -> Translation:
    return Translation.objects.create(
        request_id=request_id,
        user=user if user is not None and user.is_authenticated else None,
        api_client=api_client,
        reading_level=reading_level,
        language=language,
        source=source,
        input_text=text,
        prompt_version=translation_prompt_version(text=text, language=language),
        engine=engine_info.engine if engine_info else "",
        model_name=engine_info.model if engine_info else "",
        precision=engine_info.precision if engine_info else "",
    )


class TranslationRefused(Exception):
    """A request was refused before generation (and audited where the
    database could be reached).

    Attributes:
        code: ``engine_error`` (the model could not load),
            ``engine_restarting`` (the engine died and is being rebuilt:
            :func:`engine_restarting_refusal`), ``busy`` (the
            engine's queue is full), ``rate_limited`` (the clinician's
            ``TRANSLATE_RATE_PER_USER`` is used up), ``too_many_translations``
            (the clinician or API client already runs
            ``USER_MAX_CONCURRENT_TRANSLATIONS`` /
            ``API_CLIENT_MAX_CONCURRENT_TRANSLATIONS``), ``draining`` (this
            replica is shutting down; retry reaches another), ``unavailable`` (the
            database or Redis cannot be reached; nothing was stored) or a
            validation code (``empty``, ``too_long``, ``invalid``,
            ``invalid_option``, ``unsupported_language``).
        message: for the person or system that sent the request.
        retry_after_s: for ``busy``, ``rate_limited``,
            ``too_many_translations``, ``unavailable``, ``engine_error`` and
            ``engine_restarting``, seconds to wait.
    """

    def __init__(self, code: str, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.retry_after_s = code, message, retry_after_s


#: Seconds a client is asked to wait when the database or Redis is down.
UNAVAILABLE_RETRY_AFTER_S = 10


#: Seconds a client is asked to wait after the engine died (one rebuild of
#: the default model on a CPU; a 7B model on a GPU takes longer).
ENGINE_RESTART_RETRY_AFTER_S = 30


def engine_restarting_refusal(dead: EngineDead) -> TranslationRefused:
    """The refusal for a request that met a dead engine being rebuilt
    (:class:`inference.supervisor.EngineSupervisor`): code
    ``engine_restarting``, wait at least :data:`ENGINE_RESTART_RETRY_AFTER_S`
    (one rebuild), or until the next rebuild attempt when that is later."""
    wait_s = max(ENGINE_RESTART_RETRY_AFTER_S, math.ceil(dead.retry_after_s or 0))
    return TranslationRefused(
        "engine_restarting", "The translation engine stopped and is restarting; nothing was translated. "
        f"Please try again in {wait_s} s.", retry_after_s=wait_s)


def unavailable_refusal() -> TranslationRefused:
    """The refusal for a request that met an unreachable database or Redis."""
    return TranslationRefused(
        "unavailable", "The service cannot reach its database right now; nothing was recorded. "
        f"Please try again in {UNAVAILABLE_RETRY_AFTER_S} s.", retry_after_s=UNAVAILABLE_RETRY_AFTER_S)


async def translation_accept(*, user, api_client, source: str, text: object,
                             reading_level: object = None, language: object = None):
    """Admit a request from a socket or the API: within the clinician's
    rate, within the clinician's or client's cap on translations running at
    once (a place reserved atomically in Redis:
    :mod:`clinical.translation.concurrency`; read the events through
    :func:`clinical.translation.stream.translation_events`, which gives
    it back), a started engine with room in its queue, and a valid text
    stored as a pending translation.

    Returns:
        ``(translation, engine)``.

    Raises:
        TranslationRefused: see its codes; the refusal is audited
            (``error`` for an engine that cannot load, else ``rejected``),
            except ``unavailable``, which has no database to write to.
    """
    try:
        return await _translation_accept(user=user, api_client=api_client, source=source, text=text,
                                         reading_level=reading_level, language=language)
    except (DatabaseError, RedisError, StorageError) as exc:
        logger.error("request refused, backing service unreachable: %s", type(exc).__name__)
        metrics.request_observe(outcome="unavailable", source=source)
        raise unavailable_refusal() from None


async def _translation_accept(*, user, api_client, source, text, reading_level, language):
    refuse = database_sync_to_async(audit.audit_refusal)
    if drain.is_draining():  # this replica is shutting down (clinical.runtime.drain)
        await refuse(user=user, api_client=api_client, source=source, text=text,
                     outcome="rejected", error_class="Draining")
        raise TranslationRefused("draining", "This server is restarting. Please retry: you will be "
                                 "connected to another server.", retry_after_s=drain.DRAIN_RETRY_AFTER_S)
    if api_client is None and user is not None:
        retry_after_s = await sync_to_async(ratelimit.translate_retry_after_s, thread_sensitive=False)(
            user_id=user.pk)
        if retry_after_s is not None:
            await refuse(user=user, api_client=api_client, source=source, text=text,
                         outcome="rejected", error_class="RateLimited")
            raise TranslationRefused(
                "rate_limited", f"Too many translations in a short time. Please retry in {retry_after_s} s.",
                retry_after_s=retry_after_s)
    request_id = uuid.uuid4()
    place = await _place_take(user=user, api_client=api_client, request_id=request_id)
    if place is False:
        await refuse(user=user, api_client=api_client, source=source, text=text,
                     outcome="rejected", error_class="TooManyTranslations")
        cap = concurrency.translations_cap(api_client_id=getattr(api_client, "pk", None))
        raise TranslationRefused(
            "too_many_translations",
            f"You already have {cap} translation{'s' if cap != 1 else ''} running; let one finish or "
            f"cancel it, then retry (in about {concurrency.TRANSLATIONS_RETRY_AFTER_S} s).",
            retry_after_s=concurrency.TRANSLATIONS_RETRY_AFTER_S)
    try:
        return await _translation_admit(user=user, api_client=api_client, source=source, text=text,
                                        reading_level=reading_level, language=language, request_id=request_id)
    except BaseException:
        if place is not None:
            await concurrency.place_give_back(place)  # refused after all: the place goes back at once
        raise


async def _place_take(*, user, api_client, request_id: uuid.UUID):
    """The translation's place (:mod:`clinical.translation.concurrency`),
    ``None`` when its holder has no cap, ``False`` when the cap is reached."""
    api_client_id = getattr(api_client, "pk", None)
    wanted = concurrency.translation_place_for(user_id=getattr(user, "pk", None), api_client_id=api_client_id,
                                               request_id=request_id)
    if wanted is None:
        return None
    place = await concurrency.place_take(key=wanted.key, member=wanted.member,
                                         cap=concurrency.translations_cap(api_client_id=api_client_id))
    return False if place is None else place


async def _translation_admit(*, user, api_client, source, text, reading_level, language, request_id):
    refuse = database_sync_to_async(audit.audit_refusal)
    try:
        engine = await process_engine.engine_get()
    except Exception as exc:  # noqa: BLE001 - reported to the caller
        logger.error("engine unavailable: %s", type(exc).__name__)
        await refuse(user=user, api_client=api_client, source=source, text=text,
                     outcome="error", error_class=type(exc).__name__)
        if isinstance(exc, EngineDead):  # it served, died, and is being rebuilt
            raise engine_restarting_refusal(exc) from None
        raise TranslationRefused("engine_error", "The translation engine is unavailable. Please try again.",
                                 retry_after_s=30) from None
    try:
        admission = engine.admit()
    except EngineBusy as busy:
        await refuse(user=user, api_client=api_client, source=source, text=text,
                     outcome="rejected", error_class="EngineBusy", engine_info=engine.info)
        raise TranslationRefused("busy", f"The service is busy. Please retry in {busy.retry_after_s} s.",
                                 retry_after_s=busy.retry_after_s) from None
    try:
        translation = await database_sync_to_async(translation_create)(
            user=user, api_client=api_client, text=text, source=source, engine_info=engine.info,
            reading_level=reading_level, language=language, request_id=request_id)
    except ValidationError as exc:
        admission.release()  # refused after all: the place goes back at once
        raise TranslationRefused(exc.code or "invalid", exc.messages[0]) from None
    except BaseException:
        admission.release()
        raise
    return translation, engine
