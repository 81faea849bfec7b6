"""HTML views: the translation page (the streaming itself is a WebSocket)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from clinical.selectors import translation_list_for_user


@login_required
def translate_page(request: HttpRequest) -> HttpResponse:
    """The clinician's page: paste a diagnosis, watch the translation stream."""
    return render(request, "clinical/translate.html", {
        "recent": translation_list_for_user(user=request.user, limit=10),
        "max_input_chars": settings.MAX_INPUT_CHARS,
    })
