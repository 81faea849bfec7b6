"""Sweeps that finish what a dead process left: orphaned translations and
re-runs whose task never reached the broker.

Orphan sweep (:func:`translations_sweep`; every ``ORPHAN_SWEEP_INTERVAL_S``
on each replica run by ``clinical.serve``, and ``manage.py
translations_sweep``): a translation still ``pending`` more than
``SWEEP_GRACE_S`` after it was created, whose lease
(:mod:`clinical.runtime.replica`) is gone, is finalised as ``error`` with
``error_class`` ``ReplicaLost`` through
:func:`clinical.translation.finish.translation_finish`, which writes its
one audit record; that function's "first final state wins" rule makes
concurrent sweeps on several replicas, or a sweep racing a late stream,
write one record only. The same sweep finalises rows left pending when the
database was unreachable at the end of a stream. With Redis unreachable the
sweep does nothing (it cannot tell a live lease from a dead one).

Each round also sends again the full-precision re-runs whose task never
reached the broker (:func:`clinical.rerun.dispatch.reruns_redispatch`, after
``RERUN_REDISPATCH_GRACE_S``).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import redis
from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from clinical.models import Translation
from clinical.rerun.dispatch import reruns_redispatch
from clinical.runtime.replica import lease_key
from clinical.translation import finish

logger = logging.getLogger(__name__)

#: ``error_class`` of a translation finalised by the sweep.
REPLICA_LOST = "ReplicaLost"


def translations_sweep(*, grace_s: float | None = None) -> list[str]:
    """Finalise orphaned translations (see the module docstring).

    Returns:
        The request ids finalised as ``error``/``ReplicaLost`` by this call.
    """
    grace_s = settings.SWEEP_GRACE_S if grace_s is None else grace_s
    cutoff = timezone.now() - timedelta(seconds=grace_s)
    candidates = list(Translation.objects.filter(status=Translation.Status.PENDING, created_at__lt=cutoff)
                      .values_list("pk", "request_id")[:500])
    if not candidates:
        return []
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        with client.pipeline(transaction=False) as pipe:
            for _, request_id in candidates:
                pipe.exists(lease_key(request_id))
            leased = pipe.execute()
    except (redis.RedisError, OSError) as exc:
        logger.warning("orphan sweep skipped, Redis unreachable: %s", type(exc).__name__)
        return []
    finally:
        client.close()
    swept = []
    for (pk, request_id), held in zip(candidates, leased):
        if held:
            continue
        row = finish.translation_finish(
            translation_id=pk, status=Translation.Status.ERROR, output_text="",
            figures=finish.TranslationFigures(), error_class=REPLICA_LOST)
        if row.error_class == REPLICA_LOST:
            swept.append(str(request_id))
    if swept:
        logger.warning("orphan sweep: %d translations finalised as %s", len(swept), REPLICA_LOST)
    return swept


async def sweep_forever() -> None:
    """Every ``ORPHAN_SWEEP_INTERVAL_S`` (0 = never): run the orphan sweep,
    then re-dispatch re-runs whose task never reached the broker."""
    interval = settings.ORPHAN_SWEEP_INTERVAL_S
    if interval <= 0:
        return
    while True:
        await asyncio.sleep(interval)
        for name, sweep in (("orphan", translations_sweep), ("re-run dispatch", reruns_redispatch)):
            try:
                await database_sync_to_async(sweep)()
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                logger.warning("%s sweep failed: %s", name, type(exc).__name__)
