"""The Clinician and IT groups come back after every ``flush`` (and
``migrate``): :func:`clinical.roles.roles_ensure` on ``post_migrate``.
Transactional tests flush the test database after each test; in two
workers (``make test``) a test that reads the roles may run after one, and
lost its groups before this (Group.DoesNotExist in the admin tests)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command

from clinical.roles import CLINICIAN_GROUP, IT_GROUP, IT_PERMISSIONS


def it_codenames() -> set[tuple[str, str]]:
    return set(Group.objects.get(name=IT_GROUP).permissions.values_list("content_type__app_label", "codename"))


def expected_codenames() -> set[tuple[str, str]]:
    return {(app, f"{action}_{model}") for app, model, actions in IT_PERMISSIONS for action in actions}


@pytest.mark.django_db(transaction=True)
def test_a_flushed_database_gets_both_roles_back_with_its_permissions():
    call_command("flush", interactive=False, verbosity=0)
    assert set(Group.objects.values_list("name", flat=True)) >= {CLINICIAN_GROUP, IT_GROUP}
    assert it_codenames() == expected_codenames()


@pytest.mark.django_db
def test_the_migrated_roles_are_the_ones_roles_ensure_makes():
    """Migrations 0004 and 0006 gave IT exactly these permissions."""
    assert it_codenames() == expected_codenames()
