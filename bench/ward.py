"""Clinicians through the full stack as ``make run`` starts it: two commands.

``python -m bench ward``: a ward of clinicians translating at once, with
the re-run worker off, at normal CPU priority and at idle priority
(``RERUN_CPU_PRIORITY``, clinical/rerun/cpu_priority.py), in one run.

The full stack as ``make run`` starts it: Redis from
``scripts/ensure_redis.py``, the fp32 copy of the default model for vLLM
(``python -m inference.weights prepare --with-default-hf``), ``python -m
clinical.serve`` with the default model and settings (started once, the
cluster warm-up awaited), and per configuration:

* ``no worker``: the baseline;
* ``normal``: a real Celery re-run worker with the default re-run engine
  (vLLM, float32) at ``RERUN_CPU_PRIORITY=normal``;
* ``idle``: the same worker at ``RERUN_CPU_PRIORITY=idle`` (``SCHED_IDLE``);
* ``no worker again``: the baseline once more, last, to show how far the
  host drifted during the run (the ratios are to the first).

A worker is measured only once its engine reports ready in Redis (the
lane's heartbeat, clinical/rerun/lane.py, read through ``/readyz``). Then
``--clients`` logged-in clinicians, one WebSocket each, translate
``--per-client`` laymaker-dev sentences each (``ORIGINAL`` column, the same
sentences in every configuration) in a closed loop: the next as soon as the
previous one's ``done`` frame arrives, none sent after ``--max-load-s``; an
unmeasured pass of the same load runs once before the first configuration
(``--no-warmup-pass`` skips it: the first pass after start took 2.4x the
engine's CPU seconds of later ones here). ``--pace-s S`` paces the load
instead: each clinician sends one sentence every S seconds (a clinician at
the bedside), staggered, for ``--max-load-s``; the report adds each
configuration's output rate (tokens after the first over the time from the
first token to the ``done`` frame, the checks included), the slowest
verification and the gated texts still unverified at the end.
TTFT (translate frame sent → first ``token`` frame) and E2E (→ ``done``) at
the client. The sockets stay open for up to ``--drain-s`` more seconds while
the worker verifies what the gate queued; done → verified is timed at the
client (``done`` frame → ``verified`` frame of the same id). What is still
queued when a configuration ends is purged before the next one starts.
Each load starts once the rest of the host has been quiet for 3 s (at most
``--quiet-timeout-s``): on a shared machine another engineer's tests would
otherwise take CPU from one configuration and not from the next.
Resident memory (peak) and CPU seconds during the load of each process
(Daphne, the worker, vLLM's engine core with its children, the clients) and
of the rest of the host are sampled every second; the scheduling policy of
the worker and its engine core is read from the kernel.

Writes ``<out>.json`` and ``<out>.md`` (default ``docs/benchmarks/ward``).
Runs a model: ``flock /tmp/cpu.lock .venv/bin/python -m bench ward`` on a
shared machine. ``--engine fake`` runs the same flow on the fake engines
(no model, seconds) to check the harness.

``python -m bench clinician_ttft``: what one clinician waits for the
first word, through the full stack, on the default model and the
product's prompt, against the one-example prompt in the same run.

Starts the product's server as ``make run`` does (``python -m
clinical.serve``: Daphne, the engine preload and the cluster warm-up),
default model, default settings, once per configuration:

* ``clusters``: the product's default (``PROMPT_CLUSTERS`` x
  ``PROMPT_CLUSTER_EXAMPLES`` cluster prefixes, warmed after start);
* ``one-example``: ``PROMPT_EXAMPLES=0``, the one-example prompt
  (``2026-11-22.3``), the baseline.

Once ``/readyz`` answers and the warm-up has logged its end, one logged-in
clinician sends ``--sentences`` sentences one after another over one
WebSocket. TTFT is measured at the client (translate frame sent → first
``token`` frame, ms) and read from the server's ``done`` frame; the
``done`` frame's ``tokens_in`` gives the prompt length. The sentences are
the first sentences (at most 40 words) of Cochrane val abstracts: real
text that is not in the example pool. No re-run worker runs (the ward
benchmark measures the lane's cost).

Writes ``<out>.json`` and ``<out>.md`` (default
``docs/benchmarks/clinician-ttft``). Needs Redis (``REDIS_URL``) and uses
``DATABASE_URL`` when set, else a scratch SQLite file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench.corpora import ROOT
from bench.stats import report_write

#: Configuration → the worker's RERUN_CPU_PRIORITY (None: no worker).
CONFIGS = {"no worker": None, "normal": "normal", "idle": "idle", "no worker again": None}
BASELINE = "no worker"
VERIFICATION_END = ("verified", "verification_failed")
#: The server's log line that ends the cluster prefixes' warm-up.
WARMED = "example cluster prefixes warmed"
POLICY_NAMES = {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH", 5: "SCHED_IDLE"}


def ward_texts(clients: int, per_client: int) -> list[list[str]]:
    """Each clinician's sentences: laymaker-dev ``ORIGINAL`` sentences of at
    least 6 words, dealt out in order, ``per_client`` each."""
    from bench.corpora import short_texts

    texts = short_texts(clients * per_client)
    return [texts[i * per_client:(i + 1) * per_client] for i in range(clients)]


class Clinician:
    """One logged-in clinician's socket: a reader task files verification
    frames by id (with their arrival time) and hands every other frame to
    :meth:`translate`."""

    def __init__(self, sock) -> None:
        self.socket = sock
        self.frames: asyncio.Queue = asyncio.Queue()
        self.verification: dict[str, dict] = {}
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.socket:
                now = time.perf_counter()
                frame = json.loads(message)
                kind = frame.get("type")
                if kind in ("verifying", *VERIFICATION_END):
                    key = kind if kind != "verifying" else f"verifying_{frame.get('state', '')}"
                    self.verification.setdefault(frame.get("id", ""), {}).setdefault(key, now)
                    if kind == "verified":
                        self.verification[frame["id"]]["rerun_ms"] = frame.get("rerun_ms")
                        self.verification[frame["id"]]["queue_wait_ms"] = frame.get("queue_wait_ms")
                else:
                    await self.frames.put((now, frame))
        except Exception as exc:  # noqa: BLE001 - the socket closed: translate() sees it
            await self.frames.put((time.perf_counter(), {"type": "closed", "error": type(exc).__name__}))
        else:
            await self.frames.put((time.perf_counter(), {"type": "closed", "error": "closed"}))

    async def translate(self, text: str) -> dict:
        """Send one translation and wait for its end. Returns ``{"id",
        "ttft_ms", "e2e_ms", "done_at", "verification", "rerun_reason",
        "error"}`` (``done_at``: ``perf_counter()`` of the ``done`` frame)."""
        sent = time.perf_counter()
        row: dict = {"id": None, "ttft_ms": None, "e2e_ms": None, "done_at": None, "verification": None,
                     "rerun_reason": "", "tokens_out": None, "error": None}
        await self.socket.send(json.dumps({"type": "translate", "text": text}))
        while True:
            now, frame = await self.frames.get()
            kind = frame.get("type")
            if kind == "started":
                row["id"] = frame.get("id")
            elif kind == "token" and row["id"] and row["ttft_ms"] is None:
                row["ttft_ms"] = round((now - sent) * 1000, 1)
            elif kind == "done" and frame.get("id") == row["id"]:
                row.update(e2e_ms=round((now - sent) * 1000, 1), done_at=now,
                           verification=frame.get("verification"), rerun_reason=frame.get("rerun_reason") or "",
                           tokens_out=frame.get("tokens_out"))
                return row
            elif kind in ("error", "cancelled", "closed"):
                row.update(error=f"{kind}:{frame.get('code') or frame.get('error') or ''}",
                           e2e_ms=round((now - sent) * 1000, 1))
                return row
            # other frames (checking, verifying, an earlier translation's) are skipped

    async def close(self) -> None:
        await self.socket.close()
        self.reader.cancel()


async def ward_load(server, sessions: list[str], texts: list[list[str]], max_load_s: float,
                    drain_s: float, on_load_end=lambda: None, pace_s: float = 0) -> dict:
    """Every clinician translates its texts in a closed loop (none sent
    after ``max_load_s``), or, with ``pace_s`` > 0, one every ``pace_s``
    seconds (the clinicians staggered evenly over the first ``pace_s``; a
    translation that takes longer delays the next one, never overlaps it);
    ``on_load_end()`` is called when the last translation is done; then the
    sockets wait up to ``drain_s`` for the verifications the gate queued.
    Returns rows, the load's wall time and the drain's."""
    from websockets.asyncio.client import connect

    clinicians = [Clinician(await connect(
        server.ws_url + "/ws/translate/", open_timeout=60, max_size=2**22,
        additional_headers={"Cookie": f"sessionid={session}", "Origin": server.base_url})) for session in sessions]
    rows: list[dict] = []
    started = time.perf_counter()

    async def one(clinician: Clinician, own: list[str], offset_s: float) -> None:
        for k, text in enumerate(own):
            if pace_s > 0:
                due = offset_s + k * pace_s
                if due > max_load_s:
                    break
                await asyncio.sleep(max(0.0, started + due - time.perf_counter()))
            elif time.perf_counter() - started > max_load_s:
                break
            rows.append(await clinician.translate(text) | {"client": clinicians.index(clinician)})

    try:
        await asyncio.gather(*(one(c, own, i * pace_s / len(clinicians))
                               for i, (c, own) in enumerate(zip(clinicians, texts))))
        load_end = time.perf_counter()
        on_load_end()
        queued = {r["id"] for r in rows if r["verification"] == "pending"}

        def unfinished() -> set[str]:
            ended = {i for c in clinicians for i, v in c.verification.items() if any(k in v for k in VERIFICATION_END)}
            return queued - ended

        while unfinished() and time.perf_counter() - load_end < drain_s:
            await asyncio.sleep(0.5)
        drain_end = time.perf_counter()
    finally:
        for clinician in clinicians:
            await clinician.close()
    events = {i: v for c in clinicians for i, v in c.verification.items()}
    for row in rows:
        event = events.get(row["id"] or "", {})
        row["verified_s"] = (round(event["verified"] - row["done_at"], 2)
                             if "verified" in event and row["done_at"] else None)
        row["verification_failed"] = "verification_failed" in event
        row["rerun_ms"] = event.get("rerun_ms")
        row["rerun_queue_wait_ms"] = event.get("queue_wait_ms")
        row["done_at"] = round(row["done_at"] - started, 3) if row["done_at"] else None
    return {"rows": rows, "load_s": round(load_end - started, 1), "drain_s": round(drain_end - load_end, 1)}


class Sampler:
    """Peak RSS (GiB) and CPU seconds of named groups of processes, every
    ``interval_s``, from a thread; and the CPU seconds the whole host spent
    meanwhile, so that what ran outside those groups shows (``other``).
    Groups are found by ``targets()`` (name → pids), called each round, so a
    process that appears later is picked up from then on."""

    def __init__(self, targets, interval_s: float = 1.0) -> None:
        self.targets = targets
        self.interval_s = interval_s
        self.peak_rss: dict[str, float] = {}
        self.cpu_s: dict[str, float] = {}
        self.cpu_s_at_mark: dict[str, float] = {}
        self._cpu: dict[str, dict[int, list[float]]] = {}  # name → pid → [first, last]
        self._host_start: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ward-sampler", daemon=True)

    def _round(self) -> None:
        with self._lock:
            self._sample()

    def mark(self) -> None:
        """Sample now and keep the CPU seconds so far (:attr:`cpu_s_at_mark`)."""
        with self._lock:
            self._sample()
            self.cpu_s_at_mark = dict(self.cpu_s)

    @staticmethod
    def _host_busy_s() -> float:
        import psutil

        times = psutil.cpu_times()
        return sum(times) - times.idle - getattr(times, "iowait", 0.0) - getattr(times, "guest", 0.0) \
            - getattr(times, "guest_nice", 0.0)

    def _sample(self) -> None:
        import psutil

        busy = self._host_busy_s()
        if self._host_start is None:
            self._host_start = busy
        for name, pids in self.targets().items():
            rss = 0.0
            for pid in pids:
                try:
                    process = psutil.Process(pid)
                    rss += process.memory_info().rss / 2**30
                    times = process.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                cpu = times.user + times.system
                self._cpu.setdefault(name, {}).setdefault(pid, [cpu, cpu])[1] = cpu
            self.peak_rss[name] = round(max(rss, self.peak_rss.get(name, 0.0)), 2)
        for name, seen in self._cpu.items():
            self.cpu_s[name] = round(sum(last - first for first, last in seen.values()), 1)
        mine = sum(v for k, v in self.cpu_s.items() if k != "other")
        self.cpu_s["other"] = round(max(0.0, busy - self._host_start - mine), 1)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._round()

    def start(self) -> Sampler:
        self._round()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._round()


def host_quiet(targets, timeout_s: float, window_s: float = 3.0, busy_s: float = 0.3) -> float | None:
    """Wait until the rest of the host (outside ``targets()``) used less
    than ``busy_s`` CPU seconds in ``window_s`` (another engineer's tests
    on a shared machine); returns the seconds waited, ``None`` when it was
    still busy after ``timeout_s`` (measured anyway, and the ``other`` CPU
    column shows it)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        sampler = Sampler(targets)
        sampler.mark()
        time.sleep(window_s)
        sampler.mark()
        if sampler.cpu_s_at_mark.get("other", 0.0) < busy_s:
            return round(time.monotonic() - started, 1)
    return None


