"""Prometheus metrics (prometheus-client), served at ``GET /metrics``.

Each replica is its own process with its own engine and exposes its own
metrics; Prometheus scrapes every replica directly (one target per
``host:port``, not through nginx, which refuses ``/metrics``) and sums
across them (``sum by (outcome) (rate(clinical_translation_requests_total[5m]))``).
Counters start at 0 when a replica restarts; ``rate()`` handles that.

Metrics (names and units follow the Prometheus conventions: seconds,
``_total`` for counters):

* ``clinical_translation_requests_total{outcome, source}``: finished
  requests by final status (``completed``, ``cancelled``, ``error``,
  ``rejected``; ``unavailable`` when the database or Redis could not record
  it), counted from the one audit record each request ends with, in the
  process that wrote it (the orphan sweep counts ``error`` where it runs);
* ``clinical_translation_ttft_seconds``: received → first token (TTFT);
* ``clinical_translation_latency_seconds``: received → last token
  (end-to-end latency of completed translations);
* ``clinical_translation_output_tokens_total``;
* ``clinical_engine_queue_depth``: requests queued or running in this
  process's engine now;
* ``clinical_rerun_queue_length``: tasks waiting in the Celery ``rerun``
  queue (Redis list length, shared by all replicas; NaN when Redis is down);
* ``clinical_inflight_translations``: streams this replica holds leases for;
* ``clinical_replica_draining``: 1 while the replica shuts down.

Access: with ``METRICS_TOKEN`` set, ``Authorization: Bearer <token>`` is
required (401 otherwise); unset, only loopback clients that did not come
through a proxy (no ``X-Forwarded-For``/``X-Real-IP``) are answered (403
otherwise).
"""

from __future__ import annotations

import hmac
import ipaddress
import math

import redis
from django.conf import settings
from django.db.models.signals import post_save
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from clinical.broker import broker_key, broker_redis

REQUESTS = Counter("clinical_translation_requests", "Translation requests by final outcome.",
                   ["outcome", "source"])
TTFT = Histogram("clinical_translation_ttft_seconds", "Time to first token, from the request's arrival.",
                 buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30))
LATENCY = Histogram("clinical_translation_latency_seconds",
                    "End-to-end latency of completed translations: arrival to last token.",
                    buckets=(0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120))
OUTPUT_TOKENS = Counter("clinical_translation_output_tokens", "Output tokens of finished translations.")


def _engine_queue_depth() -> float:
    from clinical import engine

    current = engine._engine
    return float(current.queue_depth()) if current is not None else 0.0


def _inflight() -> float:
    from clinical import replica

    return float(replica.inflight_count())


def _draining() -> float:
    from clinical import drain

    return 1.0 if drain.is_draining() else 0.0


Gauge("clinical_engine_queue_depth", "Requests queued or running in this process's engine.") \
    .set_function(_engine_queue_depth)
Gauge("clinical_inflight_translations", "Translations this replica is streaming.").set_function(_inflight)
Gauge("clinical_replica_draining", "1 while this replica drains before shutting down.").set_function(_draining)


def rerun_queue_keys() -> list[str]:
    """Redis keys of the Celery ``rerun`` queue: kombu's Redis transport
    keeps one list per priority step (``rerun``, ``rerun\\x06\\x163`` ...),
    under the broker's ``global_keyprefix``."""
    from kombu.transport.redis import PRIORITY_STEPS, Channel

    return [broker_key("rerun" if step == 0 else f"rerun{Channel.sep}{step}") for step in PRIORITY_STEPS]


def rerun_queue_length() -> float:
    """Tasks waiting in the ``rerun`` queue (NaN if Redis cannot be read)."""
    try:
        with broker_redis(timeout_s=1).pipeline(transaction=False) as pipe:
            for key in rerun_queue_keys():
                pipe.llen(key)
            return float(sum(pipe.execute()))
    except (redis.RedisError, OSError):
        return math.nan


class _RerunQueueCollector:
    """Reads the queue length at scrape time."""

    def describe(self):
        return []

    def collect(self):
        yield GaugeMetricFamily("clinical_rerun_queue_length",
                                "Tasks waiting in the Celery rerun queue (all replicas).",
                                value=rerun_queue_length())


REGISTRY.register(_RerunQueueCollector())


def request_observe(*, outcome: str, source: str, ttft_ms: float | None = None,
                    total_ms: float | None = None, tokens_out: int | None = None) -> None:
    """Count one finished request (timings in ms, as stored)."""
    REQUESTS.labels(outcome=outcome, source=source or "unknown").inc()
    if ttft_ms is not None:
        TTFT.observe(ttft_ms / 1000)
    if outcome == "completed" and total_ms is not None:
        LATENCY.observe(total_ms / 1000)
    if tokens_out:
        OUTPUT_TOKENS.inc(tokens_out)


def _on_audit_event(sender, instance, created: bool, **kwargs) -> None:
    """``post_save`` of AuditEvent: count each translation event when its
    record is written (inside the transaction that finalises the request;
    the rare rolled-back one is counted too)."""
    if created and instance.event_type == "translation":
        request_observe(outcome=instance.outcome, source=instance.source, ttft_ms=instance.ttft_ms,
                        total_ms=instance.total_ms, tokens_out=instance.tokens_out)


def connect_signals() -> None:
    """Called from ``ClinicalConfig.ready``."""
    post_save.connect(_on_audit_event, sender="clinical.AuditEvent", dispatch_uid="clinical.metrics.audit")


def _loopback_direct(request: HttpRequest) -> bool:
    if request.headers.get("X-Forwarded-For") or request.headers.get("X-Real-IP"):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics`` in the Prometheus text format (see the module
    docstring for access)."""
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
