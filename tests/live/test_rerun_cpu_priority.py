"""A real re-run worker runs at the CPU priority ``RERUN_CPU_PRIORITY``
asks for (clinical/rerun/cpu_priority.py), set at ``worker_init`` before the
engine loads: on this CPU host the default ``auto`` is Linux ``SCHED_IDLE``
for the worker process and every thread it runs (the lane's heartbeat and
Celery's own threads start after it); ``normal`` leaves it ``SCHED_OTHER``.
The worker's engine is the fake one (``RERUN_ENGINE=fake``, on the CPU).
tests/rerun/test_cpu_priority.py covers the function in-process.
"""

from __future__ import annotations

import os
import time

import pytest

pytestmark = [pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling policies"),
              pytest.mark.django_db(transaction=True)]



def wait_ready(worker, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert worker.process.poll() is None, worker.logs()[-3000:]
        if " ready." in worker.logs():
            return
        time.sleep(0.2)
    raise AssertionError(f"worker not ready in {timeout_s} s:\n{worker.logs()[-3000:]}")


def policies(pid: int) -> dict[int, int]:
    """Scheduling policy of each thread of process ``pid``."""
    return {int(tid): os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


def test_the_running_worker_is_sched_idle_by_default_on_a_cpu_host(celery_worker_process):
    worker = celery_worker_process(RERUN_ENGINE="fake")
    wait_ready(worker)
    assert os.sched_getscheduler(worker.pid) == os.SCHED_IDLE
    threads = policies(worker.pid)
    assert len(threads) > 1 and set(threads.values()) == {os.SCHED_IDLE}, threads
    logs = worker.logs()
    assert "re-run worker CPU priority: sched_idle (RERUN_CPU_PRIORITY=auto, re-run engine on cpu)" in logs
    assert logs.count("re-run worker CPU priority") == 1
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # the test process itself is untouched


def test_a_worker_set_to_normal_keeps_the_normal_policy(celery_worker_process):
    worker = celery_worker_process(RERUN_ENGINE="fake", RERUN_CPU_PRIORITY="normal")
    wait_ready(worker)
    assert os.sched_getscheduler(worker.pid) == os.SCHED_OTHER
    assert set(policies(worker.pid).values()) == {os.SCHED_OTHER}
    assert "re-run worker CPU priority: normal (RERUN_CPU_PRIORITY=normal)" in worker.logs()
