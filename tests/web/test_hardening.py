"""Smaller risks an attacker found, each performed here: cached clinical
pages, invisible or bidi-override text, a number for a text, proxied
metrics requests, and formulae in the audit CSV."""

from __future__ import annotations

import pytest
from django.test import Client

from clinical.models import AuditEvent, Translation
from clinical.translation import admission

pytestmark = pytest.mark.django_db


def test_pages_holding_clinical_text_are_never_stored_by_a_cache(client, clinician):
    row = admission.translation_create(user=clinician, text="Left knee effusion.")
    client.force_login(clinician)
    for path in ("/", "/translations/", f"/translations/{row.request_id}/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert "no-store" in response["Cache-Control"] and "private" in response["Cache-Control"], path


@pytest.mark.parametrize("text, code", [
    ("\u200b\u200b\u200b", "empty"), ("\u200b \ufeff \u2060", "empty"),
    ("Left knee \u202epain\u202c.", "invalid"), ("\u2067Hypertension\u2069", "invalid"),
])
def test_invisible_or_bidi_override_text_is_refused(clinician, text, code):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        admission.translation_text_clean(text=text)
    assert refused.value.code == code
    assert Translation.objects.count() == 0


def test_the_api_refuses_a_number_for_the_text():
    from clinical.api.serializers import TranslationRequestSerializer

    for value in (5, 5.0, True, {"a": 1}):
        body = TranslationRequestSerializer(data={"text": value})
        assert not body.is_valid() and "text" in body.errors, value
    assert TranslationRequestSerializer(data={"text": "Hypertension."}).is_valid()


@pytest.mark.parametrize("header", [{"HTTP_FORWARDED": "for=203.0.113.7"},
                                    {"HTTP_X_FORWARDED_FOR": "203.0.113.7"}, {"HTTP_X_REAL_IP": "203.0.113.7"}])
def test_metrics_refuse_a_request_that_came_through_a_proxy(settings, header):
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics", REMOTE_ADDR="127.0.0.1", **header).status_code == 403
    assert Client().get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200


def test_the_audit_csv_export_escapes_formulae():
    """django-import-export's ``IMPORT_EXPORT_ESCAPE_FORMULAE_ON_EXPORT``
    drops a leading ``=``, through the same format object the admin's
    export uses."""
    from import_export.formats.base_formats import CSV

    from clinical.admin import AuditEventResource

    AuditEvent.objects.create(event_type="translation", outcome="error",
                              actor='=HYPERLINK("http://evil.example","x")', error_class="ValueError")
    dataset = AuditEventResource().export(AuditEvent.objects.all())
    csv_text = CSV().export_data(dataset)
    assert "=HYPERLINK" not in csv_text and 'HYPERLINK(""http://evil.example""' in csv_text


@pytest.mark.django_db(transaction=True)
async def test_invalid_text_gives_its_engine_place_back_at_once(fake_engine, clinician):
    """Admission reserves a place before the text is validated; a refused
    text must not hold it (a burst of bad input would make the engine busy)."""
    from tests.frames import frames_until, open_socket

    fake_engine.max_queue = 1
    communicator = await open_socket(clinician)
    for _ in range(3):
        await communicator.send_json_to({"type": "translate", "text": "pain\x00"})
        frame = await communicator.receive_json_from()
        assert frame["type"] == "error" and frame["code"] == "invalid"
    await communicator.send_json_to({"type": "translate", "text": "Left knee pain."})
    assert (await frames_until(communicator, "done", "error"))[-1]["type"] == "done"
    await communicator.disconnect()
