"""Liveness and readiness for the load balancer: real Daphne, real Redis and
database, and the same checks made to fail by pointing at a closed port or
a database that does not exist."""

from __future__ import annotations

import socket

import httpx
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_readiness_names_each_check_and_the_loaded_engine(daphne_server):
    server = daphne_server(INFERENCE_ENGINE="fake", REPLICA_ID="web-a")
    response = httpx.get(server.base_url + "/readyz", timeout=30)
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["replica"], body["engine"], body["model"]) == ("ready", "web-a", "fake", "fake-echo")
    assert set(body["checks"]) == {"engine", "redis", "database"}
    for name, check in body["checks"].items():
        assert check["ok"] is True and check["ms"] >= 0, name
    live = httpx.get(server.base_url + "/livez", timeout=10)
    assert live.status_code == 200 and live.json() == {"status": "alive", "replica": "web-a"}


def test_readiness_is_503_when_redis_is_unreachable_while_liveness_stays_200(daphne_server):
    server = daphne_server(INFERENCE_ENGINE="fake", REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0")
    response = httpx.get(server.base_url + "/readyz", timeout=30)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable" and body["error"] == "ConnectionError"
    assert body["checks"]["redis"]["ok"] is False
    assert body["checks"]["engine"]["ok"] and body["checks"]["database"]["ok"]
    assert httpx.get(server.base_url + "/livez", timeout=10).status_code == 200


def test_readiness_is_503_when_the_database_is_unreachable(daphne_server, stack_env):
    url = stack_env["DATABASE_URL"]
    if url.startswith("sqlite"):
        broken = "sqlite:////nonexistent-dir/db.sqlite3"
    else:
        broken = url.rsplit("/", 1)[0] + "/no_such_database_for_readiness"
    server = daphne_server(INFERENCE_ENGINE="fake", DATABASE_URL=broken)
    response = httpx.get(server.base_url + "/readyz", timeout=30)
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"]["ok"] is False and checks["database"]["error"]
    assert checks["redis"]["ok"] and checks["engine"]["ok"]


