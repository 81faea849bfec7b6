"""The models and the committed migrations agree: a model change without
its migration would leave a fresh ``manage.py migrate`` (what ``make run``
and every deploy run) building a schema the code does not describe."""

from __future__ import annotations

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_every_model_change_has_its_migration(capsys):
    try:
        call_command("makemigrations", "--check", "--dry-run", verbosity=1)
    except SystemExit as missing:  # makemigrations --check exits 1 when a migration is missing
        pytest.fail(f"a model change has no migration (exit {missing.code}): {capsys.readouterr().out}")
    assert "No changes detected" in capsys.readouterr().out
