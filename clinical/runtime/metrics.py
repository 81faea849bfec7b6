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
* ``clinical_engine_up``: 1 while this process's engine serves, 0 while
  it is dead, rebuilding or not loaded yet;
* ``clinical_engine_rebuilds``: dead engines rebuilt since the process
  started (:mod:`inference.supervisor`);
* ``clinical_rerun_engine_up{worker}``, ``clinical_rerun_engine_rebuilds{worker}``,
  ``clinical_rerun_workers_reporting``: each re-run worker's engine as it
  last reported to Redis (:mod:`clinical.rerun.lane`);
* ``clinical_rerun_queue_length``: tasks waiting in the Celery ``rerun``
  queue (Redis list length, shared by all replicas; NaN when Redis is down);
* ``clinical_self_checks_total{outcome}``: the model's own check of a
  text, where the gate reads it: ``ran``, or why the confidence gate stood
  in: ``translations_waiting`` (skipped on a CPU engine), ``queue_full``,
  ``gave_way`` (stopped for a clinician's translation that arrived; it
  does not resume: the text is gated by its confidence) or ``failed``;
* ``clinical_inflight_translations``: streams this replica holds leases for;
* ``clinical_replica_draining``: 1 while the replica shuts down.

The queue length is collected by :mod:`clinical.rerun.broker`; the view
and its access rules are :func:`clinical.web.health.metrics_view`.
"""

from __future__ import annotations

from django.db.models.signals import post_save
from prometheus_client import Counter, Gauge, Histogram

from clinical.runtime import drain, replica

REQUESTS = Counter("clinical_translation_requests", "Translation requests by final outcome.",
                   ["outcome", "source"])
TTFT = Histogram("clinical_translation_ttft_seconds", "Time to first token, from the request's arrival.",
                 buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30))
LATENCY = Histogram("clinical_translation_latency_seconds",
                    "End-to-end latency of completed translations: arrival to last token.",
                    buckets=(0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120))
OUTPUT_TOKENS = Counter("clinical_translation_output_tokens", "Output tokens of finished translations.")
SELF_CHECKS = Counter("clinical_self_checks", "The model's own check of a text: ran, or why the confidence "
                      "gate stood in (translations_waiting, queue_full, gave_way, failed).", ["outcome"])


#: Read at scrape time; the translation layer installs the reader
#: (:mod:`clinical.translation.engine`), 0 until then.
ENGINE_QUEUE_DEPTH = Gauge("clinical_engine_queue_depth", "Requests queued or running in this process's engine.")
#: Read at scrape time from the engine supervisor (installed by
#: :mod:`clinical.translation.engine`).
ENGINE_UP = Gauge("clinical_engine_up", "1 while this process's engine serves; 0 dead, rebuilding or not loaded.")
ENGINE_REBUILDS = Gauge("clinical_engine_rebuilds", "Dead engines rebuilt since this process started.")
Gauge("clinical_inflight_translations", "Translations this replica is streaming.") \
    .set_function(lambda: float(replica.inflight_count()))
Gauge("clinical_replica_draining", "1 while this replica drains before shutting down.") \
    .set_function(lambda: 1.0 if drain.is_draining() else 0.0)


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
    post_save.connect(_on_audit_event, sender="clinical.AuditEvent", dispatch_uid="clinical.runtime.metrics.audit")
