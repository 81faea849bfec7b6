"""Latency and volume statistics over the audit log (reads only).

Percentiles are computed by pandas (``DataFrame.quantile``, linear
interpolation, the same definition as numpy's default and PostgreSQL's
``percentile_cont``) over the requests of each hour or day.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
from django.utils import timezone

from clinical.models import AuditEvent, Rerun

FREQUENCIES = {"hour": "h", "day": "D"}
PERCENTILES = (0.50, 0.95, 0.99)


def parse_since(text: str) -> timedelta:
    """``"24h"``, ``"7d"``, ``"90m"`` → timedelta.

    Raises:
        ValueError: not a number followed by m, h or d.
    """
    units = {"m": "minutes", "h": "hours", "d": "days"}
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise ValueError(f"expected e.g. 90m, 24h or 7d, not {text!r}")
    return timedelta(**{units[text[-1]]: int(text[:-1])})


def latency_table(*, since: datetime, bucket: str = "hour") -> pd.DataFrame:
    """Per-bucket request volume, error and re-run rates, and TTFT and total
    latency percentiles (ms) of translation requests since ``since``.

    Returns:
        A DataFrame indexed by bucket start (UTC) with columns ``requests``,
        ``errors``, ``error_rate``, ``reruns`` (full-precision re-runs
        requested by the confidence gate), ``rerun_rate`` (per completed
        request),
        ``ttft_p50``/``p95``/``p99`` and ``total_p50``/``p95``/``p99``;
        empty when there were no requests.

    Raises:
        KeyError: ``bucket`` is not ``"hour"`` or ``"day"``.
    """
    freq = FREQUENCIES[bucket]
    requests = pd.DataFrame.from_records(
        AuditEvent.objects.filter(event_type=AuditEvent.EventType.TRANSLATION, created_at__gte=since)
        .values("created_at", "outcome", "ttft_ms", "total_ms"),
        columns=["created_at", "outcome", "ttft_ms", "total_ms"])
    if requests.empty:
        return pd.DataFrame()
    reruns = pd.DataFrame.from_records(
        Rerun.objects.filter(enqueued_at__gte=since).values("enqueued_at"), columns=["enqueued_at"])
    requests["created_at"] = pd.to_datetime(requests["created_at"], utc=True)
    requests["error"] = requests["outcome"] == AuditEvent.Outcome.ERROR
    grouped = requests.groupby(pd.Grouper(key="created_at", freq=freq))
    table = pd.DataFrame({"requests": grouped.size(), "errors": grouped["error"].sum()})
    completed = requests[requests["outcome"] == AuditEvent.Outcome.COMPLETED]
    done = completed.groupby(pd.Grouper(key="created_at", freq=freq))
    for column, name in (("ttft_ms", "ttft"), ("total_ms", "total")):
        quantiles = done[column].quantile(list(PERCENTILES)).unstack()
        for p in PERCENTILES:
            table[f"{name}_p{int(p * 100)}"] = quantiles[p] if p in quantiles else float("nan")
    if reruns.empty:
        table["reruns"] = 0
    else:
        reruns["enqueued_at"] = pd.to_datetime(reruns["enqueued_at"], utc=True)
        table["reruns"] = reruns.groupby(pd.Grouper(key="enqueued_at", freq=freq)).size()
    table = table.fillna({"requests": 0, "reruns": 0, "errors": 0}).astype(
        {"requests": int, "reruns": int, "errors": int})
    table["error_rate"] = table["errors"] / table["requests"].where(table["requests"] > 0)
    completed_count = done.size().reindex(table.index, fill_value=0)
    table["rerun_rate"] = table["reruns"] / completed_count.where(completed_count > 0)
    return table[table["requests"] > 0]


def window_start(since: timedelta) -> datetime:
    return timezone.now() - since
