"""HTML views: the translation page (the streaming itself is a WebSocket).

Every page that translates or shows translations is for members of the
Clinician group only (:func:`clinical.roles.clinician_required`: 403 for
anyone else signed in)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from clinical.models import Translation
from clinical.quality.display import language_review_notes, translation_quality_display
from clinical.roles import clinician_required
from clinical.translation import handouts
from clinical.translation.selectors import (
    handout_for_user,
    translation_get_for_user,
    translation_list_for_user,
    translation_search_for_user,
)
from clinical.web import frames
from clinical.web.sentence_view import translation_sentence_view

HISTORY_PAGE_SIZE = 20
HISTORY_QUERY_MAX_CHARS = 200


@clinician_required
def translate_page(request: HttpRequest) -> HttpResponse:
    """The clinician's page: paste a diagnosis, watch the translation stream."""
    return render(request, "clinical/translate.html", {
        "recent": translation_list_for_user(user=request.user, limit=10),
        "max_input_chars": settings.MAX_INPUT_CHARS,
        "reading_levels": Translation._meta.get_field("reading_level").choices,
        "languages": Translation._meta.get_field("language").choices,
        "language_notes": language_review_notes(),
    })


@clinician_required
def translation_history(request: HttpRequest) -> HttpResponse:
    """``GET /translations/?q=...&page=N``: the clinician's own translations,
    newest first, ``HISTORY_PAGE_SIZE`` a page, filtered by ``q`` (text in
    the input or output; at most ``HISTORY_QUERY_MAX_CHARS`` characters are
    used). A page number out of range shows the last page."""
    q = request.GET.get("q", "").strip()[:HISTORY_QUERY_MAX_CHARS]
    rows = translation_search_for_user(user=request.user, q=q)
    page = Paginator(rows, HISTORY_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "clinical/history.html", {"page": page, "q": q})


@clinician_required
def translation_detail(request: HttpRequest, request_id) -> HttpResponse:
    """One of the clinician's own translations (404 for anyone else's). While
    verification is pending the page follows it over the WebSocket."""
    try:
        translation = translation_get_for_user(user=request.user, request_id=request_id)
    except Translation.DoesNotExist:
        raise Http404("No such translation") from None
    verified = translation.verified_rerun
    frame = frames.verification_frame(translation)
    return render(request, "clinical/translation_detail.html", {
        "translation": translation,
        "sentence_view": translation_sentence_view(translation=translation),
        "shown_text": verified.output_text if verified else translation.output_text,
        "fast_text": translation.output_text if verified else "",
        "verification_message": frame["message"] if frame else "",
        "quality": translation_quality_display(translation=translation),
    })


@clinician_required
def translation_sentences_json(request: HttpRequest, request_id) -> JsonResponse:
    """``GET /translations/<id>/sentences/``: one of the clinician's own
    translations sentence by sentence, with its marks
    (:func:`clinical.web.sentence_view.translation_sentence_view`), for the
    live page to render after its ``done`` and ``verified`` frames; 404
    for anyone else's; empty lists until it completed."""
    try:
        translation = translation_get_for_user(user=request.user, request_id=request_id)
    except Translation.DoesNotExist:
        raise Http404("No such translation") from None
    return JsonResponse(translation_sentence_view(translation=translation))


@clinician_required
@require_http_methods(["GET", "POST"])
def translation_handout(request: HttpRequest, request_id) -> HttpResponse:
    """``/translations/<id>/handout/``: the patient handout of one of the
    clinician's own completed translations (404 otherwise): print view,
    copy button, and an edit form. ``POST text=...`` stores the edit
    (:func:`clinical.translation.handouts.translation_edit_create`) and redirects back
    (``?print=1`` when "Save and print" was pressed); bad text answers 400
    with the message and the text kept in the form."""
    try:
        handout = handout_for_user(user=request.user, request_id=request_id)
    except Translation.DoesNotExist:
        raise Http404("No such handout") from None
    context = {**handout, "draft": handout["text"], "error": "",
               "quality": translation_quality_display(translation=handout["translation"]),
               "sentence_view": translation_sentence_view(translation=handout["translation"], id_prefix="h"),
               "print_on_load": request.GET.get("print") == "1",
               "max_chars": handouts.HANDOUT_MAX_CHARS}
    if request.method == "POST":
        action = request.POST.get("action", handouts.EDIT)
        text = request.POST.get("text", "")
        try:
            message = _handout_post(handout["translation"], request.user, action, request.POST)
        except ValidationError as exc:
            context.update(draft=text if action == handouts.EDIT else handout["text"], error=exc.messages[0])
            return render(request, "clinical/handout.html", context, status=400)
        messages.success(request, message)
        url = reverse("translation-handout", args=[request_id])
        return redirect(url + "?print=1" if "print" in request.POST else url)
    return render(request, "clinical/handout.html", context)


def _handout_post(translation: Translation, user, action: str, data) -> str:
    """One handout action (:mod:`clinical.translation.handouts`): ``edit``
    (``text``), ``as_written`` or ``keep`` (``sentence``, a number from 1).
    Returns the message for the clinician.

    Raises:
        ValidationError: bad text, an unknown action or sentence.
    """
    if action == handouts.EDIT:
        edit = handouts.translation_edit_create(translation=translation, editor=user, text=data.get("text", ""))
        return "Your edit was saved." if edit else "No changes to save."
    try:
        number = int(data.get("sentence", ""))
    except ValueError:
        raise ValidationError("Choose a sentence.", code="no_sentence") from None
    if action == handouts.AS_WRITTEN:
        edit = handouts.handout_sentence_as_written(translation=translation, editor=user, number=number)
        return (f"Sentence {number} is now the diagnosis as written." if edit
                else f"Sentence {number} is already as written.")
    if action == handouts.KEEP:
        handouts.handout_sentence_keep(translation=translation, editor=user, number=number)
        return f"Sentence {number} is kept as written by the model; noted in the audit log."
    raise ValidationError("Unknown action.", code="invalid")


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

