"""Reads: querysets the views and consumers use."""

from __future__ import annotations

from django.db.models import QuerySet

from clinical.models import Translation


def translation_list_for_user(*, user, limit: int = 10) -> QuerySet[Translation]:
    """The user's own most recent translations, newest first (``limit`` rows)."""
    return Translation.objects.filter(user=user).order_by("-created_at")[:limit]


def translation_get_for_user(*, user, request_id) -> Translation:
    """One of the user's own translations.

    Raises:
        Translation.DoesNotExist: no such translation, or it belongs to
            someone else (callers answer 404 either way).
    """
    return Translation.objects.get(user=user, request_id=request_id)
