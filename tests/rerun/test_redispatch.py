"""Which re-runs the sweep sends again (clinical.rerun.dispatch.reruns_redispatch),
in-process against the real broker; tests/live/test_rerun_redispatch.py runs
the faults with a private broker and a real worker."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from clinical.models import Rerun, Translation
from clinical.quality.gate import DEFAULT_THRESHOLD
from clinical.rerun.broker import broker_epoch
from clinical.rerun.dispatch import reruns_redispatch
from clinical.translation import admission, finish
from tests.data import laymaker_sentences


def finish_below_threshold(user) -> Translation:
    row = admission.translation_create(user=user, text=laymaker_sentences()[2])
    return finish.translation_finish(
        translation_id=row.pk, status=Translation.Status.COMPLETED, output_text="Plain text.",
        figures=finish.TranslationFigures(tokens_out=3, confidence=DEFAULT_THRESHOLD - 0.01))


def rerun_queue_length() -> int:
    """Tasks waiting in this test session's ``rerun`` queue on the shared broker."""
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"]
    return redis.Redis.from_url(settings.CELERY_BROKER_URL).llen(f"{prefix}rerun")


@pytest.mark.django_db
def test_a_dispatched_a_young_or_a_started_rerun_is_not_redispatched(clinician,
                                                                      django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):  # as if the broker had been unreachable
        row = finish_below_threshold(clinician)
    rerun = Rerun.objects.get(translation=row)
    assert (rerun.status, rerun.dispatched_at) == (Rerun.Status.QUEUED, None)
    queued = rerun_queue_length()

    assert reruns_redispatch() == 0  # younger than RERUN_REDISPATCH_GRACE_S
    Rerun.objects.filter(pk=rerun.pk).update(enqueued_at=timezone.now() - timedelta(minutes=5))
    for status in (Rerun.Status.RUNNING, Rerun.Status.COMPLETED, Rerun.Status.FAILED):
        Rerun.objects.filter(pk=rerun.pk).update(status=status)
        assert reruns_redispatch(older_than_s=0) == 0  # a worker has it already
    Rerun.objects.filter(pk=rerun.pk).update(status=Rerun.Status.QUEUED, dispatched_at=timezone.now())
    assert reruns_redispatch(older_than_s=0) == 0  # the broker took it the first time
    assert rerun_queue_length() == queued


@pytest.mark.django_db
def test_an_old_undispatched_rerun_is_sent_once(clinician, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        row = finish_below_threshold(clinician)
    Rerun.objects.filter(translation=row).update(enqueued_at=timezone.now() - timedelta(minutes=5))
    queued = rerun_queue_length()

    assert reruns_redispatch() == 1
    assert Rerun.objects.get(translation=row).dispatched_at is not None
    assert reruns_redispatch(older_than_s=0) == 0
    assert rerun_queue_length() == queued + 1


@pytest.mark.django_db
def test_a_first_dispatch_that_reaches_the_broker_is_recorded(clinician, django_capture_on_commit_callbacks):
    queued = rerun_queue_length()
    with django_capture_on_commit_callbacks(execute=True):
        row = finish_below_threshold(clinician)
    assert Rerun.objects.get(translation=row).dispatched_at is not None
    assert rerun_queue_length() == queued + 1
    assert reruns_redispatch(older_than_s=0) == 0


@pytest.mark.django_db
def test_a_queued_rerun_sent_under_an_older_broker_epoch_is_sent_again_once(
        clinician, django_capture_on_commit_callbacks):
    """What the sweep sees once the broker has lost its data: the epoch
    recorded at dispatch is no longer the broker's (the live test below
    makes that happen for real)."""
    queued = rerun_queue_length()
    with django_capture_on_commit_callbacks(execute=True):
        row = finish_below_threshold(clinician)
    rerun = Rerun.objects.get(translation=row)
    current = broker_epoch()
    assert rerun.broker_epoch == current and len(current) == 32
    Rerun.objects.filter(pk=rerun.pk).update(enqueued_at=timezone.now() - timedelta(minutes=5))
    assert reruns_redispatch() == 0  # the broker still holds its task

    Rerun.objects.filter(pk=rerun.pk).update(broker_epoch="0" * 32)
    for status in (Rerun.Status.RUNNING, Rerun.Status.COMPLETED, Rerun.Status.FAILED):
        Rerun.objects.filter(pk=rerun.pk).update(status=status)
        assert reruns_redispatch(older_than_s=0) == 0  # a worker had it before the loss
    Rerun.objects.filter(pk=rerun.pk).update(status=Rerun.Status.QUEUED)
    assert reruns_redispatch() == 1
    assert Rerun.objects.get(pk=rerun.pk).broker_epoch == current
    assert reruns_redispatch(older_than_s=0) == 0
    assert rerun_queue_length() == queued + 2
