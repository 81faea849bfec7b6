"""One action per sentence on the handout (clinical/translation/handouts.py):
replace a sentence by the diagnosis as written, or keep it as the model
wrote it; the handout and the audit log follow, the log with what changed
and never the text."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from clinical.models import AuditEvent, Translation, TranslationEdit
from clinical.translation import handouts
from tests.translation.test_alignment import FAST, NOTE, SENTENCES, finished

pytestmark = pytest.mark.django_db


@pytest.fixture
def note(clinician, settings):
    settings.SELF_CHECK_THRESHOLD = 0.6
    return finished(clinician)


def handout_events():
    return list(AuditEvent.objects.filter(event_type="handout_edit").order_by("id"))


def test_a_sentence_given_as_written_replaces_only_that_sentence_and_is_audited_without_text(clinician, note):
    edit = handouts.handout_sentence_as_written(translation=note, editor=clinician, number=2)
    assert edit.text == f"{FAST[0]} {SENTENCES[1]} {FAST[2]}"
    [event] = handout_events()
    assert event.outcome == "saved" and event.handout_change == {"action": "as_written", "sentences": [2]}
    assert event.text_sha256 == edit.text_sha256 and "fracture" not in str(event.handout_change)
    # Again: nothing left to replace in that sentence; the handout keeps its version.
    with pytest.raises(ValidationError) as raised:
        handouts.handout_sentence_as_written(translation=note, editor=clinician, number=2)
    assert raised.value.code == "sentence_edited"


def test_a_sentence_outside_an_edit_can_still_be_given_as_written(clinician, note):
    edited = f"Extra words first. {FAST[0]} {FAST[1]} {FAST[2]}"
    handouts.translation_edit_create(translation=note, editor=clinician, text=edited)
    edit = handouts.handout_sentence_as_written(translation=note, editor=clinician, number=3)
    assert edit.text == f"Extra words first. {FAST[0]} {FAST[1]} {SENTENCES[2]}"
    first, second = handout_events()
    assert first.handout_change == {"action": "edit", "sentences": []}  # no model sentence was changed
    assert second.handout_change == {"action": "as_written", "sentences": [3]}


def test_an_edit_names_the_model_sentences_it_changed(clinician, note):
    handouts.translation_edit_create(translation=note, editor=clinician,
                                     text=f"{FAST[0]} Nothing is broken. {FAST[2]}")
    [event] = handout_events()
    assert event.handout_change == {"action": "edit", "sentences": [2]}


def test_a_sentence_kept_is_audited_and_the_handout_does_not_change(clinician, note):
    handouts.handout_sentence_keep(translation=note, editor=clinician, number=2)
    [event] = handout_events()
    assert event.outcome == "kept" and event.handout_change == {"action": "keep", "sentences": [2]}
    assert not TranslationEdit.objects.exists()


@pytest.mark.parametrize("number", [0, 4, -1])
def test_a_sentence_the_translation_has_not_is_refused(clinician, note, number):
    for action in (handouts.handout_sentence_as_written, handouts.handout_sentence_keep):
        with pytest.raises(ValidationError) as raised:
            action(translation=note, editor=clinician, number=number)
        assert raised.value.code == "no_sentence"
    assert not handout_events()


def test_only_the_translations_clinician_may_act_on_its_sentences(note, django_user_model):
    other = django_user_model.objects.create_user("someone-else")
    for action in (handouts.handout_sentence_as_written, handouts.handout_sentence_keep):
        with pytest.raises(PermissionDenied):
            action(translation=note, editor=other, number=1)
    assert not handout_events()


def test_the_handout_page_takes_a_sentence_action_and_says_what_it_did(client, clinician, note):
    client.force_login(clinician)
    url = f"/translations/{note.request_id}/handout/"
    response = client.post(url, {"action": "as_written", "sentence": "1"}, follow=True)
    assert "Sentence 1 is now the diagnosis as written." in response.content.decode()
    assert TranslationEdit.objects.get().text.startswith(SENTENCES[0])
    bad = client.post(url, {"action": "as_written", "sentence": "seven"})
    assert bad.status_code == 400 and "Choose a sentence." in bad.content.decode()
    unknown = client.post(url, {"action": "delete", "sentence": "1"})
    assert unknown.status_code == 400 and TranslationEdit.objects.count() == 1
    assert Translation.objects.get(pk=note.pk).input_text == NOTE


def test_the_sentence_view_is_served_to_its_clinician_only(client, clinician, note, django_user_model):
    url = f"/translations/{note.request_id}/sentences/"
    assert client.get(url).status_code == 302  # to the login page
    other = django_user_model.objects.create_user("other-clinician")
    other.groups.add(*clinician.groups.all())
    client.force_login(other)
    assert client.get(url).status_code == 404
    client.force_login(clinician)
    view = client.get(url).json()
    assert [s["status"] for s in view["sentences"]] == ["rewritten", "doubted", "rewritten"]
    assert [c["sentence"] for c in view["text"] if c["status"]] == [2]  # the doubted sentence is marked
    assert "".join(seg["text"] for c in view["text"] for seg in c["segments"]) == note.output_text
