"""The API answers in JSON with bounded messages, and /readyz tells
anonymous callers no model or worker names."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test import AsyncRequestFactory

from clinical.models import APIClient
from clinical.web import health

pytestmark = pytest.mark.django_db(transaction=True)


def _key() -> str:
    return APIClient.objects.create_key(name="ehr-probe")[1]


@pytest.mark.parametrize("request_id", ["not-a-uuid", "1", "%3Cscript%3E", "x" * 300])
def test_a_non_uuid_id_is_the_apis_json_404(client, request_id):
    """The attack: ``/api/v1/translations/not-a-uuid/`` answered Django's HTML 404."""
    response = client.get(f"/api/v1/translations/{request_id}/", HTTP_AUTHORIZATION=f"Bearer {_key()}")
    assert response.status_code == 404 and response["Content-Type"].startswith("application/json")
    assert response.json() == {"detail": "No such translation."}
    anonymous = client.get(f"/api/v1/translations/{request_id}/")
    assert anonymous.status_code == 401 and anonymous["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("field", ["language", "reading_level"])
def test_a_400_does_not_echo_a_100_kb_value(client, fake_engine, field):
    """The attack: a 100 KB invalid value came back whole in the 400."""
    value = "A" * 100_000
    response = client.post("/api/v1/translations/", data=json.dumps({"text": "Left knee pain.", field: value}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {_key()}")
    assert response.status_code == 400
    assert len(response.content) < 1_000, len(response.content)
    assert "A" * 201 not in response.content.decode()


def _readyz_request(address: str, headers: dict, user=None):
    request = AsyncRequestFactory().get("/readyz", headers=headers)
    request.META["REMOTE_ADDR"] = address

    async def auser():
        return user or AnonymousUser()

    request.auser = auser
    return request


@pytest.mark.parametrize("address, headers, detailed", [
    ("203.0.113.5", {}, False),
    ("127.0.0.1", {"X-Forwarded-For": "203.0.113.5"}, False),
    ("127.0.0.1", {}, True),
])
async def test_readyz_tells_anonymous_callers_the_status_only(fake_engine, address, headers, detailed):
    """The attack: /readyz told anyone the model and the workers' names."""
    response = await health.readyz(_readyz_request(address, headers))
    assert response.status_code == 200
    body = json.loads(response.content)
    if detailed:
        assert {"status", "checks", "model", "rerun_lane"} <= set(body)
    else:
        assert body == {"status": "ready"}
    await sync_to_async(lambda: connection.close())()


async def test_readyz_gives_staff_the_detail(fake_engine, django_user_model):
    staff = await sync_to_async(django_user_model.objects.create_user)("it-ready", password="x" * 20,
                                                                       is_staff=True)
    body = json.loads((await health.readyz(_readyz_request("203.0.113.5", {}, staff))).content)
    assert body["status"] == "ready" and "model" in body and "checks" in body
    await sync_to_async(lambda: connection.close())()