def process_tree(pid: int) -> list[dict]:
    """``pid`` and its descendants: ``{"pid", "name", "rss_gib"}`` each."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    tree = []
    for process in processes:
        try:
            tree.append({"pid": process.pid, "name": process.name(),
                         "rss_gib": round(process.memory_info().rss / 2**30, 2)})
        except psutil.NoSuchProcess:
            continue
    return tree


def policy_name(pid: int) -> str:
    """The kernel's scheduling policy (and nice value) of process ``pid``."""
    try:
        policy = POLICY_NAMES.get(os.sched_getscheduler(pid), str(os.sched_getscheduler(pid)))
        nice = os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return "gone"
    return policy + (f", nice {nice}" if nice else "")


def worker_ready(base_url: str, name: str, timeout_s: float) -> float:
    """Seconds until ``/readyz`` shows the worker ``name``'s engine alive
    (its heartbeat in Redis, clinical/rerun/lane.py).

    Raises:
        TimeoutError: not within ``timeout_s``.
    """
    import httpx

    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            lane = httpx.get(base_url + "/readyz", timeout=30).json().get("rerun_lane", {})
            if any(str(w.get("worker", "")).startswith(name + "@") and w.get("alive")
                   for w in lane.get("workers", [])):
                return round(time.monotonic() - started, 1)
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(1)
    raise TimeoutError(f"re-run worker {name} not ready in {timeout_s} s")


