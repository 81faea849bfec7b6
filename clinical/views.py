"""HTML views: the translation page (the streaming itself is a WebSocket)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_POST

from clinical import rerun
from clinical.models import Translation
from clinical.selectors import translation_get_for_user, translation_list_for_user


@login_required
def translate_page(request: HttpRequest) -> HttpResponse:
    """The clinician's page: paste a diagnosis, watch the translation stream."""
    return render(request, "clinical/translate.html", {
        "recent": translation_list_for_user(user=request.user, limit=10),
        "max_input_chars": settings.MAX_INPUT_CHARS,
        "reading_levels": Translation._meta.get_field("reading_level").choices,
        "languages": Translation._meta.get_field("language").choices,
    })


@login_required
def translation_detail(request: HttpRequest, request_id) -> HttpResponse:
    """One of the clinician's own translations (404 for anyone else's). While
    verification is pending the page follows it over the WebSocket."""
    try:
        translation = translation_get_for_user(user=request.user, request_id=request_id)
    except Translation.DoesNotExist:
        raise Http404("No such translation") from None
    verified = translation.verified_rerun
    frame = rerun.verification_frame(translation)
    return render(request, "clinical/translation_detail.html", {
        "translation": translation,
        "shown_text": verified.output_text if verified else translation.output_text,
        "fast_text": translation.output_text if verified else "",
        "verification_message": frame["message"] if frame else "",
    })


@require_POST
def session_extend(request: HttpRequest) -> JsonResponse:
    """``POST /accounts/extend/``: "stay signed in". The session middleware
    saves the session on every request (SESSION_SAVE_EVERY_REQUEST), which
    restarts the idle timeout; 401 when the session has already ended."""
    if not request.user.is_authenticated:
        return JsonResponse({"detail": "The session has ended."}, status=401)
    return JsonResponse({"idle_timeout_s": settings.SESSION_IDLE_TIMEOUT_S})


def idle_timeout(request: HttpRequest) -> dict:
    """Template context processor: the idle timeout for the page's warning."""
    return {"idle_timeout_s": settings.SESSION_IDLE_TIMEOUT_S}

