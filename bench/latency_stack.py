"""Driver 2 of the latency benchmark: the full stack (real Daphne, real
WebSockets, logged-in clinicians, rows and audit events in the database),
and the database, users and environment it runs on."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import httpx

from bench.latency_drivers import N_CTX, Driver, engine_log_facts, model_paths
from bench.processes import DaphneServer
from bench.stats import RequestResult
from bench.workloads import Workload

USER_PASSWORD = "bench-password-not-for-production-1"


class StackDriver(Driver):
    """Real Daphne serving the product, driven over WebSockets.

    Output length is fixed per Daphne process (``MAX_OUTPUT_TOKENS``,
    ``INFERENCE_IGNORE_EOS``), so :meth:`request` restarts Daphne when a
    workload asks for another length.

    Client-side extras per request (``RequestResult.extra``): ``started_ms``
    (send → ``started`` frame: admission, database insert, channel-layer
    group join) and the server's own ``server_ttft_ms`` and
    ``server_queue_wait_ms`` from the ``done`` frame.

    Args:
        engine: ``llamacpp`` or ``vllm``.
        env: base environment of the Daphne process (database, Redis,
            key prefixes).
        sessions: session cookies of logged-in clinicians, used
            round-robin, one WebSocket per concurrent request.
        log_dir: folder for Daphne's logs.
    """

    kind = "stack"

    def __init__(self, engine: str, *, env: dict[str, str], sessions: list[str], log_dir: Path,
                 threads: int = 0, cpu_bind: str = "") -> None:
        self.engine = engine
        self.threads = threads
        self.cpu_bind = cpu_bind
        self.env = env
        self.sessions = sessions
        self.log_dir = log_dir
        self.server: DaphneServer | None = None
        self._output: tuple[int, bool] | None = None
        self._idle: list = []
        self._opened = 0
        self._lock = asyncio.Lock()
        self.settings = {}

    def _daphne_env(self, max_tokens: int, ignore_eos: bool) -> dict[str, str]:
        paths = model_paths()
        return self.env | {
            "INFERENCE_ENGINE": self.engine,
            "INFERENCE_MODEL": paths["gguf"] if self.engine == "llamacpp" else paths["hf"],
            "INFERENCE_N_CTX": str(N_CTX),
            "INFERENCE_THREADS": str(self.threads),
            "VLLM_CPU_OMP_THREADS_BIND": self.cpu_bind or "auto",
            "MAX_OUTPUT_TOKENS": str(max_tokens),
            "INFERENCE_IGNORE_EOS": "1" if ignore_eos else "",
            # The same engine work as the other drivers: no glossary
            # definitions generated after the text (up to GLOSSARY_MAX_TOKENS
            # more tokens per translation, which would hold the engine
            # while the next request waits); the page then shows the
            # vocabulary's definitions.
            "GLOSSARY_GENERATE": "0",
            # The same prompt as the other drivers (build_messages, one
            # request per text): the product's cluster prompt would split a
            # Cochrane abstract into sentences, one request each
            # (bench clinician_ttft measures that prompt through the stack).
            "PROMPT_EXAMPLES": "0",
            # Out of the way: this measures the stack, not its refusals.
            "ENGINE_MAX_QUEUE": "256",
            "TRANSLATE_RATE_PER_USER": "1000000/minute",
            "SOCKET_FRAME_RATE": "1000/second",
            # Sessions are shared round robin, so a user may run many at once.
            "USER_MAX_SOCKETS": "0",
            "USER_MAX_CONCURRENT_TRANSLATIONS": "0",
        }

    async def ensure(self, workload: Workload) -> None:
        """Daphne running with ``workload``'s output length, engine warm."""
        wanted = (workload.max_tokens, workload.ignore_eos)
        if self._output == wanted:
            return
        await self.stop()
        env = self._daphne_env(*wanted)
        self.server = DaphneServer(env, self.log_dir / f"daphne-{self.engine}-{wanted[0]}.log")
        server = self.server

        def ready() -> httpx.Response:
            server.wait_ready(300)
            return httpx.get(server.base_url + "/readyz", timeout=600)  # loads and warms the engine

        response = await asyncio.to_thread(ready)
        if response.status_code != 200:
            raise RuntimeError(f"stack not ready: {response.text[:500]}")
        self._output = wanted
        self.settings = {**response.json(), "engine_log": engine_log_facts(server.logs()),
                         **{k: env[k] for k in ("MAX_OUTPUT_TOKENS", "INFERENCE_IGNORE_EOS", "ENGINE_MAX_QUEUE",
                                                 "INFERENCE_THREADS", "GLOSSARY_GENERATE")}}

    async def _socket(self):
        from websockets.asyncio.client import connect

        async with self._lock:
            if self._idle:
                return self._idle.pop()
            session = self.sessions[self._opened % len(self.sessions)]
            self._opened += 1
        return await connect(
            self.server.ws_url + "/ws/translate/", open_timeout=60, max_size=2**22,
            additional_headers={"Cookie": f"sessionid={session}", "Origin": self.server.base_url})

    async def prepare(self, workload: Workload) -> None:
        await self.ensure(workload)

    async def request(self, text: str, workload: Workload) -> RequestResult:
        await self.ensure(workload)  # a no-op after prepare()
        socket = await self._socket()
        result = RequestResult(sent_s=time.perf_counter())
        reusable = False
        try:
            await socket.send(json.dumps({"type": "translate", "text": text}))
            started = False
            async for message in socket:
                now = time.perf_counter()
                frame = json.loads(message)
                kind = frame.get("type")
                if kind == "started":
                    started = True
                    result.extra["started_ms"] = (now - result.sent_s) * 1000
                elif kind == "token" and started:
                    result.token_times_s.append(now)
                elif kind == "done" and started:
                    result.output_tokens = frame["tokens_out"]
                    result.prompt_tokens = frame["tokens_in"]
                    result.extra["server_ttft_ms"] = frame["ttft_ms"]
                    result.extra["server_queue_wait_ms"] = frame["queue_wait_ms"]
                    reusable = True
                    break
                elif kind in ("error", "cancelled"):
                    result.error = f"{kind}:{frame.get('code', '')}"
                    break
                # anything else (the previous request's "verifying") is skipped
        except Exception as exc:  # noqa: BLE001 - counted as an error
            result.error = type(exc).__name__
        result.end_s = time.perf_counter()
        if reusable:
            self._idle.append(socket)
        else:
            await socket.close()
        return result

    async def stop(self) -> None:
        for socket in self._idle:
            await socket.close()
        self._idle, self._output = [], None
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
            self.server = None



