"""Shared fixtures: users, the fake engine, and a real Daphne server.

Layout: fast tests sit beside the package they cover (tests/quality/,
tests/translation/, ...) and run in-process; the tests that start real
processes (Daphne, a Celery worker, a private Redis, chromium, nginx) sit in
tests/live/ and are marked ``live`` here, so ``pytest -m "not live"`` runs
the fast ones alone. A test outside tests/live/ that asks for a real-stack
fixture is refused at collection.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings

from bench.corpora import CorpusMissing, corpus_file
from bench.processes import CeleryWorker, free_port
from bench.processes import DaphneServer as _DaphneServer
from clinical.translation.engine import engine_set
from inference.fake_engine import FakeEngine

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "correct-horse-battery-staple-42"


SESSION_PREFIX = f"test-{uuid.uuid4().hex[:8]}"

#: Fixtures that start real processes: their tests belong in tests/live/.
LIVE_FIXTURES = frozenset({"stack_env", "daphne_server", "celery_worker_process", "private_redis",
                           "shared_fake_server"})


def pytest_configure(config):
    """Stop at once, with one line, when the clinical text in data/ is missing
    (every module of the suite reads it). llama.cpp engines keep their prefix
    snapshots in memory only (``INFERENCE_PREFIX_STATE_DIR=off``) unless a
    test gives them a folder: a state left by another test would skip the
    prefix evaluations that tests count."""
    os.environ["INFERENCE_PREFIX_STATE_DIR"] = "off"
    try:
        corpus_file("laymaker-dev.csv")
    except CorpusMissing as exc:
        pytest.exit(str(exc), returncode=4)


def pytest_collection_modifyitems(config, items):
    """Mark the tests under tests/live/ ``live``; refuse real-stack fixtures
    elsewhere; put the longest modules first.

    The order: modules with a ``slow`` test (a model or vLLM), then the other
    live modules, then the rest, each group in collection order. pytest-xdist
    hands a worker a module at a time in this order (``--dist loadfile
    --no-loadscope-reorder``, scripts/test.sh), so the long modules start
    early and the short ones fill in at the end, keeping both workers busy
    to the end."""
    live_dir = ROOT / "tests" / "live"
    misplaced = []
    rank: dict[Path, int] = {}
    for item in items:
        path = Path(str(item.path))
        live = live_dir in path.parents
        if live:
            item.add_marker(pytest.mark.live)
        elif LIVE_FIXTURES & set(getattr(item, "fixturenames", ())):
            misplaced.append(item.nodeid)
        rank[path] = min(rank.get(path, 2), 0 if item.get_closest_marker("slow") else 1 if live else 2)
    if misplaced:
        raise pytest.UsageError("tests that start real processes belong in tests/live/: " + ", ".join(misplaced))
    items.sort(key=lambda item: rank[Path(str(item.path))])  # stable: collection order within a group


@pytest.fixture(scope="session", autouse=True)
def isolated_broker_and_channel_keys():
    """Tasks and channel messages sent by the test process itself go to keys
    of this test session only, never to a real worker's queue."""
    settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = f"{SESSION_PREFIX}:"
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = SESSION_PREFIX
    settings.CACHE_PREFIX = SESSION_PREFIX  # rate-limit counters (clinical.translation.ratelimit)
    yield
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(match=f"*{SESSION_PREFIX}*"):
        client.delete(key)


@pytest.fixture(scope="session", autouse=True)
def quality_word_lists():
    """Load the readability, drug and HPO word lists once per test process
    (clinical.quality.measure.warm, a few seconds), as engine load does in a server,
    so no test's first translation pays for it inside its frame timeouts."""
    from clinical.quality.measure import warm

    warm()


