"""The patient handout: print view for the translation's own clinician
only, edits stored append-only beside the model's version, each audited by
its SHA-256 (never its text)."""

from __future__ import annotations

import hashlib
import logging

import pytest
from django.db import DatabaseError, connection

from clinical.models import AppendOnlyError, AuditEvent, Rerun, Translation, TranslationEdit
from tests.data import laymaker_sentences


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def translation(clinician):
    text = laymaker_sentences()[11]
    return Translation.objects.create(user=clinician, input_text=text, output_text="The model's words about it.",
                                      status=Translation.Status.COMPLETED, language="en")


def handout_url(translation: Translation) -> str:
    return f"/translations/{translation.request_id}/handout/"


# -- who may see it --------------------------------------------------------------

@pytest.mark.django_db
def test_the_owner_sees_the_print_view_with_the_models_text(client, clinician, translation):
    client.force_login(clinician)
    response = client.get(handout_url(translation))
    assert response.status_code == 200
    body = response.content.decode()
    assert "The model&#x27;s words about it." in body and "@media print" not in body  # stylesheet, not inline
    assert "Not edited: the handout is the model's version." in body
    assert 'data-print-on-load="false"' in body


@pytest.mark.django_db
def test_another_clinician_gets_404_and_cannot_edit(client, other_clinician, translation):
    client.force_login(other_clinician)
    assert client.get(handout_url(translation)).status_code == 404
    assert client.post(handout_url(translation), {"text": "Hijacked."}).status_code == 404
    assert not TranslationEdit.objects.exists()
    assert not AuditEvent.objects.filter(event_type="handout_edit").exists()


@pytest.mark.django_db
def test_someone_logged_out_is_sent_to_the_login_page(client, translation):
    for response in (client.get(handout_url(translation)), client.post(handout_url(translation), {"text": "x"})):
        assert response.status_code == 302 and response.url.startswith("/accounts/login/")
    assert not TranslationEdit.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("status", [Translation.Status.PENDING, Translation.Status.CANCELLED,
                                    Translation.Status.ERROR])
def test_a_translation_that_did_not_complete_has_no_handout(client, clinician, translation, status):
    Translation.objects.filter(pk=translation.pk).update(status=status)
    client.force_login(clinician)
    assert client.get(handout_url(translation)).status_code == 404


@pytest.mark.django_db
def test_the_handout_starts_from_the_verified_text_when_there_is_one(client, clinician, translation):
    Rerun.objects.create(translation=translation, status=Rerun.Status.COMPLETED, output_text="Verified words.")
    Translation.objects.filter(pk=translation.pk).update(verification=Translation.Verification.VERIFIED)
    client.force_login(clinician)
    response = client.get(handout_url(translation))
    assert response.context["text"] == response.context["model_text"] == "Verified words."


# -- editing ---------------------------------------------------------------------

@pytest.mark.django_db
def test_an_edit_is_stored_beside_the_models_version_and_audited_by_its_hash(
        client, clinician, translation, caplog):
    client.force_login(clinician)
    edited = "Your heart is working normally.\nCome back if you feel chest pain."
    with caplog.at_level(logging.DEBUG):
        response = client.post(handout_url(translation), {"text": edited + "\r\n"})
    assert response.status_code == 302 and response.url == handout_url(translation)

    (edit,) = TranslationEdit.objects.all()
    assert (edit.translation, edit.editor, edit.text) == (translation, clinician, edited)
    assert edit.text_sha256 == sha256(edited)
    assert edit.model_text_sha256 == sha256("The model's words about it.")
    translation.refresh_from_db()
    assert translation.output_text == "The model's words about it."  # the model's version is kept

    (event,) = AuditEvent.objects.filter(event_type="handout_edit")
    assert (event.outcome, event.actor_user, event.request_id) == ("saved", clinician, translation.request_id)
    assert event.text_sha256 == edit.text_sha256
    stored = " ".join(str(getattr(event, f.attname)) for f in AuditEvent._meta.fields)
    assert "heart is working" not in stored
    assert not [r for r in caplog.records if "heart is working" in r.getMessage()]

    page = client.get(handout_url(translation))
    body = page.content.decode()
    assert page.context["text"] == edited and "Your edit was saved." in body
    assert f"Edited by {clinician.username}" in body


@pytest.mark.django_db
def test_saving_the_same_text_stores_nothing_and_each_change_adds_a_row(client, clinician, translation):
    client.force_login(clinician)
    client.post(handout_url(translation), {"text": "The model's words about it."})
    assert not TranslationEdit.objects.exists()
    assert "No changes to save." in client.get(handout_url(translation)).content.decode()

    client.post(handout_url(translation), {"text": "First edit."})
    client.post(handout_url(translation), {"text": "First edit."})
    client.post(handout_url(translation), {"text": "Second edit."})
    assert list(TranslationEdit.objects.values_list("text", flat=True)) == ["Second edit.", "First edit."]
    assert AuditEvent.objects.filter(event_type="handout_edit").count() == 2
    assert client.get(handout_url(translation)).context["text"] == "Second edit."


@pytest.mark.django_db
def test_save_and_print_comes_back_printing(client, clinician, translation):
    client.force_login(clinician)
    response = client.post(handout_url(translation), {"text": "Print me.", "print": "1"})
    assert response.url == handout_url(translation) + "?print=1"
    assert 'data-print-on-load="true"' in client.get(response.url).content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(("text", "message"), [
    ("   \n ", "The handout text is empty"),
    ("x" * 20_001, "the limit is 20,000"),
    ("bad \x07 bell", "control characters"),
])
def test_bad_edits_are_refused_with_a_clear_message_and_the_draft_kept(client, clinician, translation, text, message):
    client.force_login(clinician)
    response = client.post(handout_url(translation), {"text": text})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert response.context["draft"] == text
    assert not TranslationEdit.objects.exists()
    assert not AuditEvent.objects.filter(event_type="handout_edit").exists()


# -- append-only -----------------------------------------------------------------

@pytest.mark.django_db
def test_edits_cannot_be_changed_or_removed(clinician, translation):
    edit = TranslationEdit.objects.create(translation=translation, editor=clinician, text="a", text_sha256=sha256("a"))
    edit.text = "b"
    with pytest.raises(AppendOnlyError):
        edit.save()
    with pytest.raises(AppendOnlyError):
        edit.delete()
    with pytest.raises(AppendOnlyError):
        TranslationEdit.objects.filter(pk=edit.pk).update(text="b")
    with pytest.raises(AppendOnlyError):
        TranslationEdit.objects.all().delete()
    assert TranslationEdit.objects.get(pk=edit.pk).text == "a"


@pytest.mark.django_db
@pytest.mark.parametrize("sql", [
    "UPDATE clinical_translationedit SET text = 'b' WHERE id = %s",
    pytest.param("DELETE FROM clinical_translationedit WHERE id = %s", marks=pytest.mark.skipif(
        connection.vendor != "postgresql", reason="SQLite is emptied with DELETE FROM (flush): no DELETE trigger")),
])
def test_the_database_refuses_raw_changes_to_edits(clinician, translation, sql):
    edit = TranslationEdit.objects.create(translation=translation, editor=clinician, text="a", text_sha256=sha256("a"))
    with pytest.raises(DatabaseError, match="append-only"), connection.cursor() as cursor:
        cursor.execute(sql, [edit.pk])
