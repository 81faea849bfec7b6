"""The WebSocket protocol's frames, built here and nowhere else: the web
edge turns a translation's events (:mod:`clinical.translation.stream`) and
the re-run lane's verification events (:mod:`clinical.rerun.notify`) into
frames; the lanes below send plain events, never frames.

Client → server frames (JSON text):
    ``{"type": "translate", "text": "<diagnosis>", "reading_level"?: 4|6|8,
    "language"?: "en"|"es"}``
    ``{"type": "cancel"}``
    ``{"type": "watch", "id": "<request id>"}``: follow the verification of
    one of the user's own earlier translations.
Server → client frames:
    ``{"type": "started", "id", "engine", "model", "precision",
    "reading_level", "language"}`` (:func:`started_frame`)
    ``{"type": "token", "text"}`` (one per decoded piece)
    ``{"type": "checking", "id", "sentences"}`` (:func:`checking_frame`):
    the text is whole and the model's own check of it has started
    (``sentences``: how many sentences it checks one by one, 1 for a
    single sentence); not sent where no check runs
    ``{"type": "done", "id", "status": "completed", "ttft_ms", "total_ms",
    "queue_wait_ms", "tokens_in", "tokens_out", "tokens_per_s",
    "confidence", "finish_reason", "verification", "readability",
    "safety", "rerun_reason", "glossary"}`` (:func:`done_frame`; see
    :func:`clinical.quality.measure.translation_quality_payload`;
    ``glossary``: ``[{"term", "definition", "source", "source_name"}]``,
    each definition from a vetted vocabulary, :mod:`clinical.quality.glossary`)
    then, below the confidence threshold or when the safety check failed,
    ``verifying`` and later ``verified`` or ``verification_failed``
    (:func:`verification_event_frame`; the re-run worker sends its events
    through the channel layer).
    ``{"type": "cancelled", "id"}``
    ``{"type": "error", "code", "message", "retry_after_s"?}``
    (:func:`error_frame`) with ``code`` one of ``bad_frame``, ``empty``,
    ``too_long``, ``invalid``, ``invalid_option``, ``unsupported_language``
    (not English input), ``in_progress``,
    ``engine_error``, ``engine_restarting`` (the engine died while this
    translation was being written, or had died before it was admitted,
    and is being rebuilt: :func:`translation_failed_frame`,
    :func:`clinical.translation.admission.translation_accept`), ``not_found``, ``frame_too_large``, ``busy`` (the
    engine's queue is full), ``rate_limited`` (``TRANSLATE_RATE_PER_USER`` or
    ``SOCKET_FRAME_RATE`` exceeded), ``too_many_translations`` (the user
    already runs ``USER_MAX_CONCURRENT_TRANSLATIONS``), ``too_many_sockets``
    (sent before the close code 4429: ``USER_MAX_SOCKETS`` are open),
    ``forbidden`` (sent before the close code 4403: not in the Clinician
    group), ``unavailable`` (database or Redis
    unreachable; nothing was stored), ``draining`` and ``server_restart``
    (this replica is shutting down); ``busy``, ``rate_limited``,
    ``too_many_translations``, ``unavailable``, ``draining``,
    ``server_restart``, ``engine_error`` and ``engine_restarting`` carry
    ``retry_after_s`` when a retry can help.

The server-sent events of the REST API (:mod:`clinical.api.streaming`)
carry the same payloads without their ``type``.
"""

from __future__ import annotations

from django.conf import settings

from clinical.models import RERUN_AS_WRITTEN, Translation
from clinical.quality import measure as quality
from clinical.rerun import notify
from clinical.translation.finish import translation_failure


def started_frame(translation: Translation, engine_info) -> dict:
    """``started``: the request was admitted (``engine_info``: the engine's
    :class:`inference.base.EngineInfo`)."""
    return {"type": "started", "id": str(translation.request_id), "engine": engine_info.engine,
            "model": engine_info.model, "precision": engine_info.precision,
            "reading_level": translation.reading_level, "language": translation.language}


def token_frame(text: str) -> dict:
    """``token``: one decoded piece of text."""
    return {"type": "token", "text": text}


