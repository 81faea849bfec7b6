"""A full-precision re-run whose task could not reach the broker when the
translation completed, or was lost when the broker lost its data, is sent
again by the sweep (clinical.rerun.dispatch.reruns_redispatch), once, and a real
Celery worker then verifies it.

In the live tests the broker is a private redis-server, killed before the
translation or after it, and started again (empty, same port) before the
sweep; the channel layer, cache and leases stay on the shared Redis."""

from __future__ import annotations

import asyncio
import json
import re
import sys

import pytest
import redis
from django.conf import settings
from websockets.asyncio.client import connect

from clinical.models import AuditEvent, Rerun, Translation
from clinical.rerun.broker import broker_epoch
from clinical.translation.selectors import translation_api_view
from tests.conftest import ROOT, in_thread
from tests.data import laymaker_sentences
from tests.frames import receive_until

# -- unit: which re-runs the sweep sends, in-process, real broker ------------


def test_the_broker_epoch_survives_reads_and_changes_when_the_broker_loses_its_data(private_redis, settings):
    settings.CELERY_BROKER_URL = private_redis.url
    first = broker_epoch()
    assert first and broker_epoch() == first
    private_redis.kill()
    assert broker_epoch() is None  # unreachable: no epoch, no exception
    private_redis.start()  # empty
    assert broker_epoch() not in (None, "", first)
    settings.CELERY_BROKER_URL = "amqp://guest@127.0.0.1:5672//"
    assert broker_epoch() == ""  # not Redis: no epoch


# -- live: broker down at enqueue, sweep after it is back, real worker -------

async def sweep_command(env: dict[str, str]) -> int:
    """``manage.py translations_sweep --rerun-grace 0`` in its own process
    (as a replica or a timer would run it); returns the re-runs it sent."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "manage.py", "translations_sweep", "--rerun-grace", "0", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output = (await asyncio.wait_for(process.communicate(), timeout=120))[0].decode(errors="replace")
    assert process.returncode == 0, output
    match = re.search(r"^(\d+) re-run\(s\) re-dispatched", output, re.MULTILINE)
    assert match, output
    return int(match[1])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
async def test_a_rerun_whose_enqueue_failed_is_redispatched_once_and_verified(
        daphne_server, celery_worker_process, clinician, stack_env, private_redis):
    broker_env = {"CELERY_BROKER_URL": private_redis.url}
    server = daphne_server(INFERENCE_ENGINE="fake", CONFIDENCE_THRESHOLD="1.01", **broker_env)
    session = await in_thread(lambda: server.login(clinician.username))
    text = laymaker_sentences()[3]
    private_redis.kill()  # the broker is unreachable when the translation completes

    async with connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        await socket.send(json.dumps({"type": "translate", "text": text}))
        frames = await receive_until(socket, ("verifying", "error"), timeout=60)
        assert frames[-1]["type"] == "verifying" and frames[-1]["state"] == "queued", frames
        done = next(f for f in frames if f["type"] == "done")
        assert done["verification"] == "pending"

        def undispatched():
            translation = Translation.objects.get()
            rerun = Rerun.objects.get(translation=translation)
            assert translation.status == Translation.Status.COMPLETED
            assert translation.verification == Translation.Verification.PENDING
            assert (rerun.status, rerun.dispatched_at) == (Rerun.Status.QUEUED, None)
            return str(translation.request_id)
        request_id = await in_thread(undispatched)
        logs = server.logs()
        assert f"re-run of request {request_id} not dispatched" in logs
        assert text not in logs and text[:30] not in logs

        # The broker comes back (empty). Two replicas sweep at once, then a
        # third time: the re-run is sent exactly once.
        private_redis.start()
        sweep_env = stack_env | broker_env
        sent = await asyncio.gather(sweep_command(sweep_env), sweep_command(sweep_env))
        assert sorted(sent) == [0, 1]
        assert await sweep_command(sweep_env) == 0
        broker = redis.Redis.from_url(private_redis.url)
        assert broker.llen(stack_env["CELERY_KEY_PREFIX"] + "rerun") == 1
        assert await in_thread(lambda: Rerun.objects.get().dispatched_at) is not None

        await verified_once(socket, celery_worker_process, broker_env, stack_env)


async def verified_once(socket, celery_worker_process, broker_env: dict, stack_env: dict) -> None:
    """A worker on the broker verifies the one translation: the socket gets
    ``verified`` once, the database, audit log and API agree, and the
    broker's queue is empty."""
    worker = celery_worker_process(RERUN_ENGINE="fake", **broker_env)
    frames = await receive_until(socket, ("verified", "verification_failed"), timeout=120)
    assert frames[-1]["type"] == "verified", worker.logs()[-3000:]
    verified = frames[-1]
    with pytest.raises(TimeoutError):  # and verified exactly once
        await receive_until(socket, ("verified",), timeout=3)

    def check_database():
        translation = Translation.objects.get()
        rerun = Rerun.objects.get(translation=translation)
        assert translation.verification == Translation.Verification.VERIFIED
        assert (rerun.status, rerun.attempts) == (Rerun.Status.COMPLETED, 1)
        assert rerun.output_text == verified["text"]
        events = AuditEvent.objects.filter(request_id=translation.request_id)
        assert events.filter(event_type=AuditEvent.EventType.TRANSLATION).count() == 1
        assert events.filter(event_type=AuditEvent.EventType.VERIFICATION,
                             outcome=AuditEvent.Outcome.VERIFIED).count() == 1
        assert events.filter(event_type=AuditEvent.EventType.VERIFICATION).count() == 1
        api = translation_api_view(translation=translation)  # what the API answers
        assert (api["verified"], api["verification"], api["text"]) == (True, "verified", verified["text"])
    await in_thread(check_database)
    broker = redis.Redis.from_url(broker_env["CELERY_BROKER_URL"])
    assert broker.llen(stack_env["CELERY_KEY_PREFIX"] + "rerun") == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
