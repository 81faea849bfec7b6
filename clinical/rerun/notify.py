"""The confidence gate's progress as plain events, sent through the channel
layer to every replica that holds one of the translation's sockets; the
web side (:mod:`clinical.web.frames`) turns each into the socket's frame.

An event is a JSON-safe dict (the channel layer serialises it) with
``"event"`` and the translation's request ``"id"``:

* ``{"event": "verifying", "id", "state": "queued", "rerun_reason"}``: the
  re-run is queued (``rerun_reason``: the translation's, comma-separated);
* ``{"event": "verifying", "id", "state": "running"}``: a worker runs it;
* ``{"event": "verified", "id", ...}``: the re-run completed; the re-run's
  figures and checks (see :func:`verification_event`);
* ``{"event": "verification_failed", "id"}``: the re-run gave up and the
  fast text stays unverified.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from clinical.models import RERUN_PRECISION, Rerun, Translation
from clinical.quality import measure as quality
from clinical.rerun.change_note import sentences_as_written

VERIFYING, VERIFIED, VERIFICATION_FAILED = "verifying", "verified", "verification_failed"
#: The channel-layer message type of an event (a consumer's handler
#: ``translation_verification``); the event is under ``"event"``.
MESSAGE_TYPE = "translation.verification"


def translation_group(request_id) -> str:
    """Channel-layer group of one translation's sockets."""
    return f"translation-{request_id}"


def verification_event(translation: Translation) -> dict | None:
    """The translation's verification state as a plain event (see the
    module docstring), ``None`` when no verification was needed. Reads the
    re-run's row once it is verified.

    A ``verified`` event has, besides ``event`` and ``id``: ``text`` (the
    kept text), ``confidence``, ``self_check`` (P(yes) of the kept text, or
    ``None``), ``self_check_threshold`` (the translation's),
    ``precision`` (the lookup key, ``"fp32"``), ``engine_precision``
    (:attr:`clinical.models.Rerun.precision_label`), ``engine``, ``model``,
    ``queue_wait_ms``, ``rerun_ms`` (ms), ``tokens_out``, ``rerun_reason``,
    ``candidate``, ``candidates`` (``Rerun.candidates``),
    ``sentences_as_written`` (:func:`clinical.rerun.change_note.sentences_as_written`),
    ``change`` (``Rerun.change_note``), ``safety_passed``,
    ``faithfulness_passed`` and ``quality``
    (:func:`clinical.quality.measure.rerun_quality_payload`).

    Raises:
        Rerun.DoesNotExist: the translation is verified but has no re-run row.
    """
    request_id = str(translation.request_id)
    state = translation.verification
    if state == Translation.Verification.PENDING:
        return {"event": VERIFYING, "id": request_id, "state": "queued", "rerun_reason": translation.rerun_reason}
    if state == Translation.Verification.RUNNING:
        return {"event": VERIFYING, "id": request_id, "state": "running"}
    if state == Translation.Verification.FAILED:
        return {"event": VERIFICATION_FAILED, "id": request_id}
    if state != Translation.Verification.VERIFIED:
        return None
    rerun = Rerun.objects.get(translation=translation, precision=RERUN_PRECISION)
    return {
        "event": VERIFIED, "id": request_id, "text": rerun.output_text,
        "confidence": rerun.confidence, "self_check": rerun.self_check,
        "self_check_threshold": translation.self_check_threshold,
        "precision": rerun.precision, "engine_precision": rerun.precision_label,
        "engine": rerun.engine, "model": rerun.model_name,
        "queue_wait_ms": rerun.queue_wait_ms, "rerun_ms": rerun.duration_ms, "tokens_out": rerun.tokens_out,
        "rerun_reason": translation.rerun_reason, "candidate": rerun.candidate,
        "candidates": list(rerun.candidates or []), "sentences_as_written": sentences_as_written(rerun),
        "change": rerun.change_note, "safety_passed": rerun.safety_passed,
        "faithfulness_passed": rerun.faithfulness_passed, "quality": quality.rerun_quality_payload(rerun),
    }


def rerun_notify(*, translation: Translation) -> None:
    """Send the translation's current verification event
    (:func:`verification_event`) to its sockets (any web replica) through
    the channel layer; nothing when no verification was needed."""
    event = verification_event(translation)
    if event is not None:
        async_to_sync(get_channel_layer().group_send)(
            translation_group(translation.request_id), {"type": MESSAGE_TYPE, "event": event})