def checking_frame(translation: Translation, sentences: int) -> dict:
    """``checking``: the text is whole; the model checks its ``sentences``
    sentences (:mod:`clinical.translation.checking`, about 0.8 s each on
    two CPU cores) before ``done``."""
    return {"type": "checking", "id": str(translation.request_id), "sentences": sentences}


def done_frame(translation: Translation) -> dict:
    """``done``: a completed translation with its figures (ms, tokens) and
    quality payloads."""
    return {
        "type": "done",
        "id": str(translation.request_id),
        "status": translation.status,
        "ttft_ms": translation.ttft_ms,
        "total_ms": translation.total_ms,
        "queue_wait_ms": translation.queue_wait_ms,
        "tokens_in": translation.tokens_in,
        "tokens_out": translation.tokens_out,
        "tokens_per_s": translation.tokens_per_s,
        "confidence": translation.confidence,
        "finish_reason": translation.finish_reason,
        "verification": translation.verification,
        # readability, safety, rerun_reason, glossary (clinical.quality.measure)
        **quality.translation_quality_payload(translation),
    }


def cancelled_frame(translation: Translation) -> dict:
    """``cancelled``: the clinician stopped it; the row says ``cancelled``."""
    return {"type": "cancelled", "id": str(translation.request_id)}


def frame_too_large_message() -> str:
    """The ``frame_too_large`` error's message, whichever layer refuses the
    frame (the consumer above ``MAX_FRAME_BYTES``, the server above
    ``WEBSOCKET_MAX_MESSAGE_BYTES``): the limit a client may send."""
    return f"Frames are limited to {settings.MAX_FRAME_BYTES:,} bytes."


def error_frame(code: str, message: str, *, retry_after_s: float | None = None) -> dict:
    """``error`` with a code from the module docstring and a message for the
    clinician; ``retry_after_s`` (seconds) when a retry can help."""
    frame = {"type": "error", "code": code, "message": message}
    if retry_after_s is not None:
        frame["retry_after_s"] = retry_after_s
    return frame


def translation_failed_frame(translation: Translation) -> dict:
    """``error`` for a translation whose row ended ``error``: code
    ``engine_restarting`` with ``retry_after_s`` when the engine died under
    it (``error_class`` ``EngineDead``; the replica rebuilds it), else
    ``engine_error`` (:func:`clinical.translation.finish.translation_failure`). Either way the row and
    its audit record exist."""
    failure = translation_failure(translation)
    return error_frame(failure.code, failure.message, retry_after_s=failure.retry_after_s)


REASON_MESSAGES = {
    quality.LOW_CONFIDENCE: "Low confidence",
    quality.LOW_SELF_CHECK: "The model's own check doubts it",
    quality.SAFETY_FAILED: "Safety check: facts missing",
    quality.FAITHFULNESS_FAILED: "Faithfulness check: statements the note does not make",
}


def _still_doubted(event: dict) -> str:
    """The verified message's warning when the model's own check doubts the
    kept text too (P(yes) under the threshold the fast text was gated by,
    :attr:`clinical.models.Translation.self_check_threshold`), else ""."""
    p_yes, threshold = event["self_check"], event["self_check_threshold"]
    if not quality.self_check_doubted(p_yes, threshold):
        return ""
    return (f" The model's own check still doubts this text ({p_yes:.2f}, under {threshold:.2f}); "
            "read it against the diagnosis before giving it to the patient.")


VERIFICATION_MESSAGES = {
    Translation.Verification.PENDING: "Low confidence: queued for verification in full precision…",
    Translation.Verification.RUNNING: "Verifying in full precision…",
    Translation.Verification.FAILED: "Full-precision verification failed; the fast text is unverified.",
}


def verification_frame(translation: Translation) -> dict | None:
    """The frame of a translation's verification state as it is stored
    now (:func:`verification_event_frame` of
    :func:`clinical.rerun.notify.verification_event`), or ``None`` when no
    verification was needed. Reads the database."""
    event = notify.verification_event(translation)
    return None if event is None else verification_event_frame(event)


