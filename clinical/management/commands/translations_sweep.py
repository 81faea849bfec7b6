"""``manage.py translations_sweep``: finalise translations whose replica
died (lease expired) as ``error``/``ReplicaLost``, each with its one audit
record. Replicas run the same sweep every ``ORPHAN_SWEEP_INTERVAL_S``; this
command is for cron/systemd timers, or after stopping every replica.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from clinical.replica import translations_sweep


class Command(BaseCommand):
    help = "Finalise pending translations whose replica is gone (lease expired)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--grace", type=float, default=None,
                            help="seconds a pending translation must have existed (default SWEEP_GRACE_S)")

    def handle(self, *args, grace: float | None = None, **options) -> None:
        swept = translations_sweep(grace_s=grace)
        self.stdout.write(f"{len(swept)} orphaned translation(s) finalised as error (ReplicaLost)")
