"""The append-only tables refuse a row rewritten by a raw INSERT that
replaces it (SQLite ``INSERT OR REPLACE``, PostgreSQL ``ON CONFLICT DO
UPDATE``), as they refuse UPDATE."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from clinical.models import AuditEvent, Translation, TranslationEdit


def _rewrite(model, pk: int, column: str, value: str) -> None:
    """Insert a copy of row ``pk`` of ``model`` with ``column`` set to
    ``value``, replacing the row (the attack)."""
    table = model._meta.db_table
    columns = [field.column for field in model._meta.concrete_fields]
    select = ", ".join("%s" if name == column else name for name in columns)
    names = ", ".join(columns)
    if connection.vendor == "sqlite":
        sql = f"INSERT OR REPLACE INTO {table} ({names}) SELECT {select} FROM {table} WHERE id = %s"
    else:
        sql = (f"INSERT INTO {table} ({names}) SELECT {select} FROM {table} WHERE id = %s "
               f"ON CONFLICT (id) DO UPDATE SET {column} = EXCLUDED.{column}")
    # A savepoint: on PostgreSQL the refused statement aborts the
    # transaction it runs in, and the test reads the row afterwards.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [value, pk])


@pytest.mark.django_db
def test_insert_or_replace_cannot_rewrite_an_audit_event():
    event = AuditEvent.objects.create(event_type="translation", outcome="completed", actor="dr-x")
    with pytest.raises(DatabaseError, match="append-only"):
        _rewrite(AuditEvent, event.pk, "outcome", "error")
    assert AuditEvent.objects.get(pk=event.pk).outcome == "completed"


@pytest.mark.django_db
def test_insert_or_replace_cannot_rewrite_a_handout_edit(clinician):
    translation = Translation.objects.create(user=clinician, input_text="Left knee effusion.", status="completed")
    edit = TranslationEdit.objects.create(translation=translation, editor=clinician, text="Mine",
                                          text_sha256="0" * 64)
    with pytest.raises(DatabaseError, match="append-only"):
        _rewrite(TranslationEdit, edit.pk, "text", "Someone else's")
    assert TranslationEdit.objects.get(pk=edit.pk).text == "Mine"


@pytest.mark.django_db
def test_new_rows_are_still_inserted():
    first = AuditEvent.objects.create(event_type="translation", outcome="completed")
    second = AuditEvent.objects.create(event_type="translation", outcome="rejected")
    assert second.pk != first.pk and AuditEvent.objects.count() == 2
