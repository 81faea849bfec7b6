"""The re-run worker's CPU priority (``RERUN_CPU_PRIORITY``,
clinical/rerun/cpu_priority.py): ``idle`` puts the calling thread, the
threads that already exist and everything started afterwards under Linux
``SCHED_IDLE`` (nice 19 where that is refused), ``normal`` leaves the
policy alone, ``auto`` chooses by the re-run engine's device.

Lowering a priority cannot be undone without privileges, so every test that
lowers one runs in a subprocess of its own; the test process keeps its own.
tests/live/test_rerun_cpu_priority.py checks a real worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from clinical.rerun import cpu_priority
from clinical.rerun.cpu_priority import cpu_priority_apply, cpu_priority_resolve
from inference import factory
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling policies")

# Run in a fresh interpreter: a thread started before the call, the call,
# then a thread and a child process started after it report their policy
# and nice value.
PROBE = """
import json, os, subprocess, sys, threading
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")
{patch}
from clinical.rerun.cpu_priority import cpu_priority_apply

def policy():
    return [os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)]

go, seen = threading.Event(), {{}}
def earlier():
    go.wait()
    seen["earlier_thread"] = policy()
thread = threading.Thread(target=earlier)
thread.start()
seen["applied"] = cpu_priority_apply({setting!r}, "cpu")
seen["main_thread"] = policy()
go.set()
thread.join()
later = threading.Thread(target=lambda: seen.update(later_thread=policy()))
later.start()
later.join()
child = subprocess.run([sys.executable, "-c",
                        "import os; print(os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0))"],
                       capture_output=True, text=True, check=True)
seen["child_process"] = [int(v) for v in child.stdout.split()]
print(json.dumps(seen))
"""


def probe(setting: str, patch: str = "") -> dict:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="clinical.settings")
    done = subprocess.run([sys.executable, "-c", PROBE.format(setting=setting, patch=textwrap.dedent(patch))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_idle_puts_the_thread_its_threads_and_a_later_child_process_under_sched_idle():
    start = [os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)]
    seen = probe("idle")
    assert seen.pop("applied") == cpu_priority.SCHED_IDLE
    idle = [os.SCHED_IDLE, start[1]]  # SCHED_IDLE ignores the nice value, which stays
    assert seen == {"main_thread": idle, "earlier_thread": idle, "later_thread": idle, "child_process": idle}
    # This process was not touched.
    assert [os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)] == start


def test_idle_falls_back_to_nice_19_where_sched_idle_is_refused():
    refuse = """
    def refused(*args):
        raise PermissionError(1, "Operation not permitted")
    os.sched_setscheduler = refused
    """
    seen = probe("idle", refuse)
    assert seen.pop("applied") == cpu_priority.NICE_19
    nice = [os.SCHED_OTHER, 19]
    assert seen == {"main_thread": nice, "earlier_thread": nice, "later_thread": nice, "child_process": nice}


def test_normal_leaves_the_policy_and_nice_value_alone(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "sched_setscheduler", lambda *args: calls.append(args))
    monkeypatch.setattr(os, "setpriority", lambda *args: calls.append(args))
    assert cpu_priority_apply("normal", "cpu") == cpu_priority.NORMAL
    assert calls == []


@pytest.mark.parametrize(("setting", "device", "wanted"), [
    ("auto", "cpu", "idle"), ("auto", "cuda", "normal"),
    ("idle", "cuda", "idle"), ("normal", "cpu", "normal"),
])
def test_auto_is_idle_on_a_cpu_host_and_normal_on_a_cuda_host(setting, device, wanted):
    assert cpu_priority_resolve(setting, device) == wanted


def test_auto_reads_the_rerun_engines_device(settings, monkeypatch):
    settings.RERUN_ENGINE = "vllm"
    monkeypatch.setattr(factory, "cuda_available", lambda: True)
    assert cpu_priority_resolve("auto") == "normal"
    monkeypatch.setattr(factory, "cuda_available", lambda: False)
    assert cpu_priority_resolve("auto") == "idle"
    settings.RERUN_ENGINE = "fake"  # the fake engine runs on the CPU whatever torch sees
    monkeypatch.setattr(factory, "cuda_available", lambda: True)
    assert cpu_priority_resolve("auto") == "idle"


def test_auto_on_a_cuda_host_touches_nothing_and_logs_the_choice(settings, monkeypatch, caplog):
    settings.RERUN_ENGINE, settings.RERUN_CPU_PRIORITY = "vllm", "auto"
    monkeypatch.setattr(factory, "cuda_available", lambda: True)
    monkeypatch.setattr(os, "sched_setscheduler", lambda *args: pytest.fail("policy changed"))
    with caplog.at_level("INFO", logger="clinical.rerun.cpu_priority"):
        assert cpu_priority_apply() == cpu_priority.NORMAL
    assert [r.getMessage() for r in caplog.records] == [
        "re-run worker CPU priority: normal (RERUN_CPU_PRIORITY=auto, re-run engine on cuda)"]


def test_an_unknown_setting_is_refused_at_start():
    with pytest.raises(ValueError, match="RERUN_CPU_PRIORITY must be one of"):
        cpu_priority_resolve("lowest", "cpu")
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="clinical.settings", RERUN_CPU_PRIORITY="lowest")
    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "RERUN_CPU_PRIORITY must be auto, idle or normal, not 'lowest'" in done.stderr
