"""The IT dashboard: the engines' health (this replica's and the re-run
lane's), latency percentiles, volume, error and re-run rates.

Plots are rendered on the server by matplotlib as SVG (no JavaScript, no
CDN). Open to staff with the ``clinical.view_auditevent`` permission.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # no display: render to files only

import matplotlib.pyplot as plt  # noqa: E402
from django.contrib import admin  # noqa: E402
from django.contrib.auth.decorators import permission_required  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.template.response import TemplateResponse  # noqa: E402

from clinical.rerun import lane  # noqa: E402
from clinical.translation.engine import engine_status  # noqa: E402
from clinical.web import audit_latency  # noqa: E402

WINDOWS = {"hour": "48h", "day": "30d"}


def _table(bucket: str):
    since = audit_latency.window_start(audit_latency.parse_since(WINDOWS[bucket]))
    return audit_latency.latency_table(since=since, bucket=bucket)


@permission_required("clinical.view_auditevent", raise_exception=True)
def dashboard(request: HttpRequest) -> TemplateResponse:
    """``/admin/dashboard/``: the engines' health (this replica's engine,
    :func:`clinical.translation.engine.engine_status`; each re-run worker's
    as it last reported, :func:`clinical.rerun.lane.lane_summary`), then
    tables and plots per hour (48 h) and per day (30 d)."""
    sections = []
    for bucket in ("hour", "day"):
        table = _table(bucket)
        records = [] if table.empty else (
            table.sort_index(ascending=False).reset_index(names="start").to_dict("records"))
        rows = [{k: (None if v != v else v) for k, v in record.items()} for record in records]  # NaN → None
        totals = {} if table.empty else {
            "requests": int(table["requests"].sum()), "errors": int(table["errors"].sum()),
            "reruns": int(table["reruns"].sum()),
        }
        sections.append({"bucket": bucket, "window": WINDOWS[bucket], "rows": rows, "totals": totals})
    status = engine_status()
    context = {**admin.site.each_context(request), "title": "Latency and volume", "sections": sections,
               "engine": status.as_dict() if status is not None else None, "rerun_lane": lane.lane_summary()}
    return TemplateResponse(request, "admin/dashboard.html", context)


@permission_required("clinical.view_auditevent", raise_exception=True)
def dashboard_plot(request: HttpRequest, bucket: str) -> HttpResponse:
    """``/admin/dashboard/<hour|day>.svg``: TTFT and total latency
    P50/P95/P99 (ms) and request volume against time."""
    if bucket not in WINDOWS:
        return HttpResponse(status=404)
    table = _table(bucket)
    figure, (latency, volume) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True,
                                             gridspec_kw={"height_ratios": [3, 1]})
    if table.empty:
        latency.text(0.5, 0.5, "No requests in this window", ha="center", va="center",
                     transform=latency.transAxes)
    else:
        index = table.index.tz_convert(None)
        for metric, style in (("ttft", "-"), ("total", "--")):
            for p, color in (("p50", "#1b7837"), ("p95", "#e08214"), ("p99", "#b2182b")):
                latency.plot(index, table[f"{metric}_{p}"], style, color=color, marker="o",
                             markersize=3, label=f"{metric.upper()} {p.upper()}")
        volume.bar(index, table["requests"], width=0.03 if bucket == "hour" else 0.8, color="#4a6fa5")
        latency.legend(ncol=2, fontsize=8)
    latency.set_ylabel("ms")
    latency.set_title(f"Latency per {bucket} (last {WINDOWS[bucket]}, completed requests)")
    latency.grid(alpha=0.3)
    volume.set_ylabel("requests")
    figure.autofmt_xdate()
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    return HttpResponse(buffer.getvalue(), content_type="image/svg+xml")