def rerun_queue_purge(redis_url: str, prefix: str) -> int:
    """Delete the ``rerun`` queue and the unacknowledged set under the
    broker key prefix ``prefix``; returns the keys removed."""
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = [*client.scan_iter(match=f"{prefix}rerun*"), *client.scan_iter(match=f"{prefix}unacked*")]
    return client.delete(*keys) if keys else 0


def summary(name: str, result: dict) -> dict:
    """One configuration's figures (ms, s, counts) for the table."""
    from bench.stats import percentiles

    rows = result["rows"]
    ok = [r for r in rows if not r["error"] and r["ttft_ms"] is not None]
    ttft, e2e = percentiles([r["ttft_ms"] for r in ok]), percentiles([r["e2e_ms"] for r in ok])
    queued = [r for r in ok if r["verification"] == "pending"]
    verified = [r["verified_s"] for r in queued if r["verified_s"] is not None]
    waited = percentiles(verified)
    # Output rate of one translation: the tokens after the first over the
    # time from the first token to the done frame (tokens/s; the checks that
    # run before "done" included, so below the engine's decode rate).
    output_rate = percentiles([(r["tokens_out"] - 1) / ((r["e2e_ms"] - r["ttft_ms"]) / 1000) for r in ok
                          if (r.get("tokens_out") or 0) > 1 and r["e2e_ms"] > r["ttft_ms"]])
    return {"config": name, "priority": result["priority"], "translations": len(ok),
            "errors": len(rows) - len(ok), "error_samples": sorted({r["error"] for r in rows if r["error"]})[:3],
            "ttft_p50": ttft["p50"], "ttft_p95": ttft["p95"], "e2e_p50": e2e["p50"], "e2e_p95": e2e["p95"],
            "reruns_queued": len(queued), "verified": len(verified),
            "verification_failed": sum(1 for r in queued if r["verification_failed"]),
            "verified_p50_s": waited["p50"], "verified_p95_s": waited["p95"],
            "verified_max_s": max(verified) if verified else None,
            "waiting_at_end": sum(1 for r in queued if r["verified_s"] is None and not r["verification_failed"]),
            "output_tps_p50": round(output_rate["p50"], 1) if output_rate["p50"] is not None else None,
            "verified_during_load": sum(1 for r in queued if r["verified_s"] is not None
                                        and r["done_at"] + r["verified_s"] <= result["load_s"]),
            "load_s": result["load_s"], "drain_s": result["drain_s"],
            "peak_rss_gib": result["peak_rss_gib"], "cpu_s_during_load": result["cpu_s_during_load"],
            "policies": result["policies"], "worker_ready_s": result["worker_ready_s"],
            "worker_tree": result.get("worker_tree", []), "quiet_wait_s": result.get("quiet_wait_s")}


