"""The re-run queue as the broker holds it (kombu's Redis transport)."""

from __future__ import annotations

from clinical.rerun import broker


def test_rerun_queue_keys_follow_the_broker_prefix_and_priorities(settings):
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": "site1:"}
    keys = broker.rerun_queue_keys()
    assert keys[0] == "site1:rerun" and len(keys) == len(set(keys)) > 1
    assert all(key.startswith("site1:rerun") for key in keys)
