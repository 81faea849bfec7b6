"""The admin reveals no clinical text without an audit event: lookups on the
text fields in a list's query string are refused."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from clinical.models import AuditEvent, Rerun, Translation, TranslationEdit
from tests.conftest import PASSWORD


@pytest.fixture
def it_admin(django_user_model):
    user = django_user_model.objects.create_user("it-probe", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name="IT"))
    return user


@pytest.fixture
def translation(clinician):
    translation = Translation.objects.create(user=clinician, input_text="fever and left knee effusion",
                                             output_text="You have a fever.", status="completed")
    Rerun.objects.create(translation=translation, output_text="You have a fever, re-run.")
    TranslationEdit.objects.create(translation=translation, editor=clinician, text="Edited fever note",
                                   text_sha256="0" * 64)
    return translation


def _count(response) -> str:
    return response.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("lookup", [
    "input_text__startswith=f", "input_text__regex=^fe", "output_text__icontains=fever",
    "input_text=fever and left knee effusion", "reruns__output_text__icontains=fever",
    "edits__text__startswith=E", "sentence_checks__icontains=a", "glossary__icontains=a",
])
def test_it_cannot_probe_the_text_one_character_at_a_time(client, it_admin, translation, lookup):
    """The attack: ``?request_id=<id>&input_text__startswith=f`` answered
    "1 result" / "0 results" without an audit event."""
    client.force_login(it_admin)
    response = client.get(f"/admin/clinical/translation/?request_id={translation.request_id}&{lookup}")
    assert response.status_code == 400
    assert "1 result" not in _count(response) and "0 results" not in _count(response)
    assert not AuditEvent.objects.filter(event_type="text_access").exists()


@pytest.mark.django_db
def test_lookups_on_other_fields_still_work(client, it_admin, translation):
    client.force_login(it_admin)
    response = client.get(f"/admin/clinical/translation/?request_id={translation.request_id}&status=completed")
    assert response.status_code == 200 and str(translation.request_id) in response.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("url", [
    "/admin/auth/user/?translations__input_text__startswith=f",
    "/admin/clinical/auditevent/?actor_user__translations__input_text__startswith=f",
    "/admin/clinical/auditevent/?rerun_candidates__icontains=a",
])
def test_text_lookups_through_other_lists_are_refused(client, it_admin, translation, url):
    client.force_login(it_admin)
    response = client.get(url)
    assert response.status_code in (400, 302) and "1 result" not in response.content.decode()
    if response.status_code == 302:  # Django's own answer to an unknown filter: the unfiltered list
        assert "e=1" in response["Location"]
