"""Patient handouts: the explanation a clinician prints or copies for the
patient, and the clinician's edits of it (writes; reads are in
:mod:`clinical.translation.selectors`).

The model's version (the fast text, or the full-precision text once
verified) is never changed: each save adds an append-only
:class:`~clinical.models.TranslationEdit` beside it and one ``handout_edit``
audit event carrying the SHA-256 of the edited text, never the text.
"""

from __future__ import annotations

import difflib
import unicodedata

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from clinical.audit import audit_handout_edit, audit_handout_sentence_kept, text_fingerprint
from clinical.models import Translation, TranslationEdit
from clinical.translation.alignment import translation_sentences
from clinical.translation.text_checks import submitted_characters_check

HANDOUT_MAX_CHARS = 20_000

#: What a clinician did to the handout, as the audit log records it
#: (``AuditEvent.handout_change["action"]``): an edit of the text, a
#: sentence replaced by the diagnosis as written, a sentence kept as the
#: model wrote it.
EDIT, AS_WRITTEN, KEEP = "edit", "as_written", "keep"


def handout_model_text(*, translation: Translation) -> str:
    """The model's version of the handout: the verified full-precision text
    when there is one, else the fast text."""
    verified = translation.verified_rerun
    return verified.output_text if verified else translation.output_text


def handout_text_clean(*, text: object) -> str:
    """Validate and normalise an edited handout text.

    Returns:
        The text NFC-normalised, with ``\\r\\n``/``\\r`` turned into ``\\n``
        and surrounding whitespace stripped.

    Raises:
        ValidationError: ``code`` ``"invalid"`` (not a string, or
            characters no submitted text may hold, as for a diagnosis:
            :func:`clinical.translation.text_checks.submitted_characters_check`),
            ``"empty"``, or ``"too_long"`` (over ``HANDOUT_MAX_CHARS``
            characters). The handout may be in the output language (Spanish
            too): its language is not checked.
    """
    if not isinstance(text, str):
        raise ValidationError("The handout text must be a string.", code="invalid")
    cleaned = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n").strip()
    if not cleaned:
        raise ValidationError("The handout text is empty; nothing was saved.", code="empty")
    if len(cleaned) > HANDOUT_MAX_CHARS:
        raise ValidationError(f"The handout is {len(cleaned):,} characters long; the limit is "
                              f"{HANDOUT_MAX_CHARS:,}.", code="too_long")
    submitted_characters_check(cleaned, what="The handout text", allowed_controls="\t\n")
    return cleaned


def _editor_check(translation: Translation, editor) -> None:
    if editor is None or translation.user_id is None or editor.pk != translation.user_id:
        raise PermissionDenied("Only the clinician who asked for the translation may edit its handout.")
    if translation.status != Translation.Status.COMPLETED:
        raise ValidationError("Only a completed translation has a handout.", code="not_completed")


def handout_current_text(*, translation: Translation) -> str:
    """The handout as it stands: the newest edit's text, else the model's
    version (:func:`handout_model_text`)."""
    latest = translation.edits.order_by("-created_at", "-id").first()
    return latest.text if latest else handout_model_text(translation=translation)


