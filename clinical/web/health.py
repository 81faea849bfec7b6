"""Health endpoints for the load balancer and the process supervisor.

``GET /livez``: the process is alive and its event loop answers (200
always; no dependency is checked, so a Redis outage does not make a
supervisor restart every replica at once).

``GET /readyz``: whether this replica should receive traffic. Named checks,
each ``{"ok": bool, "ms": float, "error"?: str}``:

* ``engine``: the model is loaded and alive (the first call loads it and
  prefills the shared prompt, so ``scripts/run.sh`` and the tests use it to
  warm up). A dead engine (vLLM's engine-core process exited, llama.cpp
  failed in a decode) fails it with ``"error": "EngineDead"``, a ``reason``
  (e.g. ``"EngineCore exited with code -9"``), ``state`` (``dead`` or
  ``rebuilding``) and ``retry_in_s``, until the replica has rebuilt it
  (:func:`clinical.translation.engine.engine_get`);
* ``redis``: ``PING`` answers within 2 s (channel layer, broker, leases);
* ``database``: ``SELECT 1`` answers within 5 s.

200 ``{"status": "ready", ...}`` when all pass; 503 with ``"status":
"unavailable"`` (and ``error``, the first failing check's exception class)
when one fails, ``"status": "draining"`` once the replica is shutting
down (:mod:`clinical.runtime.drain`), or ``"status": "warming"`` while the
engine reads the example clusters' instruction prefixes (llama.cpp; a
request meanwhile would read its cluster's prefix first, seconds on two
cores), with ``warming``: ``{"prefixes_done", "prefixes"}``
(:func:`clinical.translation.engine.warmup_progress`). The body also carries ``engine_state``
(this replica's engine: ``state``, ``reason``, ``deaths``, ``rebuilds``) and
``rerun_lane`` (the re-run workers' engines as they last reported,
:func:`clinical.rerun.lane.lane_summary`); the lane is information, not a
check: a dead re-run lane delays verifications but does not make this
replica unfit for traffic. The details (checks, replica, engine, model and
worker names) go to staff and to loopback callers that did not come through
a proxy; anyone else gets ``{"status"}`` alone, with the same HTTP status,
which is all a load balancer reads.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import time

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from clinical.rerun import lane
from clinical.runtime import drain
from clinical.translation.engine import engine_get, engine_status, warmup_progress
from inference.base import EngineDead

REDIS_TIMEOUT_S = 2.0
DATABASE_TIMEOUT_S = 5.0


def livez(request: HttpRequest) -> JsonResponse:
    """``GET /livez``: 200 while the process serves requests."""
    return JsonResponse({"status": "alive", "replica": settings.REPLICA_ID})


async def _timed(check) -> tuple[dict, object]:
    started = time.perf_counter()
    try:
        value = await check()
    except Exception as exc:  # noqa: BLE001 - reported as a failed check
        failed = {"ok": False, "ms": round((time.perf_counter() - started) * 1000, 1),
                  "error": type(exc).__name__}
        if isinstance(exc, EngineDead):
            failed["reason"] = exc.reason
        return failed, None
    return {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 1)}, value


async def _redis_ping() -> None:
    client = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=REDIS_TIMEOUT_S,
                                     socket_connect_timeout=REDIS_TIMEOUT_S)
    try:
        await asyncio.wait_for(client.ping(), REDIS_TIMEOUT_S)
    finally:
        await client.aclose()


def _select_one() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


async def _database_ping() -> None:
    await asyncio.wait_for(database_sync_to_async(_select_one)(), DATABASE_TIMEOUT_S)


async def readyz(request: HttpRequest) -> JsonResponse:
    """``GET /readyz``: see the module docstring."""
    (engine_check, engine), (redis_check, _), (db_check, _), rerun_lane = await asyncio.gather(
        _timed(engine_get), _timed(_redis_ping), _timed(_database_ping),
        asyncio.to_thread(lane.lane_summary))
    status = engine_status()
    if status is not None and not engine_check["ok"]:
        engine_check |= {"state": status.state, "reason": status.reason or engine_check.get("reason", ""),
                         "retry_in_s": status.retry_in_s}
    checks = {"engine": engine_check, "redis": redis_check, "database": db_check}
    body: dict = {"status": "ready", "replica": settings.REPLICA_ID}
    if engine is not None:
        info = engine.info
        body |= {"engine": info.engine, "model": info.model, "precision": info.precision,
                 "device": info.device}
    body["checks"] = checks
    if status is not None:
        body["engine_state"] = status.as_dict()
    body["rerun_lane"] = rerun_lane
    failed = [check for check in checks.values() if not check["ok"]]
    if failed:
        body["status"] = "unavailable"
        body["error"] = failed[0]["error"]
        if failed[0].get("reason"):
            body["reason"] = failed[0]["reason"]
    elif drain.is_draining():
        body["status"] = "draining"
    elif (warming := warmup_progress()) is not None:
        body["status"] = "warming"
        body["warming"] = {"prefixes_done": warming.prefixes_done, "prefixes": warming.prefixes}
    code = 200 if body["status"] == "ready" else 503
    if not await _readiness_detail_allowed(request):
        body = {"status": body["status"]}
    return JsonResponse(body, status=code)


async def _readiness_detail_allowed(request: HttpRequest) -> bool:
    """Staff, or a loopback caller not behind a proxy (the supervisor, the
    scripts), read /readyz's details; model and worker names are not for
    anonymous callers."""
    if _loopback_direct(request):
        return True
    user = await request.auser()
    return bool(user.is_authenticated and user.is_staff)


def _loopback_direct(request: HttpRequest) -> bool:
    # Any proxy header (RFC 7239 Forwarded too) means the client is not here.
    if any(request.headers.get(name) for name in ("Forwarded", "X-Forwarded-For", "X-Real-IP")):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics`` in the Prometheus text format
    (:mod:`clinical.runtime.metrics` lists the metrics).

    Access: with ``METRICS_TOKEN`` set, ``Authorization: Bearer <token>`` is
    required (401 otherwise); unset, only loopback clients that did not come
    through a proxy (no ``Forwarded``/``X-Forwarded-For``/``X-Real-IP``) are answered (403
    otherwise).
    """
    token = settings.METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            response = HttpResponse("A valid bearer token is required.\n", status=401,
                                    content_type="text/plain")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    elif not _loopback_direct(request):
        return HttpResponse("Metrics are served to loopback clients only (set METRICS_TOKEN).\n",
                            status=403, content_type="text/plain")
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