def verification_event_frame(event: dict) -> dict:
    """The socket frame of a verification event of the re-run lane
    (:mod:`clinical.rerun.notify`). Every frame carries a ``message`` for
    the clinician.

    Frames: ``{"type": "verifying", "id", "state": "queued"|"running",
    "reason"?}`` (``reason``, on ``queued``: the translation's
    ``rerun_reason``), ``{"type": "verified", "id", "text", "confidence",
    "precision", "engine_precision", "engine", "model", "queue_wait_ms",
    "rerun_ms", "tokens_out", "reason", "candidate", "candidates",
    "sentences_as_written", "change", "readability", "safety",
    "faithfulness", "self_check"}`` (``precision``: the re-run's
    kind, always ``"fp32"`` (:data:`clinical.models.RERUN_PRECISION`), kept
    for older clients; ``engine_precision``: the precision the re-run
    engine reported after load, e.g. ``"fp32"``, ``"bf16"`` or
    ``"fp8 (compressed-tensors)"``, which the ``message`` names too
    (:attr:`clinical.models.Rerun.precision_label`: ``precision`` for a
    re-run whose engine reported none); the re-run output's own
    readability and checks, see
    :func:`clinical.quality.measure.rerun_quality_payload`; ``candidate``:
    which of the re-run's candidates replaced the text, ``candidates``: each
    one tried, checks and figures without text (``Rerun.candidates``),
    ``sentences_as_written``: the sentences of a note given as written,
    ``change``: why the text changed, :func:`clinical.rerun.change_note.rerun_change_note`)
    and ``{"type": "verification_failed", "id"}``.

    Raises:
        ValueError: an event this module does not know.
    """
    request_id = event["id"]
    if event["event"] == notify.VERIFYING and event["state"] == "queued":
        reasons = [r for r in (event["rerun_reason"] or "").split(",") if r]
        message = VERIFICATION_MESSAGES[Translation.Verification.PENDING]
        if reasons:
            message = " and ".join(REASON_MESSAGES.get(r, r) for r in reasons) + \
                ": queued for verification in full precision…"
        return {"type": "verifying", "id": request_id, "state": "queued", "message": message,
                "reason": event["rerun_reason"]}
    if event["event"] == notify.VERIFYING:
        return {"type": "verifying", "id": request_id, "state": "running",
                "message": VERIFICATION_MESSAGES[Translation.Verification.RUNNING]}
    if event["event"] == notify.VERIFICATION_FAILED:
        return {"type": "verification_failed", "id": request_id,
                "message": VERIFICATION_MESSAGES[Translation.Verification.FAILED]}
    if event["event"] != notify.VERIFIED:
        raise ValueError(f"unknown verification event: {event['event']!r}")
    confidence = "not measured" if event["confidence"] is None else f"{event['confidence']:.2f}"
    still_doubted = _still_doubted(event)
    as_written = event["sentences_as_written"]
    unchecked_or_doubted = still_doubted or event["candidate"] == RERUN_AS_WRITTEN or as_written
    change = event["change"]
    return {"type": "verified", "id": request_id, "text": event["text"],
            "confidence": event["confidence"], "precision": event["precision"],
            "engine_precision": event["engine_precision"],
            "engine": event["engine"], "model": event["model"],
            "queue_wait_ms": event["queue_wait_ms"], "rerun_ms": event["rerun_ms"],
            "tokens_out": event["tokens_out"], "reason": event["rerun_reason"],
            "candidate": event["candidate"], "candidates": list(event["candidates"]),
            "sentences_as_written": as_written,
            "change": change,
            **event["quality"],
            # "Verified" only where the model's own check does not still doubt the text, and not
            # for the diagnosis as written, which no model wrote or checked.
            "message": f"{'Re-run' if unchecked_or_doubted else 'Verified'}"
                       " in full precision "
                       f"({event['engine_precision']}), confidence "
                       f"{confidence}"
                       + ("" if event["self_check"] is None else f", model's own check {event['self_check']:.2f}")
                       + f", re-run {event['rerun_ms'] or 0:,.0f} ms."
                       + (f" {change}" if change else "")
                       + ("" if event["safety_passed"] is not False else
                          " The safety check still finds facts missing; check the text.")
                       + ("" if event["faithfulness_passed"] is not False else
                          " The faithfulness check still flags statements the note does not make; "
                          "check the text.")
                       + still_doubted}
