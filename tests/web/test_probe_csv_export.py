"""The audit CSV export follows OWASP's CSV-injection guidance: every cell
quoted, a cell starting with = + - @ tab or CR prefixed with ``'``."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from clinical.admin import csv_cell
from clinical.models import AuditEvent
from tests.admin_export import audit_csv_export
from tests.conftest import PASSWORD

PAYLOADS = ["=HYPERLINK(\"http://x\")", "+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|'",
            "\t=1+1", "\r=1+1"]


@pytest.mark.django_db
def test_formula_cells_are_exported_inert_and_every_cell_is_quoted(client, django_user_model):
    """The attack: an actor or error class starting with ``+``, ``-`` or
    ``@`` was exported as it was (only a leading ``=`` was dropped)."""
    it = django_user_model.objects.create_user("it-csv", password=PASSWORD, is_staff=True)
    it.groups.add(Group.objects.get(name="IT"))
    for payload in PAYLOADS:
        AuditEvent.objects.create(event_type="translation", outcome="rejected", actor=payload[:150],
                                  error_class=payload, ttft_ms=12.5)
    client.force_login(it)
    text, rows = audit_csv_export(client)
    assert sorted(row["actor"] for row in rows) == sorted("'" + payload for payload in PAYLOADS)
    assert sorted(row["error_class"] for row in rows) == sorted("'" + payload for payload in PAYLOADS)
    assert all(float(row["ttft_ms"]) == 12.5 for row in rows)
    header, first = text.split("\r\n")[:2]
    assert header.startswith('"id","') and header.endswith('"') and first.startswith('"')


def test_the_audit_export_offers_no_spreadsheet_format():
    from import_export.formats import base_formats

    from clinical.admin import AuditEventAdmin, SpreadsheetSafeCSV

    assert AuditEventAdmin.export_formats == [SpreadsheetSafeCSV, base_formats.JSON]


@pytest.mark.parametrize("value, cell", [("=1", "'=1"), ("+1", "'+1"), ("-1", "'-1"), ("@a", "'@a"),
                                         ("\t1", "'\t1"), ("\r1", "'\r1"), ("a=1", "a=1"), (None, ""),
                                         (12.5, "12.5")])
def test_csv_cell(value, cell):
    assert csv_cell(value) == cell
