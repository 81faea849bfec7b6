"""A re-run that hangs ends at its time limit and the lane takes the next
job, on real processes: a real Daphne, a real Celery worker (solo pool,
which enforces no Celery time limit, so the task bounds its own generation:
clinical.rerun.execute._generate_bounded), the real Redis broker and channel
layer.

The worker's engine is the fake one with ``FAKE_ENGINE_HANG_ON``: a request
whose text contains that phrase yields nothing until it is aborted, as an
engine stuck in a kernel would; any other request is answered at once.
tests/rerun/test_time_limit.py shows the same in-process.
"""

from __future__ import annotations

import json
import time

import pytest
from websockets.asyncio.client import connect

from clinical.models import AuditEvent, Rerun, Translation
from clinical.translation.selectors import translation_api_view
from tests.conftest import in_thread
from tests.frames import receive_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SOFT_LIMIT_S = 4
HANGS = "Chronic pain of the left hip."
NEXT = "Mild degenerative change of the left knee."
VERIFICATION_END = ("verified", "verification_failed")


async def open_socket(server, session):
    return connect(server.ws_url + "/ws/translate/", open_timeout=30, additional_headers={
        "Cookie": f"sessionid={session}", "Origin": server.base_url})


async def test_a_hung_rerun_ends_at_its_time_limit_and_the_same_worker_verifies_the_next(
        daphne_server, celery_worker_process, clinician, capsys):
    worker = celery_worker_process(RERUN_ENGINE="fake", FAKE_ENGINE_HANG_ON="left hip",
                                   RERUN_SOFT_TIME_LIMIT_S=str(SOFT_LIMIT_S), RERUN_TIME_LIMIT_S="20")
    server = daphne_server(INFERENCE_ENGINE="fake", CONFIDENCE_THRESHOLD="1.01")  # every output is re-run
    session = await in_thread(lambda: server.login(clinician.username))

    async with await open_socket(server, session) as first, await open_socket(server, session) as second:
        await first.send(json.dumps({"type": "translate", "text": HANGS}))
        frames = await receive_until(first, ("verifying",), timeout=30)
        if frames[-1]["state"] == "queued":
            frames += await receive_until(first, ("verifying",), timeout=60)  # the worker took it
        assert frames[-1]["state"] == "running", worker.logs()[-3000:]
        running_at = time.monotonic()

        # The next job waits behind the hung one on the same lane.
        await second.send(json.dumps({"type": "translate", "text": NEXT}))
        next_frames = await receive_until(second, ("verifying",), timeout=30)
        assert next_frames[-1]["state"] == "queued"

        frames += await receive_until(first, VERIFICATION_END, timeout=SOFT_LIMIT_S + 30)
        failed_after_s = time.monotonic() - running_at
        assert frames[-1]["type"] == "verification_failed", worker.logs()[-3000:]
        assert "unverified" in frames[-1]["message"]
        # It hung until its limit, not less, and not much more.
        assert SOFT_LIMIT_S - 0.5 <= failed_after_s <= SOFT_LIMIT_S + 10, failed_after_s

        next_frames += await receive_until(second, VERIFICATION_END, timeout=60)
        assert next_frames[-1]["type"] == "verified", worker.logs()[-3000:]
        verified_after_s = time.monotonic() - running_at

    assert worker.process.poll() is None  # the same worker process, still serving
    assert "stopped at its time limit" in worker.logs()

    def check_database():
        hung = Translation.objects.get(input_text=HANGS)
        nxt = Translation.objects.get(input_text=NEXT)
        hung_rerun, next_rerun = Rerun.objects.get(translation=hung), Rerun.objects.get(translation=nxt)
        assert (hung_rerun.status, hung_rerun.error_class, hung_rerun.attempts) == (
            Rerun.Status.FAILED, "TimeoutError", 1)
        assert (next_rerun.status, next_rerun.attempts) == (Rerun.Status.COMPLETED, 1)
        assert next_rerun.started_at >= hung_rerun.finished_at  # taken after the hung one ended
        assert next_rerun.output_text == next_frames[-1]["text"]
        # The fast text stays, marked unverified, on the socket's and the API's side alike.
        api = translation_api_view(translation=hung)
        assert (api["verification"], api["verified"], api["text"]) == ("failed", False, hung.output_text)
        outcomes = {(e.request_id, e.outcome, e.error_class) for e in AuditEvent.objects.filter(
            event_type=AuditEvent.EventType.VERIFICATION)}
        assert outcomes == {(hung.request_id, "verification_failed", "TimeoutError"),
                            (nxt.request_id, "verified", "")}
        for row in (hung, nxt):
            assert AuditEvent.objects.filter(event_type=AuditEvent.EventType.TRANSLATION,
                                             request_id=row.request_id).count() == 1
    await in_thread(check_database)
    with capsys.disabled():
        print(f"\n[hung re-run] verification_failed {failed_after_s:.1f} s after the worker took it "
              f"(RERUN_SOFT_TIME_LIMIT_S={SOFT_LIMIT_S}); the next verified {verified_after_s:.1f} s after")
