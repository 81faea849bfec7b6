"""Audit log, roles and the IT admin: one append-only record per request,
no clinical text in it or in the logs, and the admin that IT reads."""

from __future__ import annotations

import logging
from datetime import timedelta

import numpy as np
import pytest
from auditlog.models import LogEntry
from axes.models import AccessAttempt, AccessLog
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from clinical.audit import text_fingerprint
from clinical.models import AppendOnlyError, AuditEvent, Translation
from clinical.translation.engine import engine_set
from inference.llamacpp_engine import LlamaCppEngine
from inference.weights import smollm2_gguf_path
from tests.admin_export import audit_csv_export
from tests.conftest import PASSWORD
from tests.data import laymaker_sentences
from tests.frames import frames_until, open_socket


@pytest.fixture
def it_admin(django_user_model):
    user = django_user_model.objects.create_user("it-admin", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name="IT"))
    return user


async def audit_events() -> list[AuditEvent]:
    return await database_sync_to_async(lambda: list(AuditEvent.objects.all()))()


# -- one record per end state -----------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("ending", ["completed", "cancelled", "disconnect", "error", "rejected"])
async def test_every_end_state_leaves_exactly_one_audit_record(fake_engine, clinician, ending):
    text = laymaker_sentences()[6]
    fake_engine.token_delay_s = 0.02 if ending in ("cancelled", "disconnect") else 0
    fake_engine.fail_after = 2 if ending == "error" else None
    communicator = await open_socket(clinician)
    await communicator.send_json_to({"type": "translate", "text": "" if ending == "rejected" else text})
    if ending == "completed":
        await frames_until(communicator, "done")
    elif ending == "cancelled":
        await communicator.receive_json_from()
        await communicator.send_json_to({"type": "cancel"})
        await frames_until(communicator, "cancelled")
    elif ending == "error":
        await frames_until(communicator, "error")
    elif ending == "rejected":
        assert (await communicator.receive_json_from())["code"] == "empty"
    else:
        await communicator.receive_json_from()
    await communicator.disconnect()

    (event,) = await audit_events()
    expected = {"disconnect": "cancelled"}.get(ending, ending)
    assert event.event_type == "translation" and event.outcome == expected
    assert event.actor_user_id == clinician.pk and event.actor == clinician.username
    if ending == "rejected":
        assert event.input_chars == 0 and event.error_class == "ValidationError:empty"
        assert await database_sync_to_async(Translation.objects.count)() == 0
    else:
        translation = await database_sync_to_async(Translation.objects.get)()
        assert event.request_id == translation.request_id
        assert (event.input_sha256, event.input_chars) == text_fingerprint(text)
        assert event.total_ms == translation.total_ms and event.tokens_out == translation.tokens_out
    stored = " ".join(str(getattr(event, f.attname)) for f in AuditEvent._meta.fields)
    assert text not in stored


# -- append-only -------------------------------------------------------------

@pytest.mark.django_db
def test_audit_records_cannot_be_updated_or_deleted(clinician):
    event = AuditEvent.objects.create(event_type="translation", outcome="completed", actor="x")
    event.outcome = "error"
    with pytest.raises(AppendOnlyError):
        event.save()
    with pytest.raises(AppendOnlyError):
        event.delete()
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.filter(pk=event.pk).update(outcome="error")
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.all().delete()
    assert AuditEvent.objects.get(pk=event.pk).outcome == "completed"


@pytest.mark.django_db
@pytest.mark.parametrize("sql", [
    "UPDATE clinical_auditevent SET outcome = 'error' WHERE id = %s",
    pytest.param("DELETE FROM clinical_auditevent WHERE id = %s", marks=pytest.mark.skipif(
        connection.vendor != "postgresql", reason="SQLite is emptied with DELETE FROM (flush): no DELETE trigger")),
])
def test_the_database_refuses_raw_changes_to_audit_records(sql):
    """PostgreSQL and the embedded SQLite alike (a trigger in each)."""
    from django.db import DatabaseError

    event = AuditEvent.objects.create(event_type="translation", outcome="completed")
    with pytest.raises(DatabaseError, match="append-only"), connection.cursor() as cursor:
        cursor.execute(sql, [event.pk])


@pytest.mark.django_db
def test_the_base_manager_cannot_bypass_the_append_only_guard():
    """The attack: ``_base_manager`` once skipped the default manager's
    guard on SQLite, which has no PostgreSQL trigger."""
    event = AuditEvent.objects.create(event_type="translation", outcome="completed")
    for change in (lambda: AuditEvent._base_manager.filter(pk=event.pk).update(outcome="error"),
                   lambda: AuditEvent._base_manager.filter(pk=event.pk).delete()):
        with pytest.raises(AppendOnlyError):
            change()
    assert AuditEvent.objects.get(pk=event.pk).outcome == "completed"