def ratios(summaries: list[dict]) -> dict[str, dict[str, float | None]]:
    """TTFT and E2E P50/P95 of each configuration over the baseline's."""
    base = next((s for s in summaries if s["config"] == BASELINE), None)
    out = {}
    for s in summaries:
        out[s["config"]] = {key: (round(s[key] / base[key], 2) if base and s.get(key) and base.get(key) else None)
                            for key in ("ttft_p50", "ttft_p95", "e2e_p50", "e2e_p95", "output_tps_p50")}
    return out


def _cell(value, unit: str = "") -> str:
    return "–" if value is None else f"{value}{unit}"


def render(report: dict) -> str:
    """The Markdown report."""
    summaries, ratio = report["summary"], report["ratios"]
    lines = [
        ("# A ward at a clinician's pace: verification while clinicians translate" if report.get("pace_s")
         else "# A ward at once: the re-run worker's CPU priority"), "",
        f"Command: `{report['command'].strip()}`. Host: {report['host']}. The stack as `make run` starts it: "
        f"`python -m clinical.serve` ({report['engine']}), Redis, and per configuration no re-run worker, or a real "
        f"Celery worker ({report['rerun_engine']}) at `RERUN_CPU_PRIORITY=normal` or `idle`, measured once its "
        f"engine reported ready. {report['clients']} logged-in clinicians, one WebSocket each, translate "
        f"up to {report['per_client']} laymaker-dev sentences each (`ORIGINAL`, the same in every configuration) "
        + (f"one every {report['pace_s']} s each, for {report['max_load_s']} s"
           if report.get("pace_s") else "in a closed loop")
        + f"; TTFT and E2E at the client. The sockets then wait up to {report['drain_s']} s for the "
        "verifications the gate queued (done → verified at the client)."
        + (f" Before the first configuration, one unmeasured warm-up pass of the same load "
           f"({report['warmup_pass']['load_s']} s, TTFT P50 / P95 {report['warmup_pass']['ttft_p50']} / "
           f"{report['warmup_pass']['ttft_p95']} ms): the first pass after start is slower."
           if report.get("warmup_pass") else ""), "",
        "| configuration | worker policy | translations (errors) | TTFT P50 / P95 (ms) | TTFT P50 / P95 vs no "
        "worker | E2E P50 / P95 (ms) | E2E P50 / P95 vs no worker | re-runs queued | verified / failed by the "
        "end (verified during the load) | done → verified P50 / P95 (s) | load (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        r = ratio[s["config"]]
        lines.append(
            f"| {s['config']} | {s['policies'].get('worker', '–')} | {s['translations']} ({s['errors']}) | "
            f"{_cell(s['ttft_p50'])} / {_cell(s['ttft_p95'])} | {_cell(r['ttft_p50'], '×')} / "
            f"{_cell(r['ttft_p95'], '×')} | {_cell(s['e2e_p50'])} / {_cell(s['e2e_p95'])} | "
            f"{_cell(r['e2e_p50'], '×')} / {_cell(r['e2e_p95'], '×')} | {s['reruns_queued']} | "
            + (f"{s['verified']} / {s['verification_failed']} ({s['verified_during_load']}) | " if s["priority"]
               else "– | ")
            + f"{_cell(s['verified_p50_s'])} / {_cell(s['verified_p95_s'])} | {s['load_s']} |")
    lines += ["", "| configuration | output tokens/s P50, first token to done (vs no worker) | done → verified max (s) | "
              "still waiting at the end |", "|---|---|---|---|"]
    for s in summaries:
        lines.append(f"| {s['config']} | {_cell(s.get('output_tps_p50'))} ({_cell(ratio[s['config']].get('output_tps_p50'), '×')}) | "
                     f"{_cell(s.get('verified_max_s'))} | {s.get('waiting_at_end', '–') if s['priority'] else '–'} |")
    processes = [p for p in ("daphne", "worker", "engine core") if any(p in s["peak_rss_gib"] for s in summaries)]
    cpus = processes + [p for p in ("bench clients", "other") if any(p in s["cpu_s_during_load"] for s in summaries)]
    lines += ["", "Peak resident memory (GiB) per process (the engine core with its own children) and CPU seconds "
              "used during the load (`other`: the rest of the host, from its total busy time):", "",
              "| configuration | " + " | ".join(f"{p} RSS" for p in processes) + " | "
              + " | ".join(f"{p} CPU s" for p in cpus) + " |",
              "|---|" + "---|" * (len(processes) + len(cpus))]
    for s in summaries:
        lines.append(f"| {s['config']} | " + " | ".join(_cell(s["peak_rss_gib"].get(p)) for p in processes) + " | "
                     + " | ".join(_cell(s["cpu_s_during_load"].get(p)) for p in cpus) + " |")
    notes = [f"{s['config']}: worker ready {s['worker_ready_s']} s after start, engine core "
             f"{s['policies'].get('engine core', '–')}" for s in summaries if s["priority"]]
    if notes:
        lines += ["", "Workers: " + "; ".join(notes) + "."]
    quiet = [f"{s['config']} {s['quiet_wait_s']} s" if s["quiet_wait_s"] is not None else f"{s['config']} never"
             for s in summaries if "quiet_wait_s" in s]
    if quiet:
        lines += ["", "Rest of the host quiet (under 0.3 CPU s in 3 s) before each load after: " + ", ".join(quiet) + "."]
    errors = [f"{s['config']}: {', '.join(s['error_samples'])}" for s in summaries if s["errors"]]
    if errors:
        lines += ["", "Errors: " + "; ".join(errors) + "."]
    if report.get("reading"):
        lines += ["", report["reading"]]
    return "\n".join(lines) + "\n"


def host_line() -> str:
    import psutil

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"`{socket.gethostname()}`, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
            f"{platform.machine()}, load average at start {load}")


