"""Readiness while the replica drains, in-process."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import AsyncClient

from clinical.runtime import drain

pytestmark = pytest.mark.django_db(transaction=True)


async def test_readiness_is_503_while_the_replica_drains(fake_engine):
    client = AsyncClient()
    assert (await client.get("/readyz")).status_code == 200
    drain.drain_begin()
    try:
        response = await client.get("/readyz")
    finally:
        drain.drain_reset()
    assert response.status_code == 503 and response.json()["status"] == "draining"
    assert all(check["ok"] for check in response.json()["checks"].values())
    assert (await client.get("/livez")).status_code == 200
    await sync_to_async(lambda: connection.close())()  # the view's database thread keeps one open
