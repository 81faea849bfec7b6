"""Server processes on free loopback ports: the product's Daphne and the
engines' own OpenAI-compatible servers; the re-run worker (Celery); and
what the benchmarks and live tests read from running processes (vLLM's
engine-core children, resident memory, ``/readyz``).

Shared by the test suite (``tests/conftest.py``, ``tests/live/``) and the
benchmarks. Every server logs to a file and is stopped with SIGTERM
(SIGKILL after 20 s).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


GIB = 1024 ** 3
#: Seconds a benchmark waits for a server's /readyz 200: the engine loaded
#: and its example-cluster prefixes read (minutes on two cores when cold).
READY_TIMEOUT_S = 1800


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """A server subprocess on ``127.0.0.1:port`` with its log in a file.

    Args:
        command: argv; ``{port}`` in any item is replaced by the port.
        env: the process environment.
        log_path: file that receives stdout and stderr.
        ready_path: HTTP path that answers 200 once the server is ready.
    """

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path,
                 ready_path: str = "/") -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.ready_path = ready_path
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [part.replace("{port}", str(self.port)) for part in command],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout_s: float = 60) -> None:
        """Poll ``ready_path`` until it answers 200.

        Raises:
            RuntimeError: the process exited (its log tail is in the message).
            TimeoutError: not ready within ``timeout_s`` seconds.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.process.args[:3]} exited:\n{self.logs()[-3000:]}")
            try:
                if httpx.get(self.base_url + self.ready_path, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.process.args[:3]} not ready in {timeout_s} s:\n{self.logs()[-3000:]}")

    def logs(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


class DaphneServer(ServerProcess):
    """The product's server as ``make run`` starts it (``python -m
    clinical.serve``: Daphne with the engine preload, the sweeps and the
    drain on SIGTERM) on a free port."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        super().__init__(
            [sys.executable, "-m", "clinical.serve", "--host", "127.0.0.1", "--port", "{port}"],
            env, log_path, ready_path="/accounts/login/",
        )
        self.ws_url = f"ws://127.0.0.1:{self.port}"

    def login(self, username: str, password: str) -> str:
        """Log in through the real login form; returns the session cookie.

        Raises:
            RuntimeError: the form did not redirect (wrong password, lockout).
        """
        with httpx.Client(base_url=self.base_url) as client:
            client.get("/accounts/login/")
            response = client.post("/accounts/login/", data={
                "username": username, "password": password,
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            })
            if response.status_code != 302:
                raise RuntimeError(f"login failed with HTTP {response.status_code}: {response.text[:500]}")
            return client.cookies["sessionid"]


class CeleryWorker:
    """A real re-run worker in its own process: ``celery -A clinical worker
    -Q rerun --pool solo --concurrency 1`` as ``make run`` starts it, without
    Celery's heartbeat, mingle and gossip (a lone worker needs none), as
    ``<name>@<host>``, logging to ``log_path``."""

    def __init__(self, env: dict[str, str], log_path: Path, name: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "clinical", "worker", "-Q", "rerun",
             "--pool", "solo", "--concurrency", "1", "--without-heartbeat", "--without-mingle",
             "--without-gossip", "--loglevel", "INFO", "--hostname", f"{name}@%h"],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def logs(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no clean-up, no acknowledgement."""
        self.process.kill()
        self.process.wait()

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM (Celery's warm shutdown: the task in hand ends first),
        SIGKILL after ``timeout_s``; then any child still running (vLLM's
        engine core after a SIGKILL) is killed too."""
        import psutil

        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(children, timeout=10)
        self._log.close()


def engine_core_pids(pid: int) -> list[int]:
    """Pids of vLLM engine-core processes under process ``pid``, in start
    order (vLLM names them ``VLLM::EngineCore`` with setproctitle); ``[]``
    when there are none (llama.cpp runs in-process)."""
    import psutil

    found = []
    for child in sorted(psutil.Process(pid).children(recursive=True), key=_create_time):
        try:
            if "EngineCore" in child.name() or "EngineCore" in " ".join(child.cmdline()):
                found.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def _create_time(process) -> float:
    try:
        return process.create_time()
    except Exception:  # noqa: BLE001 - gone: sorted first, then skipped
        return 0.0


def rss_gib(pid: int, *, children: bool = True) -> float:
    """Resident memory (RSS) of ``pid``, with its children unless
    ``children`` is false, in GiB (0.0 for a process that is gone)."""
    import psutil

    try:
        process = psutil.Process(pid)
        total = process.memory_info().rss
        kids = process.children(recursive=True) if children else []
    except psutil.NoSuchProcess:
        return 0.0
    for child in kids:
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / GIB


def readyz_wait(base_url: str, status: int, timeout_s: float, *, interval_s: float = 0.2,
                answers: list[dict] | None = None) -> tuple[float, dict]:
    """Poll ``GET {base_url}/readyz`` until it answers ``status``; each
    answer on the way (``{"s": seconds from the call, "code": HTTP status}``
    and its JSON body) is appended to ``answers`` when given.

    Returns:
        (seconds from the call until that answer, its JSON body).

    Raises:
        TimeoutError: no such answer within ``timeout_s`` seconds (the last
            status seen is in the message).
    """
    started = time.monotonic()
    last: object = None
    with httpx.Client(timeout=60) as client:
        while time.monotonic() - started < timeout_s:
            try:
                response = client.get(base_url + "/readyz")
                last = response.status_code
                if answers is not None:
                    answers.append({"s": round(time.monotonic() - started, 1), "code": last} | response.json())
                if response.status_code == status:
                    return time.monotonic() - started, response.json()
            except httpx.TransportError as exc:
                last = type(exc).__name__
            time.sleep(interval_s)
    raise TimeoutError(f"/readyz did not answer {status} within {timeout_s} s (last: {last})")
