"""Reads: querysets the views and consumers use."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db.models import Q, QuerySet
from django.utils import timezone

from clinical.models import Translation
from clinical.quality import measure as quality
from clinical.rerun.change_note import sentences_as_written
from clinical.rerun.sentences import sentence_text
from clinical.translation.alignment import translation_sentences
from clinical.translation.handouts import handout_model_text


def translation_list_for_user(*, user, limit: int = 10) -> QuerySet[Translation]:
    """The user's own most recent translations, newest first (``limit`` rows)."""
    return Translation.objects.filter(user=user).order_by("-created_at")[:limit]


def translation_search_for_user(*, user, q: str = "") -> QuerySet[Translation]:
    """The user's own translations, newest first, for the history page.

    ``q`` (stripped; empty = all) keeps those whose input or output text
    contains it, case-insensitively (``icontains``: ``UPPER(...) LIKE`` on
    PostgreSQL, ``LIKE`` on SQLite; ``%`` and ``_`` in ``q`` match
    literally). Other users' translations are never included.
    """
    rows = Translation.objects.filter(user=user)
    q = (q or "").strip()
    if q:
        rows = rows.filter(Q(input_text__icontains=q) | Q(output_text__icontains=q))
    return rows.order_by("-created_at", "-id")


def translation_get_for_user(*, user, request_id) -> Translation:
    """One of the user's own translations.

    Raises:
        Translation.DoesNotExist: no such translation, or it belongs to
            someone else (callers answer 404 either way).
    """
    return Translation.objects.get(user=user, request_id=request_id)


def handout_for_user(*, user, request_id) -> dict:
    """A patient handout of one of the user's own completed translations:
    ``{"translation", "model_text", "text", "edits", "latest_edit",
    "doubted_drafts"}`` (:func:`doubted_drafts`) where
    ``text`` is the newest edit's text, else the model's version
    (``model_text``: the verified text when there is one, else the fast
    text), and ``edits`` the clinician's edits, newest first.

    Raises:
        Translation.DoesNotExist: no such translation, someone else's, or
            one that did not complete (callers answer 404).
    """
    translation = (Translation.objects.prefetch_related("reruns")
                   .get(user=user, request_id=request_id, status=Translation.Status.COMPLETED))
    edits = list(translation.edits.select_related("editor").order_by("-created_at", "-id"))
    model_text = handout_model_text(translation=translation)
    return {"translation": translation, "model_text": model_text,
            "text": edits[0].text if edits else model_text, "edits": edits,
            "latest_edit": edits[0] if edits else None,
            "doubted_drafts": doubted_drafts(translation=translation)}


def doubted_drafts(*, translation: Translation) -> list[dict]:
    """The plain-words drafts of a note's sentences that its re-run gave as
    written (:func:`clinical.rerun.change_note.sentences_as_written`), for the
    clinician to judge: ``[{"sentence": number from 1, "text": the
    streamed text of that sentence}]`` in order; empty for any other
    translation (a whole text given as written keeps its draft as the fast
    text)."""
    rerun = translation.verified_rerun
    if rerun is None or not translation.sentence_checks:
        return []
    return [{"sentence": n, "text": sentence_text(translation, n - 1)} for n in sentences_as_written(rerun)
            if n <= len(translation.sentence_checks) and sentence_text(translation, n - 1)]


def translation_api_view(*, translation: Translation) -> dict:
    """The REST API's representation of a translation (see
    ``clinical.api.serializers.TranslationSerializer``), read fresh from the
    database."""
    translation = Translation.objects.prefetch_related("reruns").get(pk=translation.pk)
    verified = translation.verified_rerun
    return {
        "id": translation.request_id,
        "status": translation.status,
        "text": verified.output_text if verified else translation.output_text,
        "fast_text": translation.output_text,
        "verified_text": verified.output_text if verified else None,
        "verified": verified is not None,
        "verification": translation.verification,
        "confidence": translation.confidence,
        "verified_confidence": verified.confidence if verified else None,
        "engine": verified.engine if verified else translation.engine,
        "model": verified.model_name if verified else translation.model_name,
        # The engine's own label for the text in "text" (Rerun.precision_label).
        "precision": verified.precision_label if verified else translation.precision,
        "prompt_version": translation.prompt_version,
        "reading_level": translation.reading_level,
        "language": translation.language,
        "tokens_in": translation.tokens_in,
        "tokens_out": translation.tokens_out,
        "timings": {
            "queue_wait_ms": translation.queue_wait_ms,
            "ttft_ms": translation.ttft_ms,
            "total_ms": translation.total_ms,
            "rerun_queue_wait_ms": verified.queue_wait_ms if verified else None,
            "rerun_ms": verified.duration_ms if verified else None,
        },
        "ai_generated": True,
        # The fast output's readability and safety check, why it was re-run,
        # the glossary, and the re-run output's own check (clinical.quality.measure).
        **quality.translation_quality_payload(translation),
        "verified_quality": quality.rerun_quality_payload(verified) if verified else None,
        "sentences": translation_sentences(translation),
        "created_at": translation.created_at,
        "finished_at": translation.finished_at,
    }


def translation_api_get(*, api_client, request_id) -> dict:
    """One of ``api_client``'s own translations for the API.

    Raises:
        Translation.DoesNotExist: unknown id or another client's translation.
    """
    translation = Translation.objects.get(api_client=api_client, request_id=request_id)
    return translation_api_view(translation=translation)


def session_is_live(*, session_key: str | None, user_id: int | None) -> bool:
    """True while the session exists and has not expired and its user is
    still active (sockets call this to notice logout, idle timeout and
    deactivation)."""
    if not session_key or user_id is None:
        return False
    return (Session.objects.filter(session_key=session_key, expire_date__gt=timezone.now()).exists()
            and get_user_model().objects.filter(pk=user_id, is_active=True).exists())
