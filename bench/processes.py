"""Server processes on free loopback ports: the product's Daphne and the
engines' own OpenAI-compatible servers.

Shared by the test suite (``tests/conftest.py``) and the benchmarks. Every
server logs to a file and is stopped with SIGTERM (SIGKILL after 20 s).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


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
