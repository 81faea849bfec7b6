"""``manage.py latency_report --since 24h``: the dashboard's figures as text."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from clinical.web import audit_latency


class Command(BaseCommand):
    help = "Print TTFT and total latency P50/P95/P99 (ms), volume, error and re-run rates."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--since", default="24h", help="window: e.g. 90m, 24h, 7d (default 24h)")
        parser.add_argument("--bucket", choices=sorted(audit_latency.FREQUENCIES), default="hour")

    def handle(self, *args, since: str, bucket: str, **options) -> None:
        try:
            window = audit_latency.parse_since(since)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        table = audit_latency.latency_table(since=audit_latency.window_start(window), bucket=bucket)
        if table.empty:
            self.stdout.write(f"No translation requests in the last {since}.")
            return
        columns = ["requests", "error_rate", "rerun_rate", "ttft_p50", "ttft_p95", "ttft_p99",
                   "total_p50", "total_p95", "total_p99"]
        shown = table[columns].copy()
        shown.index = shown.index.strftime("%Y-%m-%d %H:%M")
        shown.index.name = f"{bucket} (UTC)"
        self.stdout.write(f"Translation requests in the last {since}; latencies in ms (completed requests).")
        self.stdout.write(shown.to_string(float_format=lambda v: f"{v:,.2f}", na_rep="-"))
