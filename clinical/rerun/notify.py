"""The confidence gate on the clinician's screen: a translation's
verification frame (:func:`clinical.frames.verification_frame`), sent
through the channel layer to every replica that holds one of its sockets."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from clinical.frames import verification_frame
from clinical.models import Translation


def translation_group(request_id) -> str:
    """Channel-layer group of one translation's sockets."""
    return f"translation-{request_id}"


def rerun_notify(*, translation: Translation) -> None:
    """Send the current verification frame to the translation's sockets
    (any web replica) through the channel layer."""
    frame = verification_frame(translation)
    if frame is not None:
        async_to_sync(get_channel_layer().group_send)(
            translation_group(translation.request_id),
            {"type": "translation.verification", "frame": frame})
