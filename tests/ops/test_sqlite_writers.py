"""Two processes writing one SQLite file, as `make run` does (Daphne stores
a translation while the re-run worker stores a verified text): with the
project's database settings neither write is lost.

Each writer process reads inside a transaction and then writes, the pattern
of the services (look the row up, then save it). Under SQLite's default
deferred transactions the second of two such writers fails at once with
"database is locked" (the busy timeout does not apply to a read transaction
that must become a write one); the control test performs exactly that
fault, so the first test cannot pass by accident.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

WRITER = r"""
import os, sys, time
import django
django.setup()
from django.db import connection, transaction
mode = os.environ.get("WRITER_TRANSACTION_MODE")
if mode:
    connection.settings_dict["OPTIONS"]["transaction_mode"] = mode
    connection.transaction_mode = mode
go = sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.01)
try:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM writes")
            cursor.fetchone()
        time.sleep(0.5)  # the other writer reads meanwhile
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO writes (who) VALUES (%s)", [sys.argv[1]])
except Exception as exc:
    print(type(exc).__name__, exc)
    sys.exit(3)
"""


def _run_two_writers(tmp_path: Path, *, transaction_mode: str | None) -> tuple[list[int], list[str], int]:
    """Start two writer processes on one SQLite file and release them together.

    Returns:
        (exit codes, their outputs, rows in the table afterwards).
    """
    db = tmp_path / "writers.sqlite3"
    with sqlite3.connect(db) as conn:
        # WAL is persistent: `make run`'s migrate converts the file before
        # Daphne and the worker open it. Two processes converting a new file
        # at once both hold a shared lock and want an exclusive one, and
        # SQLite refuses one of them at once ("database is locked") to avoid
        # a deadlock: a race of this test's set-up, not of the product.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE writes (id INTEGER PRIMARY KEY, who TEXT)")
    go = tmp_path / "go"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "clinical.settings",
        "DATABASE_URL": f"sqlite:///{db}",
        "PYTHONPATH": str(ROOT),
    }
    if transaction_mode:
        env["WRITER_TRANSACTION_MODE"] = transaction_mode
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, who, str(go)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for who in ("daphne", "worker")
    ]
    time.sleep(3)  # both have imported Django and wait for the signal
    go.touch()
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT count(*) FROM writes").fetchone()[0]
    return [p.returncode for p in procs], outputs, rows


def test_two_processes_reading_then_writing_both_commit(tmp_path):
    codes, outputs, rows = _run_two_writers(tmp_path, transaction_mode=None)
    assert codes == [0, 0], outputs
    assert rows == 2


def test_deferred_transactions_lose_a_write(tmp_path):
    """The control: SQLite's default mode fails one of the same two writers."""
    codes, outputs, rows = _run_two_writers(tmp_path, transaction_mode="DEFERRED")
    assert sorted(codes) == [0, 3], outputs
    assert "database is locked" in "".join(outputs)
    assert rows == 1


@pytest.mark.django_db
def test_project_database_runs_in_wal_mode():
    """Readers go on while one process writes (journal_mode=WAL)."""
    from django.conf import settings

    if not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        pytest.skip("the suite runs on PostgreSQL")
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