def prepare_stack(database_url: str, n_users: int, run: str) -> tuple[dict[str, str], list[str]]:
    """Migrate the database, create ``n_users`` clinicians and their
    sessions. Returns (Daphne's environment, session cookies)."""
    os.environ["DATABASE_URL"] = database_url
    # Sessions outlive the run (the product's 15-minute idle timeout would
    # end them between the engines' turns).
    os.environ["SESSION_IDLE_TIMEOUT_S"] = "14400"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    call_command("migrate", verbosity=0, interactive=False)
    users = []
    clinicians = Group.objects.get_or_create(name="Clinician")[0]  # the role that may translate
    for i in range(n_users):
        user, created = get_user_model().objects.get_or_create(username=f"bench-clinician-{i}")
        if created or i == 0:
            if i == 0:
                user.set_password(USER_PASSWORD)  # clinician 0 logs in through the form
            else:
                user.set_unusable_password()
            user.save()
        user.groups.add(clinicians)
        users.append(user)
    sessions = []
    for user in users:
        client = Client()
        client.force_login(user)  # the session the login form creates, without a password hash each
        sessions.append(client.cookies["sessionid"].value)
    connection.close()
    from django.conf import settings

    env = dict(os.environ) | {
        "DATABASE_URL": database_url, "REDIS_URL": settings.REDIS_URL, "PYTHONUNBUFFERED": "1",
        "CHANNEL_PREFIX": f"bench-{run}", "CACHE_PREFIX": f"bench-{run}", "CELERY_KEY_PREFIX": f"bench-{run}:",
    }
    return env, sessions


def stack_rows(run_started, usernames: list[str]) -> dict:
    """Translations and audit rows the stack wrote for the bench clinicians
    since ``run_started`` (a timezone-aware datetime)."""
    from django.db import connection

    from clinical.models import AuditEvent, Translation

    try:
        translations = Translation.objects.filter(user__username__in=usernames, created_at__gte=run_started)
        audits = AuditEvent.objects.filter(actor__in=usernames, event_type="translation",
                                           created_at__gte=run_started)
        return {"translations": translations.count(),
                "completed": translations.filter(status="completed").count(),
                "audit_events": audits.count()}
    finally:
        connection.close()


def redis_cleanup(run: str) -> None:
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(match=f"*bench-{run}*"):
        client.delete(key)