async def test_a_rerun_lost_when_the_broker_restarted_empty_is_redispatched_once_and_verified(
        daphne_server, celery_worker_process, clinician, stack_env, private_redis):
    """The broker took the task, then restarted without its data before a
    worker read it: the database still says queued and dispatched."""
    broker_env = {"CELERY_BROKER_URL": private_redis.url}
    server = daphne_server(INFERENCE_ENGINE="fake", CONFIDENCE_THRESHOLD="1.01", **broker_env)
    session = await in_thread(lambda: server.login(clinician.username))
    broker = redis.Redis.from_url(private_redis.url)
    queue = stack_env["CELERY_KEY_PREFIX"] + "rerun"

    async with connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        await socket.send(json.dumps({"type": "translate", "text": laymaker_sentences()[4]}))
        frames = await receive_until(socket, ("verifying", "error"), timeout=60)
        assert frames[-1]["type"] == "verifying" and frames[-1]["state"] == "queued", frames

        def dispatched() -> str:
            rerun = Rerun.objects.get()
            assert rerun.status == Rerun.Status.QUEUED and rerun.dispatched_at is not None
            return rerun.broker_epoch
        first_epoch = await in_thread(dispatched)
        assert first_epoch and broker.llen(queue) == 1

        private_redis.kill()  # no worker has read it; the broker comes back empty
        private_redis.start()
        assert broker.llen(queue) == 0
        sweep_env = stack_env | broker_env
        sent = await asyncio.gather(sweep_command(sweep_env), sweep_command(sweep_env))
        assert sorted(sent) == [0, 1]
        assert await sweep_command(sweep_env) == 0
        assert broker.llen(queue) == 1
        assert await in_thread(lambda: Rerun.objects.get().broker_epoch) not in ("", first_epoch)

        await verified_once(socket, celery_worker_process, broker_env, stack_env)


# -- a broker that accepts connections and never answers ----------------------

def test_a_publish_to_a_silent_broker_gives_up_and_leaves_the_rerun_to_the_sweep():
    """A broker that stops answering without closing its connections (a
    failover, a firewall dropping packets) used to hold the publishing thread,
    and with it the translation's end, forever: kombu waits on the socket
    unless ``socket_timeout`` is set. The publish must fail within the
    configured bound so the sweep can send the re-run later."""
    import socket
    import subprocess
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes connections; nothing ever replies
    port = silent.getsockname()[1]
    code = (
        "import time, django; django.setup()\n"
        "from clinical.rerun.dispatch import _task_send\n"
        "t = time.monotonic(); sent = _task_send(translation_id=1, request_id='silent-broker')\n"
        "print(sent, round(time.monotonic() - t, 2))\n")
    env = {**__import__("os").environ, "CELERY_BROKER_URL": f"redis://127.0.0.1:{port}/0",
           "DJANGO_SETTINGS_MODULE": "clinical.settings"}
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=90)
    finally:
        silent.close()
    sent, seconds = done.stdout.split()[-2:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert sent == "False"
    # 3 attempts x CELERY_BROKER_TIMEOUT_S (3 s) and the retry intervals
    assert float(seconds) < 3 * settings.CELERY_BROKER_TIMEOUT_S + 3, seconds
    assert "silent-broker" in done.stderr and "not dispatched" in done.stderr
    assert time.monotonic() - started < 90
