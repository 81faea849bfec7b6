"""Hospital IT manages clinicians' accounts and nothing more: the attacks
an IT user tried in the admin (make itself superuser, set a clinician's
password and log in as them) are refused, and every account change is in
the audit log."""

from __future__ import annotations

import pytest
from auditlog.models import LogEntry
from django.contrib.auth.models import Group
from django.test import Client

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def it_user(django_user_model):
    user = django_user_model.objects.create_user("it-admin", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name="IT"))
    return user


def logged_in(username: str, password: str = PASSWORD) -> Client | None:
    """A client logged in through the login form, or ``None`` if refused."""
    client = Client()
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return client if response.status_code == 302 else None


@pytest.fixture
def it_client(it_user) -> Client:
    return logged_in("it-admin")


def change_form(user, **changes) -> dict:
    """The fields the admin's change form posts for ``user``, with ``changes``."""
    data = {"username": user.username, "first_name": "", "last_name": "", "email": "",
            "is_active": "on", "date_joined_0": "2026-11-25", "date_joined_1": "00:00:00",
            "initial-date_joined_0": "2026-11-25", "initial-date_joined_1": "00:00:00"}
    data.update(changes)
    return data


def test_it_cannot_make_itself_superuser(it_client, it_user):
    response = it_client.post(f"/admin/auth/user/{it_user.pk}/change/",
                              change_form(it_user, is_staff="on", is_superuser="on"))
    assert response.status_code == 403
    it_user.refresh_from_db()
    assert not it_user.is_superuser


def test_it_cannot_grant_staff_superuser_or_the_it_group_to_a_clinician(it_client, clinician):
    it_group = Group.objects.get(name="IT")
    response = it_client.post(f"/admin/auth/user/{clinician.pk}/change/",
                              change_form(clinician, is_staff="on", is_superuser="on", groups=[it_group.pk]))
    assert response.status_code == 200 and b"Select a valid choice" in response.content
    response = it_client.post(f"/admin/auth/user/{clinician.pk}/change/",
                              change_form(clinician, is_staff="on", is_superuser="on"))
    assert response.status_code == 302
    clinician.refresh_from_db()
    assert not clinician.is_staff and not clinician.is_superuser
    assert not clinician.groups.filter(name="IT").exists()


def test_it_puts_a_clinician_in_the_clinician_group_and_deactivates_them(it_client, django_user_model):
    new = django_user_model.objects.create_user("new-clinician", password=PASSWORD)
    group = Group.objects.get(name="Clinician")
    assert it_client.post(f"/admin/auth/user/{new.pk}/change/",
                          change_form(new, groups=[group.pk])).status_code == 302
    data = change_form(new, groups=[group.pk])
    del data["is_active"]
    assert it_client.post(f"/admin/auth/user/{new.pk}/change/", data).status_code == 302
    new.refresh_from_db()
    assert list(new.groups.values_list("name", flat=True)) == ["Clinician"] and not new.is_active


def test_it_cannot_set_a_clinicians_password_and_log_in_as_them(it_client, clinician):
    url = f"/admin/auth/user/{clinician.pk}/password/"
    assert it_client.get(url).status_code == 403
    response = it_client.post(url, {"password1": "taken-over-password-123", "password2": "taken-over-password-123",
                                     "usable_password": "true"})
    assert response.status_code == 403
    assert logged_in(clinician.username, "taken-over-password-123") is None
    assert logged_in(clinician.username) is not None


def test_it_requires_a_new_password_and_the_change_is_audited(it_client, clinician):
    response = it_client.post("/admin/auth/user/", {"action": "password_reset_require",
                                                    "_selected_action": [clinician.pk]})
    assert response.status_code == 302
    assert logged_in(clinician.username) is None
    entry = LogEntry.objects.get_for_object(clinician).latest("timestamp")
    assert entry.actor.username == "it-admin" and "password" in entry.changes_dict
    assert all("pbkdf2" not in str(value) for value in entry.changes_dict["password"])


def test_a_superusers_password_change_is_audited_without_the_hash(django_user_model, clinician):
    admin_user = django_user_model.objects.create_superuser("root-admin", password=PASSWORD)
    client = logged_in("root-admin")
    new_password = "a-new-long-password-4711"
    response = client.post(f"/admin/auth/user/{clinician.pk}/password/",
                           {"password1": new_password, "password2": new_password, "usable_password": "true"})
    assert response.status_code == 302
    entry = LogEntry.objects.get_for_object(clinician).latest("timestamp")
    assert entry.actor == admin_user and "password" in entry.changes_dict
    assert all("pbkdf2" not in str(value) for value in entry.changes_dict["password"])


def test_there_is_no_password_reset_by_mail():
    for path in ("/accounts/password_reset/", "/accounts/reset/done/"):
        assert Client().get(path).status_code == 404