# -- PHI stays out of logs ---------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.slow  # loads SmolLM2
async def test_input_text_appears_in_no_log_record_at_debug(clinician, caplog):
    """A real model (SmolLM2 via llama.cpp) behind the consumer, every logger
    at DEBUG: no record carries the clinical text or its start."""
    engine = LlamaCppEngine(str(smollm2_gguf_path()), n_ctx=2048, precision="q4_1")
    engine_set(engine)
    text = laymaker_sentences()[5]
    try:
        with caplog.at_level(logging.DEBUG):
            communicator = await open_socket(clinician)
            await communicator.send_json_to({"type": "translate", "text": text})
            frames = await frames_until(communicator, "done", "error", timeout=60)
            await communicator.disconnect()
    finally:
        engine_set(None)
        await engine.shutdown()
    assert frames[-1]["type"] == "done"
    assert any(r.name == "clinical.translation.generation" for r in caplog.records)
    logged = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)
    assert text not in logged and text[:30] not in logged
    tagged = {getattr(r, "request_id", None) for r in caplog.records if r.name.startswith("clinical")}
    assert frames[0]["id"] in tagged  # the request id is what the logs carry


# -- roles and the admin -----------------------------------------------------

@pytest.mark.django_db
def test_a_clinician_cannot_open_the_admin(client, clinician):
    clinician.groups.add(Group.objects.get(name="Clinician"))
    client.force_login(clinician)
    for url in ("/admin/", "/admin/dashboard/", "/admin/clinical/auditevent/", "/admin/dashboard/hour.svg"):
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url


@pytest.mark.django_db
def test_it_reads_the_dashboard_with_percentiles_from_the_audit_log(client, it_admin):
    ttfts = [100.0, 120.0, 150.0, 200.0, 900.0]
    for i, ttft in enumerate(ttfts):
        AuditEvent.objects.create(event_type="translation", outcome="completed", ttft_ms=ttft,
                                  total_ms=ttft * 4)
    AuditEvent.objects.create(event_type="translation", outcome="error")
    client.force_login(it_admin)
    response = client.get("/admin/dashboard/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "6 requests" in html and "1 errors" in html
    assert f">{np.percentile(ttfts, 95):.0f}<" in html  # TTFT P95, linear interpolation
    plot = client.get("/admin/dashboard/hour.svg")
    assert plot.status_code == 200 and plot["Content-Type"] == "image/svg+xml"
    assert b"<svg" in plot.content


@pytest.mark.django_db
def test_latency_report_prints_the_same_percentiles(capsys):
    values = [80.0, 95.0, 110.0, 400.0]
    for value in values:
        AuditEvent.objects.create(event_type="translation", outcome="completed", ttft_ms=value, total_ms=value * 3)
    call_command("latency_report", "--since", "24h")
    out = capsys.readouterr().out
    assert f"{np.percentile(values, 50):,.2f}" in out
    assert f"{np.percentile(values, 99):,.2f}" in out
    assert f"{np.percentile([v * 3 for v in values], 95):,.2f}" in out


@pytest.mark.django_db
def test_csv_export_round_trips(client, it_admin):
    for outcome in ("completed", "rejected", "cancelled"):
        AuditEvent.objects.create(event_type="translation", outcome=outcome, actor="dr-x",
                                  input_sha256="ab" * 32, input_chars=42, ttft_ms=12.5)
    client.force_login(it_admin)
    _, rows = audit_csv_export(client)
    assert len(rows) == 3
    for row in rows:
        event = AuditEvent.objects.get(pk=int(row["id"]))
        assert row["outcome"] == event.outcome and row["actor"] == event.actor
        assert row["input_sha256"] == event.input_sha256 and int(row["input_chars"]) == 42
        assert float(row["ttft_ms"]) == event.ttft_ms


@pytest.mark.django_db
def test_it_viewing_a_translation_is_itself_audited(client, it_admin, clinician):
    translation = Translation.objects.create(user=clinician, input_text="Left knee effusion.")
    client.force_login(it_admin)
    assert client.get("/admin/clinical/translation/").status_code == 200
    assert not AuditEvent.objects.exists()  # the list shows no text
    response = client.get(f"/admin/clinical/translation/{translation.pk}/change/")
    assert response.status_code == 200 and b"Left knee effusion." in response.content
    (event,) = AuditEvent.objects.all()
    assert (event.event_type, event.actor_user, event.request_id) == ("text_access", it_admin,
                                                                      translation.request_id)


@pytest.mark.django_db
def test_logins_are_recorded_and_repeated_failures_lock_out(client, clinician):
    for _ in range(5):
        client.post("/accounts/login/", {"username": clinician.username, "password": "wrong"},
                    REMOTE_ADDR="10.1.2.3")
    assert AccessAttempt.objects.get(username=clinician.username).failures_since_start == 5
    locked = client.post("/accounts/login/", {"username": clinician.username, "password": PASSWORD},
                         REMOTE_ADDR="10.1.2.3")
    assert locked.status_code == 429  # even the right password, while locked out
    ok = client.post("/accounts/login/", {"username": clinician.username, "password": PASSWORD},
                     REMOTE_ADDR="10.9.9.9")
    assert ok.status_code == 302
    assert AccessLog.objects.filter(username=clinician.username).count() == 1


@pytest.mark.django_db
def test_changes_to_users_are_recorded(client, it_admin, clinician):
    client.force_login(it_admin)
    clinician.is_active = False
    clinician.save()
    entry = LogEntry.objects.get_for_object(clinician).latest("timestamp")
    assert "is_active" in entry.changes_dict and "password" not in entry.changes_dict


@pytest.mark.django_db
def test_old_events_fall_outside_the_report_window(capsys):
    AuditEvent.objects.create(event_type="translation", outcome="completed", ttft_ms=5.0,
                              created_at=timezone.now() - timedelta(days=3))
    call_command("latency_report", "--since", "24h")
    assert "No translation requests" in capsys.readouterr().out
