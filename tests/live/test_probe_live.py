"""The input and admin probes, performed on the real ``python -m
clinical.serve`` (Daphne over HTTP and WebSocket): text lookups in an admin
list's query string, a diagnosis in another language over the API and the
socket, a right-to-left override in the handout editor, answers to a
non-UUID id and a 100 KB value, and formula cells in the audit CSV export."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from django.contrib.auth.models import Group
from websockets.asyncio.client import connect

from clinical.models import APIClient, AuditEvent, Translation, TranslationEdit
from tests.conftest import PASSWORD, in_thread
from tests.frames import receive_until

pytestmark = pytest.mark.django_db(transaction=True)

ARABIC_MILD_ASTHMA = "ربو خفيف"
ENGLISH = "Mild asthma."


def it_user_create(username: str = "it-probe"):
    """A staff user in the IT group."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get_or_create(name="IT")[0])
    return user


@contextmanager
def logged_in(server, username: str) -> Iterator[httpx.Client]:
    """An HTTP client logged in through the server's login form; it keeps
    the session and CSRF cookies."""
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        client.get("/accounts/login/")
        response = client.post("/accounts/login/", data={
            "username": username, "password": PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        assert response.status_code == 302, (response.status_code, response.text[:500])
        yield client


def api_key(name: str = "ehr-probe") -> str:
    return APIClient.objects.create_key(name=name)[1]


def test_it_cannot_probe_the_text_through_the_admin_list(shared_fake_server, clinician):
    translation = Translation.objects.create(user=clinician, input_text="fever and left knee effusion",
                                             output_text="You have a fever.", status="completed")
    it_user_create()
    with logged_in(shared_fake_server, "it-probe") as client:
        for lookup in ("input_text__startswith=f", "output_text__icontains=x"):
            response = client.get(f"/admin/clinical/translation/?request_id={translation.request_id}&{lookup}")
            assert response.status_code == 400, lookup
            assert "1 result" not in response.text and "0 results" not in response.text, lookup
        listing = client.get("/admin/clinical/translation/")
        assert listing.status_code == 200
        assert f"/admin/clinical/translation/{translation.pk}/change/" in listing.text
    assert not AuditEvent.objects.filter(event_type="text_access").exists()


def test_the_api_refuses_an_arabic_diagnosis_with_the_code(shared_fake_server):
    key = api_key()
    with httpx.Client(base_url=shared_fake_server.base_url, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as api:
        refused = api.post("/api/v1/translations/", json={"text": ARABIC_MILD_ASTHMA})
        assert refused.status_code == 400, refused.text
        assert refused.json()["code"] == "unsupported_language"
        assert not Translation.objects.exists()
        accepted = api.post("/api/v1/translations/?wait=false", json={"text": ENGLISH})
        assert accepted.status_code in (201, 202), accepted.text
    assert Translation.objects.count() == 1


async def test_the_socket_answers_an_arabic_diagnosis_with_an_error_frame(shared_fake_server, clinician):
    server = shared_fake_server
    session = await in_thread(server.login, clinician.username)
    async with connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as ws:
        await ws.send(json.dumps({"type": "translate", "text": ARABIC_MILD_ASTHMA}))
        frame = (await receive_until(ws, ("done", "error"), timeout=30))[-1]
        assert frame["type"] == "error" and frame["code"] == "unsupported_language", frame
        await ws.send(json.dumps({"type": "translate", "text": ENGLISH}))
        assert (await receive_until(ws, ("done", "error"), timeout=30))[-1]["type"] == "done"
    assert await in_thread(lambda: list(Translation.objects.values_list("input_text", flat=True))) == [ENGLISH]


def test_the_handout_editor_refuses_a_right_to_left_override(shared_fake_server, clinician):
    translation = Translation.objects.create(user=clinician, input_text="Left knee effusion.",
                                             output_text="Plain words: Left knee effusion.", status="completed")
    url = f"/translations/{translation.request_id}/handout/"
    with logged_in(shared_fake_server, clinician.username) as client:
        assert client.get(url).status_code == 200
        refused = client.post(url, data={"text": "Take 25 mg \u202etwice a day.",
                                         "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        assert refused.status_code == 400, refused.status_code
        assert TranslationEdit.objects.filter(translation=translation).count() == 0
        saved = client.post(url, data={"text": "Take 25 mg twice a day.",
                                       "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        assert saved.status_code == 302, saved.status_code
    assert TranslationEdit.objects.filter(translation=translation).count() == 1


def test_a_non_uuid_id_is_a_json_404_and_a_400_is_short(shared_fake_server):
    key = api_key()
    with httpx.Client(base_url=shared_fake_server.base_url, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as api:
        missing = api.get("/api/v1/translations/not-a-uuid/")
        assert missing.status_code == 404 and missing.headers["Content-Type"].startswith("application/json")
        assert missing.json() == {"detail": "No such translation."}
        refused = api.post("/api/v1/translations/", json={"text": "Left knee pain.", "reading_level": "A" * 100_000})
        assert refused.status_code == 400
        assert len(refused.content) < 2_000, len(refused.content)
        assert "A" * 201 not in refused.text


PAYLOADS = ["=cmd|' /C calc'!A0", "+1", "-1", "@x"]


def test_the_audit_csv_export_prefixes_formula_cells(shared_fake_server):
    for payload in PAYLOADS:
        AuditEvent.objects.create(event_type="translation", outcome="rejected", actor=payload)
    it_user_create("it-csv")
    with logged_in(shared_fake_server, "it-csv") as client:
        page = client.get("/admin/clinical/auditevent/export/")
        assert page.status_code == 200, page.status_code
        csv_index = re.search(r'<option value="(\d+)"[^>]*>csv</option>', page.text).group(1)
        fields = re.findall(r'name="(auditeventresource_[a-z0-9_]+)"', page.text)
        response = client.post("/admin/clinical/auditevent/export/", data={
            "format": csv_index, "resource": "0", **{f: "on" for f in fields},
            "csrfmiddlewaretoken": client.cookies["csrftoken"]})
    assert response.status_code == 200 and "csv" in response.headers["Content-Type"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode("utf-8-sig"))))
    actors = sorted(row["actor"] for row in rows if row["actor"].startswith("'"))
    assert actors == sorted("'" + payload for payload in PAYLOADS)
    assert not [row for row in rows for cell in row.values() if cell and cell[0] in "=+-@\t\r"]
