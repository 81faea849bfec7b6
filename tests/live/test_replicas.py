"""Several web replicas behind nginx: real ``python -m clinical.serve``
processes, Debian's nginx (rendered by deploy/render_nginx.py, run as a
foreground process on loopback), PostgreSQL (or SQLite), Redis and a real
Celery worker. The engine is the fake one (``INFERENCE_ENGINE=fake``)
slowed down so that streams are still running when a replica is killed or
stopped."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from clinical.models import AuditEvent, Translation
from clinical.runtime import drain, replica
from clinical.translation import admission
from tests.conftest import PASSWORD, ROOT, _free_port, in_thread
from tests.data import laymaker_sentences
from tests.frames import receive_until

sys.path.insert(0, str(ROOT / "deploy"))
import render_nginx  # noqa: E402

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
needs_nginx = pytest.mark.skipif(not os.path.exists(NGINX),
                                 reason="Debian's nginx is not installed (scripts/setup.sh installs it)")

#: Fast leases and sweep, a slow fake engine (seconds). The lease is 6 s
#: renewed every 1 s: a 3 s one lost a running translation's place on a
#: CPU-starved replica (tests/live/test_fair_share.py, CI of stop 31), which
#: here would let the survivor sweep a live stream as an orphan.
REPLICA_ENV = {"INFERENCE_ENGINE": "fake", "FAKE_ENGINE_TOKEN_DELAY_S": "0.15", "LEASE_TTL_S": "6",
               "LEASE_REFRESH_S": "1", "SWEEP_GRACE_S": "6", "ORPHAN_SWEEP_INTERVAL_S": "1",
               "TRANSLATE_RATE_PER_USER": "1000/minute",
               # One clinician drives every stream here: no fair-share caps.
               "USER_MAX_SOCKETS": "0", "USER_MAX_CONCURRENT_TRANSLATIONS": "0"}


class Replica:
    """``python -m clinical.serve`` on a free loopback port."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path) -> None:
        self.name, self.port, self.log_path = name, _free_port(), log_path
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "clinical.serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--proxy-headers"],
            cwd=ROOT, env=env | {"REPLICA_ID": name}, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.logs()[-3000:]}")
            try:
                if httpx.get(self.base_url + "/readyz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"{self.name} did not become ready:\n{self.logs()[-3000:]}")

    def inflight(self) -> float:
        text = httpx.get(self.base_url + "/metrics", timeout=10).text
        line = next(line for line in text.splitlines() if line.startswith("clinical_inflight_translations "))
        return float(line.split()[1])

    def logs(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()


class Nginx:
    """Debian's nginx in the foreground with its own pid, logs and temp
    files under ``directory``."""

    def __init__(self, replicas: list[Replica], directory: Path) -> None:
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        self.directory = directory
        conf = render_nginx.write(directory / "nginx.conf", replicas=[f"127.0.0.1:{r.port}" for r in replicas],
                                  listen=f"127.0.0.1:{self.port}", runtime_dir=directory, workers="1")
        self.process = subprocess.Popen(
            [NGINX, "-c", str(conf), "-p", str(directory), "-e", str(directory / "error.log"),
             "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base_url + "/livez", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        raise TimeoutError(f"nginx did not start:\n{self.error_log()}")

    def error_log(self) -> str:
        path = self.directory / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        self.process.send_signal(signal.SIGQUIT)  # graceful shutdown
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def stack(stack_env, tmp_path, celery_worker_process):
    """Factory for replicas and nginx on this test's database and Redis
    prefixes; everything is stopped at teardown."""
    started: list = []

    class Stack:
        env = stack_env

        def replica(self, name: str, **env: str) -> Replica:
            server = Replica(name, stack_env | REPLICA_ENV | env, tmp_path / f"{name}.log")
            started.append(server)
            return server

        def nginx(self, replicas: list[Replica]) -> Nginx:
            proxy = Nginx(replicas, tmp_path / "nginx")
            started.append(proxy)
            return proxy

        def worker(self, **env: str):
            return celery_worker_process(**({"RERUN_ENGINE": "fake"} | env))

    yield Stack()
    for item in reversed(started):
        item.stop()


def login(base_url: str, username: str) -> str:
    """Log in through the real form (via nginx or a replica); the session
    cookie works on every replica (sessions are in the database)."""
    with httpx.Client(base_url=base_url, timeout=30) as client:
        client.get("/accounts/login/")
        response = client.post("/accounts/login/", data={
            "username": username, "password": PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        assert response.status_code == 302, response.text[:300]
        return client.cookies["sessionid"]


def open_socket(server, session: str):
    return connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
        "Cookie": f"sessionid={session}", "Origin": server.base_url})


def translation_audits(request_id) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(request_id=request_id, event_type=AuditEvent.EventType.TRANSLATION))


def long_text(index: int, words: int = 40) -> str:
    """Laymaker sentences joined to about ``words`` words (the fake engine
    streams one word per token)."""
    text: list[str] = []
    for sentence in laymaker_sentences()[index:]:
        text += sentence.split()
        if len(text) >= words:
            return " ".join(text[:words])
    raise AssertionError("not enough text")


@needs_nginx
async def test_a_rerun_enqueued_by_one_replica_reaches_a_socket_held_by_the_other(stack, clinician):
    a = stack.replica("web-a", CONFIDENCE_THRESHOLD="1.01")
    b = stack.replica("web-b", CONFIDENCE_THRESHOLD="1.01")
    await in_thread(a.wait_ready)
    await in_thread(b.wait_ready)
    session = await in_thread(login, a.base_url, clinician.username)
    async with open_socket(a, session) as on_a:
        await on_a.send(json.dumps({"type": "translate", "text": laymaker_sentences()[7]}))
        frames = await receive_until(on_a, ("verifying",), timeout=30)
    assert frames[-2]["type"] == "done" and frames[-1]["state"] == "queued"
    request_id = frames[-1]["id"]
    # Replica A, which completed the translation and enqueued its re-run, is
    # gone; the clinician now follows it on B.
    a.stop()
    async with open_socket(b, session) as on_b:
        await on_b.send(json.dumps({"type": "watch", "id": request_id}))
        assert (await receive_until(on_b, ("verifying",), timeout=15))[-1]["state"] == "queued"
        worker = stack.worker()  # started only now: the result must travel to B
        frames = await receive_until(on_b, ("verified", "verification_failed"), timeout=120)
    assert frames[-1]["type"] == "verified", worker.logs()[-3000:]
    assert frames[-1]["id"] == request_id and frames[-1]["text"]


@needs_nginx
async def test_killing_a_replica_mid_stream_loses_no_request_and_its_clients_get_a_clean_error(
        stack, clinician):
    a, b = stack.replica("web-a"), stack.replica("web-b")
    await in_thread(a.wait_ready)
    await in_thread(b.wait_ready)
    proxy = await in_thread(stack.nginx, [a, b])
    session = await in_thread(login, proxy.base_url, clinician.username)

    sockets = [await open_socket(proxy, session) for _ in range(6)]
    outcomes: list[dict] = [{} for _ in sockets]

    async def run(index: int, socket) -> None:
        frames = []
        try:
            await socket.send(json.dumps({"type": "translate", "text": long_text(index * 3)}))
            async for message in socket:
                frames.append(json.loads(message))
                if frames[-1]["type"] in ("done", "error", "cancelled"):
                    break
            outcomes[index] = {"frames": frames, "closed": False}
        except ConnectionClosed:
            outcomes[index] = {"frames": frames, "closed": True, "at": time.monotonic()}

    tasks = [asyncio.create_task(run(i, s)) for i, s in enumerate(sockets)]
    await asyncio.sleep(2.0)  # every stream is running (40 tokens at 0.15 s each)
    inflight = {a.name: await in_thread(a.inflight), b.name: await in_thread(b.inflight)}
    assert inflight[a.name] >= 1 and inflight[b.name] >= 1 and sum(inflight.values()) == 6, inflight
    a.process.kill()  # SIGKILL: no drain, no clean-up
    killed_at = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    for socket in sockets:
        await socket.close()

    closed = [o for o in outcomes if o["closed"]]
    finished = [o for o in outcomes if not o["closed"]]
    # The killed replica's clients see their socket close at once, not a hang.
    assert len(closed) == inflight[a.name] and all(o["at"] - killed_at < 5 for o in closed), outcomes
    # The survivor's clients finish normally.
    assert len(finished) == inflight[b.name]
    assert all(o["frames"][-1]["type"] == "done" for o in finished), finished
    started_ids = {o["frames"][0]["id"] for o in outcomes}
    assert len(started_ids) == 6

    # New clients go through nginx to the survivor.
    async with open_socket(proxy, session) as socket:
        await socket.send(json.dumps({"type": "translate", "text": "No acute distress."}))
        after = await receive_until(socket, ("done", "error"), timeout=30)
    assert after[-1]["type"] == "done"
    started_ids.add(after[0]["id"])

    # The survivor's sweep finalises the orphans once their leases expire.
    deadline = time.monotonic() + 30
    while await in_thread(lambda: Translation.objects.filter(status="pending").count()):
        assert time.monotonic() < deadline, "orphans were not swept"
        await asyncio.sleep(0.5)

    def check_database():
        rows = {str(t.request_id): t for t in Translation.objects.all()}
        assert set(rows) == started_ids
        for request_id, row in rows.items():
            audits = translation_audits(request_id)
            assert len(audits) == 1, (request_id, audits)  # exactly one final audit record
            assert audits[0].outcome == row.status
        lost = [o["frames"][0]["id"] for o in closed]
        for request_id in lost:
            assert (rows[request_id].status, rows[request_id].error_class) == ("error", "ReplicaLost")
        assert {str(r) for r, s in ((k, v.status) for k, v in rows.items()) if s == "completed"} == \
            started_ids - set(lost)
    await in_thread(check_database)


@needs_nginx
async def test_sigterm_drains_streams_then_closes_sockets_with_1012(stack, clinician):
    a = stack.replica("web-a", DRAIN_TIMEOUT_S="4", FAKE_ENGINE_TOKEN_DELAY_S="0.2")
    b = stack.replica("web-b")
    await in_thread(a.wait_ready)
    await in_thread(b.wait_ready)
    proxy = await in_thread(stack.nginx, [a, b])
    session = await in_thread(login, a.base_url, clinician.username)
    probe = httpx.AsyncClient(base_url=a.base_url, timeout=10)  # a kept-alive connection to A
    assert (await probe.get("/readyz")).status_code == 200

    async with open_socket(a, session) as short, open_socket(a, session) as long, \
            open_socket(a, session) as idle:
        await short.send(json.dumps({"type": "translate", "text": long_text(0, words=8)}))
        await long.send(json.dumps({"type": "translate", "text": long_text(5, words=80)}))
        ids = {}
        for name, socket in (("short", short), ("long", long)):
            ids[name] = (await receive_until(socket, ("token",), timeout=15))[0]["id"]
        a.process.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()

        await asyncio.sleep(0.5)
        ready = await probe.get("/readyz")
        assert ready.status_code == 503 and ready.json()["status"] == "draining"
        # New connections go to B through nginx while A drains.
        async with open_socket(proxy, session) as fresh:
            await fresh.send(json.dumps({"type": "translate", "text": "No acute distress."}))
            assert (await receive_until(fresh, ("done", "error"), timeout=30))[-1]["type"] == "done"

        with pytest.raises(ConnectionClosed) as idle_closed:
            await asyncio.wait_for(idle.recv(), timeout=5)
        assert idle_closed.value.rcvd.code == 1012
        short_frames = await receive_until(short, ("done", "error"), timeout=10)
        assert short_frames[-1]["type"] == "done"  # finished within the drain timeout
        long_frames: list[dict] = []
        with pytest.raises(ConnectionClosed) as long_closed:
            while True:
                long_frames.append(json.loads(await asyncio.wait_for(long.recv(), timeout=15)))
        assert long_closed.value.rcvd.code == 1012
        assert long_frames[-1]["code"] == "server_restart" and long_frames[-1]["retry_after_s"] >= 1
    await probe.aclose()
    assert await in_thread(a.process.wait, 20) == 0
    assert 3.5 < time.monotonic() - stopped_at < 15

    def check_database():
        short_row = Translation.objects.get(request_id=ids["short"])
        long_row = Translation.objects.get(request_id=ids["long"])
        assert short_row.status == "completed" and long_row.status == "cancelled"
        assert Translation.objects.filter(status="pending").count() == 0
        for row in Translation.objects.all():
            assert len(translation_audits(row.request_id)) == 1
    await in_thread(check_database)


# -- in-process: the refusal while draining and the sweep command ------------

@pytest.mark.django_db(transaction=True)
async def test_a_draining_replica_refuses_new_translations_with_a_retry(clinician, fake_engine):
    drain.drain_begin()
    try:
        with pytest.raises(admission.TranslationRefused) as refused:
            await admission.translation_accept(user=clinician, api_client=None, source="web",
                                              text=laymaker_sentences()[1])
    finally:
        drain.drain_reset()
    assert refused.value.code == "draining" and refused.value.retry_after_s >= 1
    assert "retry" in refused.value.message.lower()
    event = await in_thread(lambda: AuditEvent.objects.get())
    assert (event.outcome, event.error_class) == ("rejected", "Draining")
    assert await in_thread(lambda: Translation.objects.count()) == 0
    await sync_to_async(lambda: connection.close())()  # the audit write's thread keeps one open


@pytest.mark.django_db
def test_the_sweep_command_finalises_orphans_once_and_spares_leased_ones(clinician):
    orphan = admission.translation_create(user=clinician, text=laymaker_sentences()[0])
    leased = admission.translation_create(user=clinician, text=laymaker_sentences()[1])
    fresh = admission.translation_create(user=clinician, text=laymaker_sentences()[2])
    an_hour_ago = timezone.now() - timezone.timedelta(hours=1)
    Translation.objects.filter(pk__in=[orphan.pk, leased.pk]).update(created_at=an_hour_ago)
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.set(replica.lease_key(leased.request_id), "web-x", ex=60)
    try:
        call_command("translations_sweep")
        call_command("translations_sweep")  # a second sweep changes nothing
    finally:
        client.delete(replica.lease_key(leased.request_id))
    orphan.refresh_from_db(), leased.refresh_from_db(), fresh.refresh_from_db()
    assert (orphan.status, orphan.error_class) == ("error", "ReplicaLost")
    assert leased.status == "pending" and fresh.status == "pending"  # a live lease; too young
    assert [e.outcome for e in translation_audits(orphan.request_id)] == ["error"]
    assert translation_audits(leased.request_id) == [] and translation_audits(fresh.request_id) == []
