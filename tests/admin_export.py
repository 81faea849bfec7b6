"""The admin's audit export, driven as IT drives it: the export page's CSV
format and every field, then the file."""

from __future__ import annotations

import csv
import io
import re


def audit_csv_export(client) -> tuple[str, list[dict]]:
    """Export every audit event as CSV with Django's test ``client`` (signed
    in as IT): ``(the file's text, its rows as dicts)``. Asserts a 200 CSV."""
    page = client.get("/admin/clinical/auditevent/export/").content.decode()
    csv_index = re.search(r'<option value="(\d+)"[^>]*>csv</option>', page).group(1)
    fields = re.findall(r'name="(auditeventresource_[a-z0-9_]+)"', page)
    response = client.post("/admin/clinical/auditevent/export/",
                           {"format": csv_index, "resource": "0", **{f: "on" for f in fields}})
    assert response.status_code == 200 and "csv" in response["Content-Type"]
    text = response.content.decode("utf-8-sig")
    return text, list(csv.DictReader(io.StringIO(text)))
