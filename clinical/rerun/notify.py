"""The confidence gate on the clinician's screen: the socket frames that
describe a translation's verification, sent through the channel layer to
every replica that holds one of its sockets."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from clinical.models import RERUN_PRECISION, Rerun, Translation
from clinical.quality import measure as quality


def translation_group(request_id) -> str:
    """Channel-layer group of one translation's sockets."""
    return f"translation-{request_id}"



REASON_MESSAGES = {
    quality.LOW_CONFIDENCE: "Low confidence",
    quality.SAFETY_FAILED: "Safety check: facts missing",
}

VERIFICATION_MESSAGES = {
    Translation.Verification.PENDING: "Low confidence: queued for verification in full precision…",
    Translation.Verification.RUNNING: "Verifying in full precision…",
    Translation.Verification.FAILED: "Full-precision verification failed; the fast text is unverified.",
}


def verification_frame(translation: Translation) -> dict | None:
    """The socket frame describing a translation's verification state, or
    ``None`` when no verification was needed. Every frame carries a
    ``message`` for the clinician.

    Frames: ``{"type": "verifying", "id", "state": "queued"|"running",
    "reason"?}`` (``reason``, on ``queued``: the translation's
    ``rerun_reason``), ``{"type": "verified", "id", "text", "confidence",
    "precision", "engine", "model", "queue_wait_ms", "rerun_ms",
    "tokens_out", "reason", "readability", "safety"}`` (the re-run output's
    own readability and safety check, see
    :func:`clinical.quality.measure.rerun_quality_payload`) and
    ``{"type": "verification_failed", "id"}``.
    """
    request_id = str(translation.request_id)
    state = translation.verification
    message = VERIFICATION_MESSAGES.get(state, "")
    reasons = [r for r in (translation.rerun_reason or "").split(",") if r]
    if state == Translation.Verification.PENDING:
        if reasons:
            message = " and ".join(REASON_MESSAGES.get(r, r) for r in reasons) + \
                ": queued for verification in full precision…"
        return {"type": "verifying", "id": request_id, "state": "queued", "message": message,
                "reason": translation.rerun_reason}
    if state == Translation.Verification.RUNNING:
        return {"type": "verifying", "id": request_id, "state": "running", "message": message}
    if state == Translation.Verification.FAILED:
        return {"type": "verification_failed", "id": request_id, "message": message}
    if state == Translation.Verification.VERIFIED:
        rerun = Rerun.objects.get(translation=translation, precision=RERUN_PRECISION)
        return {"type": "verified", "id": request_id, "text": rerun.output_text,
                "confidence": rerun.confidence, "precision": rerun.precision,
                "engine": rerun.engine, "model": rerun.model_name,
                "queue_wait_ms": rerun.queue_wait_ms, "rerun_ms": rerun.duration_ms,
                "tokens_out": rerun.tokens_out, "reason": translation.rerun_reason,
                **quality.rerun_quality_payload(rerun),
                "message": f"Verified in full precision ({rerun.precision}), confidence "
                           f"{rerun.confidence or 0:.2f}, re-run {rerun.duration_ms or 0:,.0f} ms."
                           + ("" if rerun.safety_passed is not False else
                              " The safety check still finds facts missing; check the text.")}
    return None


def rerun_notify(*, translation: Translation) -> None:
    """Send the current verification frame to the translation's sockets
    (any web replica) through the channel layer."""
    frame = verification_frame(translation)
    if frame is not None:
        async_to_sync(get_channel_layer().group_send)(
            translation_group(translation.request_id),
            {"type": "translation.verification", "frame": frame})
