"""Idle timeout with a one-click "stay signed in"."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.sessions.models import Session
from django.utils import timezone

pytestmark = pytest.mark.django_db


def test_sessions_end_after_15_idle_minutes_by_default(settings):
    assert settings.SESSION_COOKIE_AGE == settings.SESSION_IDLE_TIMEOUT_S == 900
    assert settings.SESSION_SAVE_EVERY_REQUEST is True


def test_stay_signed_in_restarts_the_idle_timeout(client, clinician):
    client.force_login(clinician)
    session = Session.objects.get()
    Session.objects.filter(pk=session.pk).update(expire_date=timezone.now() + timedelta(seconds=30))
    response = client.post("/accounts/extend/")
    assert response.status_code == 200 and response.json() == {"idle_timeout_s": 900}
    expires = Session.objects.get(pk=session.pk).expire_date
    assert timedelta(seconds=890) < expires - timezone.now() <= timedelta(seconds=900)


def test_stay_signed_in_needs_a_live_session_and_a_post(client, clinician):
    assert client.post("/accounts/extend/").status_code == 401
    client.force_login(clinician)
    assert client.get("/accounts/extend/").status_code == 405


def test_the_page_carries_the_idle_timeout_for_its_warning(client, clinician):
    client.force_login(clinician)
    html = client.get("/").content.decode()
    assert 'data-idle-timeout-s="900"' in html and 'id="session-warning"' in html