def clinician_create(username: str, password: str | None = PASSWORD):
    """A user in the Clinician group, the only role that may translate
    (the group is made by migration 0004; a flushed test database lost it)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user(username, password=password)
    user.groups.add(Group.objects.get_or_create(name="Clinician")[0])
    return user


@pytest.fixture
def clinician(django_user_model):
    """The owner of the translations under test."""
    return clinician_create("dr-owner")


@pytest.fixture
def other_clinician(django_user_model):
    return clinician_create("dr-other")


@pytest.fixture
def fake_engine():
    """Install a fast fake engine as the process engine for this test."""
    engine = FakeEngine()
    engine_set(engine)
    yield engine
    engine_set(None)


def _closing(function, *args):
    from django.db import connection

    try:
        return function(*args)
    finally:
        connection.close()  # a thread's own connection would outlive the test database


async def in_thread(function, *args):
    """Run blocking code (ORM reads, HTTP logins) from an async test in a
    worker thread, closing that thread's database connection afterwards."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(_closing, thread_sensitive=False)(function, *args)


def in_worker_thread(function, *args):
    """The same from sync code that has an event loop running in its thread
    (Playwright's sync API), where Django refuses ORM calls."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_closing, function, *args).result()


_free_port = free_port


class DaphneServer(_DaphneServer):
    """A real ``daphne`` process serving clinical.asgi on a free port
    (:class:`bench.processes.DaphneServer`, logging in with the test
    password by default)."""

    def login(self, username: str, password: str = PASSWORD) -> str:
        return super().login(username, password)


def test_database_url() -> str:
    """URL of the test database, for the processes the tests start."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or 'localhost'}:{db['PORT'] or 5432}/{db['NAME']}"


def fake_echo(text: str) -> str:
    """The fast text the fake engine gives for ``text``: ``"Plain words: "``
    and the text, once per unit the product generates (an English note goes
    sentence by sentence, :func:`inference.examples.note_sentences`, its
    leading headings copied before the echo when ``PROMPT_HEADINGS`` is on),
    joined as the product joins them."""
    from django.conf import settings

    from inference.examples import heading_split, note_sentences

    def echo(unit_text: str) -> str:
        heading, rest = heading_split(unit_text) if settings.PROMPT_HEADINGS else ("", unit_text)
        return heading + "Plain words: " + rest.strip()

    return "".join((unit.separator if i else "") + echo(unit.text) for i, unit in enumerate(note_sentences(text)))


@pytest.fixture
def stack_env(transactional_db):
    """Environment shared by the processes of one test's stack (Daphne,
    Celery workers): the test database, the real Redis, and channel-layer
    and broker key prefixes of this test alone."""
    run = uuid.uuid4().hex[:8]
    env = _stack_env(run)
    previous = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"]
    settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = env["CELERY_KEY_PREFIX"]
    yield env
    settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = previous
    _delete_keys(f"*test-{run}*")


def _stack_env(run: str) -> dict[str, str]:
    """The environment of a stack whose Redis keys carry ``test-<run>``."""
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": test_database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CHANNEL_PREFIX": f"test-{run}",
        "CELERY_KEY_PREFIX": f"test-{run}:",
        "CACHE_PREFIX": f"test-{run}",
        "PYTHONUNBUFFERED": "1",
        # The sweeps' tests run them themselves; a server's own round would
        # race them. A stopped server drains for at most 5 s.
        "ORPHAN_SWEEP_INTERVAL_S": "0",
        "DRAIN_TIMEOUT_S": "5",
        # Each server would read the 24 cluster prefixes in the background
        # (about 25 s of CPU on SmolLM2) while the test works: the warm-up
        # has its own test (tests/translation/test_sentence_by_sentence.py).
        "PROMPT_CLUSTER_WARMUP": "0",
    })
    return env


def _delete_keys(pattern: str) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(match=pattern):
        client.delete(key)


@pytest.fixture(scope="session")
def _shared_fake_daphne(django_db_setup, tmp_path_factory):
    """One ``daphne_server(INFERENCE_ENGINE="fake")`` per test process
    (per pytest-xdist worker), started at its first use and stopped before
    the test database is dropped. Its cache keys (rate limits, leases, held
    places) carry ``CACHE_PREFIX`` ``test-shared-<run>-cache``."""
    run = f"shared-{uuid.uuid4().hex[:8]}"
    env = _stack_env(run) | {"CACHE_PREFIX": f"test-{run}-cache", "INFERENCE_ENGINE": "fake"}
    server = DaphneServer(env, tmp_path_factory.mktemp("shared-daphne") / "daphne.log")
    server.cache_prefix = env["CACHE_PREFIX"]
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
        _delete_keys(f"*test-{run}*")