@transaction.atomic
def translation_edit_create(*, translation: Translation, editor, text: object,
                            change: dict | None = None) -> TranslationEdit | None:
    """Store the clinician's edited handout text, with its audit event, in
    one transaction.

    Args:
        change: what the clinician did, for the audit event
            (``{"action", "sentences"}``, :data:`EDIT` or
            :data:`AS_WRITTEN`, sentence numbers from 1; no text); by
            default an :data:`EDIT` of the model's sentences that the new
            text no longer holds word for word.

    Returns:
        The new edit, or ``None`` when ``text`` (cleaned) equals the
        handout's current text (nothing to store).

    Raises:
        PermissionDenied: ``editor`` is not the translation's clinician.
        ValidationError: bad text (see :func:`handout_text_clean`), or
            ``code="not_completed"`` for a translation that did not complete.
    """
    _editor_check(translation, editor)
    cleaned = handout_text_clean(text=text)
    # Lock the translation so two saves at once are stored one after the other.
    Translation.objects.select_for_update().filter(pk=translation.pk).first()
    model_text = handout_model_text(translation=translation)
    if cleaned == handout_current_text(translation=translation):
        return None
    if change is None:
        changed = [s["number"] for s in translation_sentences(translation)
                   if s["plain"] and s["plain"]["text"] not in cleaned]
        change = {"action": EDIT, "sentences": changed}
    edit = TranslationEdit.objects.create(
        translation=translation, editor=editor, text=cleaned,
        text_sha256=text_fingerprint(cleaned)[0], model_text_sha256=text_fingerprint(model_text)[0])
    audit_handout_edit(edit=edit, change=change)
    return edit


@transaction.atomic
def handout_sentence_as_written(*, translation: Translation, editor, number: int) -> TranslationEdit | None:
    """Replace plain sentence ``number`` (from 1,
    :func:`clinical.translation.alignment.translation_sentences`) in the
    handout by its sentence of the diagnosis as written, stored as an edit
    with one ``handout_edit`` audit event (``{"action": "as_written",
    "sentences": [number]}``).

    Returns:
        The new edit, or ``None`` when the sentence is already as written.

    Raises:
        PermissionDenied, ValidationError: as :func:`translation_edit_create`;
            ``ValidationError`` ``code="no_sentence"`` for a number the
            translation has not, ``code="sentence_edited"`` where an edit of
            the handout touched the model's sentence (change it in the text
            instead).
    """
    _editor_check(translation, editor)
    sentence = _sentence(translation, number)
    current = handout_current_text(translation=translation)
    plain, source = sentence["plain"], sentence["source"]["text"]
    if plain is not None and plain["text"] == source:
        return None
    span = None if plain is None else _span_kept(handout_model_text(translation=translation), current,
                                                 plain["start"], plain["end"])
    if span is None:
        raise ValidationError(f"Sentence {number} was edited in the handout; change it in the text below.",
                              code="sentence_edited")
    return translation_edit_create(translation=translation, editor=editor,
                                   text=current[:span[0]] + source + current[span[1]:],
                                   change={"action": AS_WRITTEN, "sentences": [number]})


def _span_kept(model: str, current: str, start: int, end: int) -> tuple[int, int] | None:
    """Where ``model[start:end]`` stands in ``current`` (the handout after
    the clinician's edits), when edits left it whole; ``None`` where an
    edit touched it (difflib's matching blocks, character by character)."""
    if model == current:
        return start, end
    matcher = difflib.SequenceMatcher(None, model, current, autojunk=False)
    for tag, i1, i2, j1, _ in matcher.get_opcodes():
        if tag == "equal" and i1 <= start and end <= i2:
            return j1 + start - i1, j1 + end - i1
    return None


def handout_sentence_keep(*, translation: Translation, editor, number: int):
    """Record that the clinician read plain sentence ``number`` (from 1)
    against the diagnosis and keeps it as the model wrote it: one
    ``handout_edit`` audit event with outcome ``kept`` (``{"action":
    "keep", "sentences": [number]}``); the handout does not change.

    Raises:
        PermissionDenied, ValidationError: as :func:`handout_sentence_as_written`
            (``no_sentence``).
    """
    _editor_check(translation, editor)
    _sentence(translation, number)
    return audit_handout_sentence_kept(translation=translation, editor=editor,
                                       change={"action": KEEP, "sentences": [number]})


def _sentence(translation: Translation, number: int) -> dict:
    sentences = translation_sentences(translation)
    if not isinstance(number, int) or not 1 <= number <= len(sentences):
        raise ValidationError(f"This translation has no sentence {number}.", code="no_sentence")
    return sentences[number - 1]