def run_config(name: str, priority: str | None, server, env: dict[str, str], sessions: list[str],
               texts: list[list[str]], args, log_dir: Path, prefix: str) -> dict:
    """One configuration: its worker (if any) started and awaited, the load,
    the drain (none without a worker), the worker stopped."""
    from bench.processes import CeleryWorker, engine_core_pids

    rerun_queue_purge(env["REDIS_URL"], prefix)
    worker, ready_s = None, None
    if priority is not None:
        worker = CeleryWorker(env | {"RERUN_CPU_PRIORITY": priority}, log_dir / f"worker-{priority}.log",
                              f"ward-{priority}")
        try:
            ready_s = worker_ready(server.base_url, f"ward-{priority}", args.ready_timeout_s)
        except TimeoutError:
            tail = worker.logs()[-3000:]
            worker.stop(10)
            raise RuntimeError(f"worker {priority} not ready:\n{tail}") from None

    def targets() -> dict[str, list[int]]:
        """Daphne; the worker's main process; its engine core with that
        process's own children; this benchmark (the clients)."""
        found = {"daphne": [server.pid], "bench clients": [os.getpid()]}
        if worker is not None and worker.process.poll() is None:
            found["worker"] = [worker.pid]
            cores = engine_core_pids(worker.pid)
            if cores:
                found["engine core"] = [cores[0], *(p["pid"] for p in process_tree(cores[0])[1:])]
        return found

    policies = {}
    for process, pids in targets().items():
        if process not in ("daphne", "bench clients"):
            policies[process] = policy_name(pids[0])
    tree = process_tree(worker.pid) if worker is not None else []
    quiet_wait_s = host_quiet(targets, args.quiet_timeout_s)
    sampler = Sampler(targets).start()
    try:
        result = asyncio.run(ward_load(server, sessions, texts, args.max_load_s,
                                       args.drain_s if worker is not None else 0, sampler.mark, args.pace_s))
    finally:
        sampler.stop()
        if worker is not None:
            worker.stop(args.worker_stop_s)
    print(f"[ward] {name}: {len(result['rows'])} translations in {result['load_s']} s, drain "
          f"{result['drain_s']} s", flush=True)
    return result | {"priority": priority, "peak_rss_gib": sampler.peak_rss,
                     "cpu_s_during_load": sampler.cpu_s_at_mark,
                     "policies": policies, "worker_ready_s": ready_s, "worker_tree": tree,
                     "quiet_wait_s": quiet_wait_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ward", description="A ward of clinicians translating at once.")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--per-client", type=int, default=3, help="sentences each clinician translates")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--max-load-s", type=float, default=300, help="no translation is sent after this")
    parser.add_argument("--pace-s", type=float, default=0,
                        help="each clinician sends one sentence every this many seconds (0: a closed loop)")
    parser.add_argument("--drain-s", type=float, default=180, help="wait this long at most for verifications")
    parser.add_argument("--ready-timeout-s", type=float, default=600)
    parser.add_argument("--warmup-timeout-s", type=float, default=600)
    parser.add_argument("--worker-stop-s", type=float, default=20)
    parser.add_argument("--quiet-timeout-s", type=float, default=180,
                        help="wait at most this long for the rest of the host to go quiet before each load")
    parser.add_argument("--engine", choices=("default", "fake"), default="default",
                        help="fake: both engines fake (no model), to check the harness")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "ward"))
    parser.add_argument("--warmup-pass", action=argparse.BooleanOptionalAction, default=True,
                        help="one unmeasured pass of the same load first (the first pass after start is slower)")
    parser.add_argument("--render", metavar="JSON", help="only write the Markdown of an earlier report")
    args = parser.parse_args(argv)
    if args.render:
        report = json.loads(Path(args.render).read_text(encoding="utf-8"))
        Path(args.render).with_suffix(".md").write_text(render(report), encoding="utf-8")
        return 0
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; choose from {list(CONFIGS)}")
    began = time.perf_counter()
    host = host_line()

    os.environ["REDIS_URL"] = subprocess.run([sys.executable, str(ROOT / "scripts" / "ensure_redis.py")],
                                             capture_output=True, text=True, check=True).stdout.strip()
    fake = args.engine == "fake"
    if not fake:  # the worker's fp32 copy of the default model, as make run makes it (once)
        subprocess.run([sys.executable, "-m", "inference.weights", "prepare", "--with-default-hf"],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    from bench.drivers import prepare_stack, redis_cleanup
    from bench.processes import READY_TIMEOUT_S, DaphneServer, readyz_wait

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per /readyz poll otherwise

    scratch = Path(tempfile.mkdtemp(prefix="ward-"))
    run = uuid.uuid4().hex[:8]
    env, sessions = prepare_stack(args.database_url or f"sqlite:///{scratch}/db.sqlite3", args.clients, run)
    if fake:
        env |= {"INFERENCE_ENGINE": "fake", "RERUN_ENGINE": "fake", "FAKE_ENGINE_TOKEN_DELAY_S": "0.02",
                "PROMPT_CLUSTER_WARMUP": "0", "CONFIDENCE_THRESHOLD": "1.01"}
    texts = ward_texts(args.clients, args.per_client)
    results = []
    server = DaphneServer(env, scratch / "daphne.log")
    try:
        server.wait_ready(300)
        ready = readyz_wait(server.base_url, 200, READY_TIMEOUT_S)[1]  # the engine loaded and warm
        engine = f"{ready.get('engine')}, {Path(str(ready.get('model'))).name}, {ready.get('precision')}"
        if not fake:
            deadline = time.monotonic() + args.warmup_timeout_s
            while WARMED not in server.logs() and time.monotonic() < deadline:
                time.sleep(1)
        warmup = None
        if args.warmup_pass:
            print(f"[ward] warm-up pass ({time.perf_counter() - began:.0f} s)", flush=True)
            passed = asyncio.run(ward_load(server, sessions, texts, args.max_load_s, 0, pace_s=args.pace_s))
            warmup = summary("warm-up pass", passed | {"priority": None, "peak_rss_gib": {}, "cpu_s_during_load": {},
                                                       "policies": {}, "worker_ready_s": None})
            warmup = {k: warmup[k] for k in ("translations", "errors", "ttft_p50", "ttft_p95", "load_s")}
        for name in configs:
            print(f"[ward] {name} ({time.perf_counter() - began:.0f} s)", flush=True)
            result = run_config(name, CONFIGS[name], server, env, sessions, texts, args, scratch, f"bench-{run}:")
            results.append(summary(name, result) | {"rows": result["rows"]})
    finally:
        server.stop()
        redis_cleanup(run)
    summaries = [{k: v for k, v in r.items() if k != "rows"} for r in results]
    report = {"command": "python -m bench ward " + " ".join(sys.argv[1:] if argv is None else argv),
              "host": host, "engine": engine,
              "rerun_engine": "fake" if fake else "vLLM float32, the default model's fp32 copy",
              "clients": args.clients, "per_client": args.per_client, "drain_s": args.drain_s, "warmup_pass": warmup,
              "pace_s": args.pace_s, "max_load_s": args.max_load_s,
              "wall_s": round(time.perf_counter() - began, 1), "summary": summaries,
              "ratios": ratios(summaries), "runs": [{"config": r["config"], "rows": r["rows"]} for r in results]}
    out = Path(args.out)
    report_write(out.parent, out.name, report, render(report))
    print(render(report))
    print(f"[ward] wall {report['wall_s']} s; logs in {scratch}")
    return 0



# -- clinician_ttft: one clinician's time to the first word ----------------------
TTFT_CONFIGS = {"clusters": {}, "one-example": {"PROMPT_EXAMPLES": "0"}}
def ttft_sentences(n: int) -> list[str]:
    """First sentences (<= 40 words) of the Cochrane val abstracts, in order."""
    from bench.quality import cochrane_pairs
    from inference.examples import split_sentences

    picked = []
    for source, _ in cochrane_pairs():
        first = split_sentences(source)[0] if source.strip() else ""
        if 6 <= len(first.split()) <= 40:
            picked.append(first)
        if len(picked) == n:
            break
    return picked


async def one_clinician(server, session: str, texts: list[str]) -> list[dict]:
    """Send ``texts`` one after another over one socket; per request the
    client TTFT (ms), the server's TTFT (ms) and prompt tokens."""
    from websockets.asyncio.client import connect

    results = []
    async with connect(server.ws_url + "/ws/translate/", open_timeout=60, max_size=2**22,
                       additional_headers={"Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        for text in texts:
            sent = time.perf_counter()
            first, row = None, {"error": None}
            await socket.send(json.dumps({"type": "translate", "text": text}))
            async for message in socket:
                frame = json.loads(message)
                kind = frame.get("type")
                if kind == "token" and first is None:
                    first = time.perf_counter()
                elif kind == "done":
                    row.update(server_ttft_ms=frame.get("ttft_ms"), tokens_in=frame.get("tokens_in"),
                               tokens_out=frame.get("tokens_out"))
                    break
                elif kind in ("error", "cancelled"):
                    row["error"] = f"{kind}:{frame.get('code', '')}"
                    break
            row["ttft_ms"] = round((first - sent) * 1000, 1) if first is not None else None
            row["e2e_ms"] = round((time.perf_counter() - sent) * 1000, 1)
            results.append(row)
            await asyncio.sleep(0.5)  # a clinician reads before the next one
    return results


def ttft_run_config(name: str, env: dict[str, str], session: str, texts: list[str], log_dir: Path,
               warmup_timeout_s: float) -> dict:
    from django.db import connection
    from django.utils import timezone

    from bench.processes import READY_TIMEOUT_S, DaphneServer, readyz_wait
    from clinical.models import Translation

    since = timezone.now()
    server = DaphneServer(env | TTFT_CONFIGS[name], log_dir / f"daphne-{name}.log")
    try:
        server.wait_ready(300)
        started = time.perf_counter()
        readyz_wait(server.base_url, 200, READY_TIMEOUT_S)  # the engine loaded and warm
        warm_s = None
        if name == "clusters":
            deadline = time.monotonic() + warmup_timeout_s
            while WARMED not in server.logs() and time.monotonic() < deadline:
                time.sleep(1)
            warm_s = round(time.perf_counter() - started, 1) if WARMED in server.logs() else None
        rows = asyncio.run(one_clinician(server, session, texts))
    finally:
        server.stop()
    versions = sorted(set(Translation.objects.filter(created_at__gte=since).values_list("prompt_version", flat=True)))
    connection.close()
    return {"config": name, "warmup_s": warm_s, "rows": rows, "env": TTFT_CONFIGS[name], "prompt_versions": versions}


def ttft_summary(result: dict) -> dict:
    from bench.stats import percentiles

    ok = [r for r in result["rows"] if r["ttft_ms"] is not None and not r["error"]]
    ttft = percentiles([r["ttft_ms"] for r in ok])
    server = percentiles([r["server_ttft_ms"] for r in ok if r.get("server_ttft_ms") is not None])
    e2e = percentiles([r["e2e_ms"] for r in ok])
    tokens = percentiles([r["tokens_in"] for r in ok if r.get("tokens_in") is not None])
    return {"config": result["config"], "n": len(result["rows"]), "errors": len(result["rows"]) - len(ok),
            "ttft_p50": ttft["p50"], "ttft_p95": ttft["p95"], "server_ttft_p50": server["p50"],
            "server_ttft_p95": server["p95"], "e2e_p50": e2e["p50"], "e2e_p95": e2e["p95"],
            "prompt_tokens_mean": tokens["mean"], "warmup_s": result["warmup_s"],
            "prompt_versions": result["prompt_versions"]}


def ttft_render(report: dict) -> str:
    lines = [
        "# One clinician through the full stack: time to the first word", "",
        f"Command: `{report['command']}`. `python -m clinical.serve` (as `make run` starts it), default model, "
        f"default settings except the configuration's; {report['sentences']} sentences (first sentences of "
        "Cochrane val abstracts, not in the example pool) sent one after another by one logged-in clinician over "
        "one WebSocket, 0.5 s apart (another clinician for each configuration, so the per-user rate limit does not "
        "carry over); no re-run worker. TTFT at the client: translate frame sent → first token "
        "frame. Host: this project's 2-core machine.", "",
        "| configuration | n | errors | TTFT P50 / P95 (ms) | server TTFT P50 / P95 (ms) | E2E P50 / P95 (ms) | "
        "prompt tokens (mean) | warm-up (s) | prompt version |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report["summary"]:
        lines.append(f"| {s['config']} | {s['n']} | {s['errors']} | {s['ttft_p50']} / {s['ttft_p95']} | "
                     f"{s['server_ttft_p50']} / {s['server_ttft_p95']} | {s['e2e_p50']} / {s['e2e_p95']} | "
                     f"{s['prompt_tokens_mean']} | {s['warmup_s'] if s['warmup_s'] is not None else '–'} | "
                     f"{', '.join(s['prompt_versions'])} |")
    by = {s["config"]: s for s in report["summary"]}
    if "clusters" in by and "one-example" in by and by["one-example"]["ttft_p50"]:
        c, o = by["clusters"], by["one-example"]
        lines += ["", f"Ratio clusters / one-example: TTFT P50 {c['ttft_p50'] / o['ttft_p50']:.2f}x, P95 "
                      f"{c['ttft_p95'] / o['ttft_p95']:.2f}x. The cluster prompt is {c['prompt_tokens_mean']:.0f} "
                      f"tokens long on average against {o['prompt_tokens_mean']:.0f}, but all except the sentence "
                      "sit in a cached prefix restored from a KV snapshot."]
    return "\n".join(lines) + "\n"


def clinician_ttft_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench clinician_ttft",
                                     description="What one clinician waits for the first word.")
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--configs", default=",".join(TTFT_CONFIGS))
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--warmup-timeout-s", type=float, default=600)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "clinician-ttft"))
    args = parser.parse_args(argv)
    from bench.drivers import prepare_stack, redis_cleanup

    scratch = tempfile.mkdtemp(prefix="clinician-ttft-")
    database_url = args.database_url or f"sqlite:///{scratch}/db.sqlite3"
    run = uuid.uuid4().hex[:8]
    configs = [c for c in args.configs.split(",") if c]
    # A clinician of its own per configuration: the per-user rate limit
    # (TRANSLATE_RATE_PER_USER, 30/minute) counts across the runs, and a
    # fast host sent the second run's 11th sentence within the first's minute.
    env, sessions = prepare_stack(database_url, len(configs), run)
    texts = ttft_sentences(args.sentences)
    results = []
    try:
        for name, session in zip(configs, sessions):
            results.append(ttft_run_config(name, env, session, texts, Path(scratch), args.warmup_timeout_s))
    finally:
        redis_cleanup(run)
    report = {"command": "python -m bench clinician_ttft " + " ".join(sys.argv[1:] if argv is None else argv),
              "sentences": len(texts), "summary": [ttft_summary(r) for r in results], "runs": results}
    out = Path(args.out)
    report_write(out.parent, out.name, report, ttft_render(report))
    print(ttft_render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
