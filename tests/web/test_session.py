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


@pytest.mark.django_db(transaction=True)
async def test_a_clinician_translating_over_the_socket_stays_signed_in_and_idle_ends_it(
        fake_engine, clinician, settings):
    """The fault: with a 40 s timeout, a socket translating every 9 s was
    closed with 4401 at 46 s. Here the timeout is 3 s and a translation
    starts every second for 6 s; then the clinician stops."""
    import asyncio

    from tests.frames import frames_until, open_socket

    settings.SESSION_COOKIE_AGE = 3
    settings.SESSION_CHECK_INTERVAL_S = 0.5
    communicator = await open_socket(clinician)
    for _ in range(6):
        await communicator.send_json_to({"type": "translate", "text": "Left knee pain."})
        assert (await frames_until(communicator, "done", "error"))[-1]["type"] == "done"
        await asyncio.sleep(1)
    # Idle now: the session ends and the socket is closed for it.
    output = await communicator.receive_output(timeout=8)
    while output["type"] != "websocket.close":
        output = await communicator.receive_output(timeout=8)
    assert output["code"] == 4401
