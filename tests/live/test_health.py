"""Liveness and readiness for the load balancer: real Daphne, real Redis and
database, and the same checks made to fail by pointing at a closed port or
a database that does not exist."""

from __future__ import annotations

import signal
import socket
import time

import httpx
import pytest

from bench.processes import DaphneServer

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


def test_sigterm_during_the_start_up_warm_up_exits_without_waiting_for_it(stack_env, tmp_path):
    """A replica stopped while it still loads its word lists (they take
    seconds, from the engine preload on) exits as soon as its drain ends:
    the load runs in a daemon thread, not in an executor thread that the
    interpreter joins at exit."""
    server = DaphneServer(stack_env | {"INFERENCE_ENGINE": "fake"}, tmp_path / "daphne.log")
    try:
        deadline = time.monotonic() + 60
        while "serving on" not in server.logs():  # listening; the preload and the load start now
            assert server.process.poll() is None and time.monotonic() < deadline, server.logs()[-3000:]
            time.sleep(0.05)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=60) == 0
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    assert "drained in" in log, log[-3000:]
    after_stop = log[log.index(" stopped", log.index("drained in")):]
    assert "quality word lists" not in after_stop, log[-3000:]  # neither loaded nor failed: not waited for