def _wait_idle(server: DaphneServer, timeout_s: float = 30) -> None:
    """Wait until ``server`` streams nothing and its engine queue is empty
    (its ``/metrics``, answered to loopback clients)."""
    idle = ("clinical_inflight_translations 0.0", "clinical_engine_queue_depth 0.0")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        metrics = httpx.get(server.base_url + "/metrics", timeout=5).text
        if all(line in metrics for line in idle):
            return
        time.sleep(0.1)
    raise TimeoutError(f"the shared server still works after {timeout_s} s:\n{server.logs()[-3000:]}")


@pytest.fixture
def shared_fake_server(_shared_fake_daphne, transactional_db):
    """The test process's shared Daphne with the fake engine and the default
    settings, for tests that need no stack of their own: it keeps no state of
    a test for the next but what its process holds (metrics counters), so
    tests that read counters or change the server start their own
    (:func:`daphne_server`). After the test: the server is idle (its
    background work done before the database is emptied) and its cache keys
    are deleted, as a fresh server would find them."""
    yield _shared_fake_daphne
    _wait_idle(_shared_fake_daphne)
    _delete_keys(f"{_shared_fake_daphne.cache_prefix}:*")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (``item.report_call``), so a
    fixture's teardown can tell whether the test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def print_log_tails_if_failed(request, paths: list[Path], lines: int = 60) -> None:
    """After a failed test, print the last ``lines`` lines of each server
    log to stderr, so the failure report shows what the server did."""
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    for path in paths:
        if path.exists():
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            print(f"----- last {len(tail)} lines of {path.name} -----", *tail, sep="\n", file=sys.stderr)


def browser_messages(page) -> list[str]:
    """The page's console messages and WebSocket closes, as they happen."""
    messages: list[str] = []
    page.on("console", lambda message: messages.append(message.text))
    page.on("websocket", lambda socket: socket.on("close", lambda closed: messages.append(
        f"websocket closed: {closed.url}")))
    return messages


def print_page_if_failed(request, page, messages: list[str]) -> None:
    """After a failed test, print what the clinician saw (the page's
    ``#status``) and the page's console and socket messages to stderr."""
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    status = page.locator("#status")
    print("page status:", status.text_content() if status.count() else "(none)",
          "console and sockets:", *messages, sep="\n", file=sys.stderr)


@pytest.fixture
def daphne_server(stack_env, tmp_path, request):
    """Factory: ``daphne_server(INFERENCE_ENGINE="llamacpp", ...)`` starts a
    real Daphne on the test database and a real Redis; stopped at teardown
    (its log's tail printed when the test failed)."""
    servers: list[DaphneServer] = []

    def start(**env_overrides: str) -> DaphneServer:
        server = DaphneServer(stack_env | env_overrides, tmp_path / f"daphne-{len(servers)}.log")
        servers.append(server)
        server.wait_ready()
        return server

    yield start
    for server in servers:
        server.stop()
    print_log_tails_if_failed(request, [server.log_path for server in servers])


@pytest.fixture
def celery_worker_process(stack_env, tmp_path, request):
    """Factory: ``celery_worker_process(RERUN_ENGINE="fake", ...)`` starts a
    real Celery worker in its own process; stopped at teardown (its log's
    tail printed when the test failed)."""
    workers: list[CeleryWorker] = []

    def start(**env_overrides: str) -> CeleryWorker:
        name = f"rerun{len(workers)}"
        worker = CeleryWorker(stack_env | env_overrides, tmp_path / f"{name}.log", name)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()
    print_log_tails_if_failed(request, [worker.log_path for worker in workers])


class PrivateRedis:
    """A redis-server of this test alone (no persistence), so it can be
    killed and restarted (on the same port, empty) without touching the
    shared one."""

    def __init__(self, workdir: Path) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url).ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise TimeoutError("redis-server did not start")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def private_redis(tmp_path):
    """A :class:`PrivateRedis`, killed at teardown."""
    server = PrivateRedis(tmp_path)
    yield server
    server.kill()
