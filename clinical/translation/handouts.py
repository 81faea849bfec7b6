"""Patient handouts: the explanation a clinician prints or copies for the
patient, and the clinician's edits of it (writes; reads are in
:mod:`clinical.translation.selectors`).

The model's version (the fast text, or the full-precision text once
verified) is never changed: each save adds an append-only
:class:`~clinical.models.TranslationEdit` beside it and one ``handout_edit``
audit event carrying the SHA-256 of the edited text, never the text.
"""

from __future__ import annotations

import unicodedata

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from clinical.audit import audit_handout_edit, text_fingerprint
from clinical.models import Translation, TranslationEdit
from clinical.translation.text_checks import submitted_characters_check

HANDOUT_MAX_CHARS = 20_000


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


@transaction.atomic
def translation_edit_create(*, translation: Translation, editor, text: object) -> TranslationEdit | None:
    """Store the clinician's edited handout text, with its audit event, in
    one transaction.

    Returns:
        The new edit, or ``None`` when ``text`` (cleaned) equals the
        handout's current text (nothing to store).

    Raises:
        PermissionDenied: ``editor`` is not the translation's clinician.
        ValidationError: bad text (see :func:`handout_text_clean`), or
            ``code="not_completed"`` for a translation that did not complete.
    """
    if editor is None or translation.user_id is None or editor.pk != translation.user_id:
        raise PermissionDenied("Only the clinician who asked for the translation may edit its handout.")
    if translation.status != Translation.Status.COMPLETED:
        raise ValidationError("Only a completed translation has a handout.", code="not_completed")
    cleaned = handout_text_clean(text=text)
    # Lock the translation so two saves at once are stored one after the other.
    Translation.objects.select_for_update().filter(pk=translation.pk).first()
    latest = translation.edits.order_by("-created_at", "-id").first()
    model_text = handout_model_text(translation=translation)
    if cleaned == (latest.text if latest else model_text):
        return None
    edit = TranslationEdit.objects.create(
        translation=translation, editor=editor, text=cleaned,
        text_sha256=text_fingerprint(cleaned)[0], model_text_sha256=text_fingerprint(model_text)[0])
    audit_handout_edit(edit=edit)
    return edit
