"""Every change of who may do what is in an append-only log with before and
after: a user's groups and staff/active/superuser flags, and API clients,
the latter without the key's hash anywhere in an audit table."""

from __future__ import annotations

import json

import pytest
from auditlog.models import LogEntry
from django.contrib.auth.models import Group
from django.core import serializers
from django.db import DatabaseError, connection
from django.test import Client

from clinical.models import AccountEvent, APIClient, AppendOnlyError
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def change_form(user, **changes) -> dict:
    """The fields the admin's change form posts for ``user``, with ``changes``."""
    data = {"username": user.username, "first_name": "", "last_name": "", "email": "",
            "is_active": "on", "date_joined_0": "2026-11-25", "date_joined_1": "00:00:00",
            "initial-date_joined_0": "2026-11-25", "initial-date_joined_1": "00:00:00"}
    data.update(changes)
    return {key: value for key, value in data.items() if value is not None}


def _client(username: str) -> Client:
    client = Client()
    assert client.post("/accounts/login/", {"username": username, "password": PASSWORD}).status_code == 302
    return client


def _changes(user, after: int = 0) -> list[tuple[str, dict]]:
    return [(e.actor, e.changes) for e in AccountEvent.objects.filter(
        subject_kind="user", subject_id=str(user.pk), action="changed", id__gt=after).order_by("id")]


def _mark() -> int:
    return AccountEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def test_it_removing_and_re_adding_the_clinician_group_is_in_the_append_only_log(django_user_model, clinician):
    """The attack: IT removed a clinician from the Clinician group and added
    it back; auditlog had no entry and the admin's history said only
    "changed: Groups"."""
    it = django_user_model.objects.create_user("it-probe", password=PASSWORD, is_staff=True)
    it.groups.add(Group.objects.get(name="IT"))
    clinician_group = Group.objects.get(name="Clinician")
    assert list(clinician.groups.all()) == [clinician_group]
    client = _client("it-probe")
    mark = _mark()
    assert client.post(f"/admin/auth/user/{clinician.pk}/change/", change_form(clinician)).status_code == 302
    assert not clinician.groups.exists()
    assert client.post(f"/admin/auth/user/{clinician.pk}/change/",
                       change_form(clinician, groups=[clinician_group.pk])).status_code == 302
    assert _changes(clinician, mark) == [("it-probe", {"groups": [["Clinician"], []]}),
                                   ("it-probe", {"groups": [[], ["Clinician"]]})]
    # auditlog's own log has the group changes too.
    entries = LogEntry.objects.get_for_object(clinician)
    assert sum("groups" in entry.changes_dict for entry in entries) >= 2


def test_staff_active_and_superuser_flags_are_logged_with_before_and_after(django_user_model, clinician):
    django_user_model.objects.create_superuser("root-probe", password=PASSWORD)
    client = _client("root-probe")
    mark = _mark()
    assert client.post(f"/admin/auth/user/{clinician.pk}/change/", change_form(
        clinician, is_active=None, is_staff="on", groups=[Group.objects.get(name="Clinician").pk])).status_code == 302
    assert _changes(clinician, mark) == [("root-probe", {"is_active": [True, False], "is_staff": [False, True]})]
    # A change outside a request (a shell) is logged too, without an actor.
    clinician.refresh_from_db()
    clinician.is_superuser = True
    clinician.save()
    Group.objects.get(name="IT").user_set.add(clinician)
    assert _changes(clinician, mark)[1:] == [("", {"is_superuser": [False, True]}),
                                       ("", {"groups": [["Clinician"], ["Clinician", "IT"]]})]


def test_account_events_cannot_be_changed(clinician):
    event = AccountEvent.objects.filter(subject_id=str(clinician.pk)).first()
    event.actor = "someone-else"
    for change in (event.save, event.delete, lambda: AccountEvent.objects.all().delete(),
                   lambda: AccountEvent.objects.update(actor="x")):
        with pytest.raises(AppendOnlyError):
            change()
    with pytest.raises(DatabaseError, match="append-only"), connection.cursor() as cursor:
        cursor.execute("UPDATE clinical_accountevent SET actor = 'x' WHERE id = %s", [event.pk])


def test_the_api_clients_key_hash_is_in_no_audit_table(django_user_model):
    """The attack: auditlog keyed the client's entries by its primary key,
    ``<prefix>.<sha512 hash>``, readable by IT."""
    client, key = APIClient.objects.create_key(name="ehr-probe")
    secret_parts = {client.id.split(".", 1)[1], key.split(".", 1)[1]}
    client.revoked = True
    client.save()
    client.delete()
    dumped = [json.dumps(row) for row in json.loads(serializers.serialize(
        "json", [*LogEntry.objects.all(), *AccountEvent.objects.all()]))]
    assert not [row for row in dumped for part in secret_parts if part in row]
    events = AccountEvent.objects.filter(subject_kind="api_client").order_by("id")
    assert [(e.action, e.subject_id, e.subject_label) for e in events] == [
        ("created", client.prefix, "ehr-probe"), ("changed", client.prefix, "ehr-probe"),
        ("deleted", client.prefix, "ehr-probe")]
    assert events[1].changes == {"revoked": [False, True]}
