"""``manage.py translations_sweep``: finalise translations whose replica
died (lease expired) as ``error``/``ReplicaLost``, each with its one audit
record, and send again the full-precision re-runs whose task never reached
the broker (:func:`clinical.rerun.dispatch.reruns_redispatch`). Replicas run the same
sweep every ``ORPHAN_SWEEP_INTERVAL_S``; this command is for cron/systemd
timers, or after stopping every replica.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from clinical.ops.sweeps import translations_sweep
from clinical.rerun.dispatch import reruns_redispatch


class Command(BaseCommand):
    help = ("Finalise pending translations whose replica is gone (lease expired) and re-dispatch "
            "re-runs whose task never reached the broker.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--grace", type=float, default=None,
                            help="seconds a pending translation must have existed (default SWEEP_GRACE_S)")
        parser.add_argument("--rerun-grace", type=float, default=None,
                            help="seconds an undispatched re-run must have existed "
                                 "(default RERUN_REDISPATCH_GRACE_S)")

    def handle(self, *args, grace: float | None = None, rerun_grace: float | None = None, **options) -> None:
        swept = translations_sweep(grace_s=grace)
        self.stdout.write(f"{len(swept)} orphaned translation(s) finalised as error (ReplicaLost)")
        redispatched = reruns_redispatch(older_than_s=rerun_grace)
        self.stdout.write(f"{redispatched} re-run(s) re-dispatched to the broker")
