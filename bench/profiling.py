"""Where the full stack spends its time: ``py-spy record`` on the Daphne
process while it serves requests one at a time.

py-spy 0.4.3 samples every thread's Python stack (``--rate`` Hz, idle
samples left out) into "collapsed" lines, ``frame;frame;... count``;
:func:`summarize_collapsed` attributes each sample to one component by the
innermost frame that names one (llama.cpp, vLLM, database, Redis/channel
layer, WebSocket/Twisted, logging, ...) and lists the functions with the
most self time.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench.drivers import closed_loop
from bench.stats import summarize

RATE_HZ = 200

#: (component, substrings of a frame's file path or name), innermost match wins.
COMPONENTS = (
    ("llama.cpp (model)", ("llama_cpp/", "llamacpp_engine.py")),
    ("vLLM client (output processing)", ("vllm/",)),
    ("database (Django ORM, driver)", ("django/db/", "psycopg", "sqlite3")),
    ("Redis and channel layer", ("channels_redis", "redis/", "channel_layer.py", "limits/", "kombu/", "celery/")),
    ("logging", ("logging/",)),
    ("WebSocket and HTTP (Daphne, Twisted, Autobahn)", ("twisted/", "autobahn/", "daphne/")),
    ("asgiref thread hops", ("asgiref/",)),
    ("Channels consumer", ("channels/",)),
    ("product code (clinical/)", ("clinical/",)),
    ("asyncio", ("asyncio/",)),
)


#: Innermost frames of threads that wait for work (py-spy does not always
#: see them as idle): counted apart, as "waiting".
WAITING = ("_worker (concurrent/futures/thread.py", "select (selectors.py", "Condition.wait (threading.py",
           "Event.wait (threading.py", "_wait_for_tstate_lock (threading.py", "get (queue.py")


def _component(frames: list[str]) -> str:
    if frames and any(marker in frames[-1] for marker in WAITING):
        return "waiting (idle worker threads, event loop select)"
    for frame in reversed(frames):
        for name, markers in COMPONENTS:
            if any(marker in frame for marker in markers):
                return name
    return "other"


def summarize_collapsed(text: str, top: int = 12) -> dict:
    """Summary of py-spy ``--format raw`` output.

    Returns:
        ``{"samples", "components": {name: percent}, "top_self":
        [{"function", "percent"}]}``, percentages of all non-idle samples
        (``top_self`` leaves out the waiting threads).
    """
    components: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        total += n
        component = _component(frames)
        components[component] += n
        if frames and not component.startswith("waiting"):
            leaves[frames[-1].replace(str(Path(sys.prefix)), "").strip()] += n

    def pct(n: int) -> float:
        return round(100 * n / total, 1) if total else 0.0

    return {
        "samples": total,
        "components": {name: pct(n) for name, n in components.most_common()},
        "top_self": [{"function": name, "percent": pct(n)} for name, n in leaves.most_common(top)],
    }


def py_spy() -> str | None:
    """Path of the ``py-spy`` binary (the virtualenv's, else on PATH)."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


async def profile_stack(driver, workload, n: int, out_dir: Path, offset: int = 0) -> dict:
    """Serve ``n`` requests one at a time through ``driver`` (a started
    :class:`bench.drivers.StackDriver`) under ``py-spy record`` of
    its Daphne process.

    Returns:
        :func:`summarize_collapsed` plus the profiled requests' own timing
        summary, or ``{"error": ...}`` when py-spy is missing or cannot
        attach (it needs ptrace rights).
    """
    binary = py_spy()
    if binary is None:
        return {"error": "py-spy is not installed"}
    await driver.ensure(workload)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / f"daphne-{driver.engine}.collapsed.txt"
    log = out_dir / f"py-spy-{driver.engine}.log"
    with open(log, "wb") as log_file:
        spy = subprocess.Popen([binary, "record", "--pid", str(driver.server.pid), "--rate", str(RATE_HZ),
                                "--format", "raw", "--threads", "--output", str(raw)],
                               stdout=log_file, stderr=subprocess.STDOUT)
        await asyncio.sleep(1.0)  # attached
        if spy.poll() is not None:
            return {"error": f"py-spy exited: {log.read_text(errors='replace')[-500:]}"}
        results, wall = await closed_loop(driver, workload, 1, n, offset=offset)
        spy.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(spy.wait, 60)
        except subprocess.TimeoutExpired:
            spy.kill()
    if not raw.exists():
        return {"error": f"py-spy wrote no profile: {log.read_text(errors='replace')[-500:]}"}
    summary = summarize_collapsed(raw.read_text(errors="replace"))
    return {"tool": "py-spy record (idle samples excluded)", "rate_hz": RATE_HZ, "requests": n,
            "profile_file": os.path.relpath(raw, out_dir.parent), **summary,
            "requests_under_profiler": summarize(results, wall)}
