"""The idle timeout across transports: a clinician who keeps working over
the WebSocket keeps their session, as one who keeps loading pages does
(``SESSION_SAVE_EVERY_REQUEST``)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.sessions.models import Session
from django.utils import timezone


def session_activity_record(*, session_key: str | None) -> bool:
    """Restart a live session's idle timeout: its expiry becomes now +
    ``SESSION_COOKIE_AGE`` (s; ``SESSION_IDLE_TIMEOUT_S``). The session's
    data is not touched, so a logout or login in another tab is never undone,
    and an ended session is never brought back.

    Returns:
        ``True`` if the session was live and is extended.
    """
    if not session_key:
        return False
    now = timezone.now()
    return bool(Session.objects.filter(session_key=session_key, expire_date__gt=now)
                .update(expire_date=now + timedelta(seconds=settings.SESSION_COOKIE_AGE)))
