"""Load: 50 logged-in clinicians, each with a socket sending translation
after translation for 60 s, against one real Daphne with the fake engine
(30 tokens per answer at 50 tokens/s). Zero errors and zero lost audit
records are asserted; TTFT percentiles are printed (and written to
``var/reports/socket-load.json``), not asserted: timings belong to bench/.

The engine queue and the per-user rate are raised out of the way
(``ENGINE_MAX_QUEUE=64``, ``TRANSLATE_RATE_PER_USER``): this measures what
the web stack itself sustains, not the limits' refusals (tested elsewhere)."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time

import pytest
from django.test import Client
from websockets.asyncio.client import connect

from clinical.models import AuditEvent, Translation
from tests.conftest import ROOT, clinician_create, in_thread
from tests.data import laymaker_sentences

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SOCKETS = int(os.environ.get("LOAD_SOCKETS", "50"))
DURATION_S = float(os.environ.get("LOAD_DURATION_S", "60"))


async def clinician_loop(server, session: str, deadline: float, texts: list[str], offset: int) -> dict:
    """One clinician's socket: translate, wait for ``done``, repeat until
    ``deadline`` (monotonic s). TTFT is client-side: frame sent → first
    token frame (ms)."""
    result = {"done": 0, "errors": [], "ttft_ms": [], "e2e_ms": []}
    async with connect(server.ws_url + "/ws/translate/", open_timeout=60, additional_headers={
            "Cookie": f"sessionid={session}", "Origin": server.base_url}) as socket:
        n = offset
        while time.monotonic() < deadline:
            sent = time.perf_counter()
            await socket.send(json.dumps({"type": "translate", "text": texts[n % len(texts)]}))
            n += 1
            first = None
            async for message in socket:
                frame = json.loads(message)
                if frame["type"] == "token" and first is None:
                    first = time.perf_counter()
                elif frame["type"] == "done":
                    result["done"] += 1
                    result["ttft_ms"].append((first - sent) * 1000)
                    result["e2e_ms"].append((time.perf_counter() - sent) * 1000)
                    break
                elif frame["type"] in ("error", "cancelled"):
                    result["errors"].append(frame.get("code", frame["type"]))
                    break
    return result


def session_for(user) -> str:
    """A real session for ``user`` (what the login form creates, without
    50 password hashes)."""
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


async def test_fifty_sockets_for_sixty_seconds_lose_nothing(daphne_server, capsys):
    server = daphne_server(INFERENCE_ENGINE="fake", FAKE_ENGINE_TOKEN_DELAY_S="0.02", ENGINE_MAX_QUEUE="64",
                           TRANSLATE_RATE_PER_USER="100000/minute")
    users = await in_thread(lambda: [clinician_create(f"load-{i}", password=None) for i in range(SOCKETS)])
    sessions = await in_thread(lambda: [session_for(user) for user in users])
    texts = laymaker_sentences()

    load_avg_start = os.getloadavg()
    started = time.monotonic()
    results = await asyncio.gather(*(clinician_loop(server, session, started + DURATION_S, texts, i * 5)
                                     for i, session in enumerate(sessions)))
    wall_s = time.monotonic() - started

    done = sum(r["done"] for r in results)
    errors = [code for r in results for code in r["errors"]]
    ttft = [v for r in results for v in r["ttft_ms"]]
    e2e = [v for r in results for v in r["e2e_ms"]]
    report = {
        "sockets": SOCKETS, "duration_s": DURATION_S, "wall_s": round(wall_s, 1), "completed": done,
        "errors": len(errors), "requests_per_s": round(done / wall_s, 1),
        "ttft_ms": {f"p{q}": round(percentile(ttft, q), 1) for q in (50, 95, 99)},
        "e2e_ms": {f"p{q}": round(percentile(e2e, q), 1) for q in (50, 95, 99)},
        "load_avg_1m": {"start": load_avg_start[0], "end": os.getloadavg()[0]},
    }
    out = ROOT / "var" / "reports" / "socket-load.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    with capsys.disabled():
        print(f"\nsocket load: {json.dumps(report)}")

    assert errors == [], errors
    assert all(r["done"] > 0 for r in results), "a socket never completed a translation"
    rows = await in_thread(lambda: list(Translation.objects.values_list("request_id", "status")))
    assert len(rows) == done and {status for _, status in rows} == {"completed"}
    final = await in_thread(lambda: sorted(str(i) for i in AuditEvent.objects.filter(
        event_type="translation").values_list("request_id", flat=True)))
    assert final == sorted(str(request_id) for request_id, _ in rows)
