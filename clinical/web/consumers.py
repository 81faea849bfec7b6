"""The WebSocket consumer that streams a translation to the clinician's
page. The frames it sends are built in :mod:`clinical.web.frames` (which
holds the protocol) from a translation's events
(:func:`clinical.translation.stream.translation_events`) and the re-run
lane's verification events (:mod:`clinical.rerun.notify`).

Anonymous sockets are closed with code 4401, and so is a socket whose
session expires, is logged out or whose user is deactivated (checked on
every frame and every ``SESSION_CHECK_INTERVAL_S``). A signed-in user outside
the Clinician group gets a ``forbidden`` error frame and the close code 4403
(:mod:`clinical.roles`; also when removed from the group while the
socket is open); a user who already holds ``USER_MAX_SOCKETS`` open sockets
(on any replica) gets ``too_many_sockets`` and 4429
(:mod:`clinical.translation.concurrency`). A replica that shuts
down closes its sockets with 1012 (Service Restart) once their streams have
ended (:mod:`clinical.runtime.drain`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DatabaseError
from redis.exceptions import RedisError

from clinical.models import Translation
from clinical.rerun import notify
from clinical.roles import NOT_A_CLINICIAN_MESSAGE, user_is_clinician
from clinical.runtime import drain
from clinical.translation import admission, concurrency, ratelimit, selectors, stream
from clinical.translation.engine import engine_get
from clinical.web import frames
from clinical.web.sessions import session_activity_record

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403  # signed in, but not a clinician
CLOSE_TOO_MANY_SOCKETS = 4429  # USER_MAX_SOCKETS already open


def _session_live_and_clinician(*, session_key: str | None, user) -> bool:
    return selectors.session_is_live(session_key=session_key, user_id=user.pk) and user_is_clinician(user)


class TranslateConsumer(AsyncJsonWebsocketConsumer):
    """Streams one translation at a time per socket; see module docstring."""

    async def connect(self) -> None:
        self.task: asyncio.Task | None = None
        self.generating = False  # true from "started" until the last token
        self.groups_joined: set[str] = set()
        self.place: concurrency.PlaceHolder | None = None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        # Both checks run before the handshake completes, so no frame of
        # the client (nor a change to its account) can overtake them; the
        # socket is accepted either way, to carry the refusal's frame.
        clinician = await database_sync_to_async(user_is_clinician)(user)
        placed = clinician and await self.place_take(user)
        await self.accept()
        if not clinician:
            await self.refuse("forbidden", NOT_A_CLINICIAN_MESSAGE, CLOSE_FORBIDDEN)
            return
        if not placed:
            await self.refuse("too_many_sockets", f"You have {settings.USER_MAX_SOCKETS} connections open "
                              "already (other tabs or windows). Close one, then reload this page.",
                              CLOSE_TOO_MANY_SOCKETS)
            return
        drain.socket_register(self)
        self.session_watch = asyncio.create_task(self.watch_session())
        # Start loading the model while the clinician is still typing.
        asyncio.ensure_future(engine_get()).add_done_callback(_ignore_result)

    async def place_take(self, user) -> bool:
        """Take one of the user's ``USER_MAX_SOCKETS`` places (False: all
        are held). An unreachable Redis lets the socket in: its frames then
        meet the same outage and answer ``unavailable``."""
        if settings.USER_MAX_SOCKETS <= 0:
            return True
        key = concurrency.holder_key(kind=concurrency.SOCKETS, user_id=user.pk)
        try:
            place = await concurrency.place_take(key=key, member=self.channel_name, cap=settings.USER_MAX_SOCKETS)
        except (RedisError, OSError) as exc:
            logger.warning("socket cap not checked, Redis unreachable: %s", type(exc).__name__)
            return True
        if place is None:
            return False
        self.place = concurrency.PlaceHolder(place)
        self.place.start()
        return True

    async def refuse(self, code: str, message: str, close_code: int) -> None:
        """Tell the client why in an error frame, then close with ``close_code``."""
        await self.send_json(frames.error_frame(code, message))
        await self.close(code=close_code)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "place", None) is not None:
            await self.place.stop()
        drain.socket_unregister(self)
        if getattr(self, "session_watch", None) is not None:
            self.session_watch.cancel()
        if getattr(self, "task", None) is not None and not self.task.done():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        for group in getattr(self, "groups_joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def session_live(self) -> bool:
        """The session is live and its user still a clinician (one call)."""
        session = self.scope.get("session")
        return await database_sync_to_async(_session_live_and_clinician)(
            session_key=getattr(session, "session_key", None), user=self.scope["user"])

    async def end_session(self) -> None:
        """The session expired, was logged out, the user deactivated or
        taken out of the Clinician group: stop any generation and close with
        4401 (the page reloads: to the login page, or the 403 page)."""
        if self.generating:
            self.task.cancel()
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def watch_session(self) -> None:
        """Re-check the session while the socket is open, idle or not."""
        while True:
            await asyncio.sleep(settings.SESSION_CHECK_INTERVAL_S)
            if not await self.session_live():
                await self.end_session()
                return

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs) -> None:
        if not ratelimit.socket_frame_allowed(channel_name=self.channel_name):
            await self.send_error("rate_limited", f"Too many frames; at most {settings.SOCKET_FRAME_RATE}.")
            return
        try:
            live = await self.session_live()
        except (DatabaseError, RedisError):
            await self.send_unavailable()
            return
        if not live:
            await self.end_session()
            return
        if text_data is None:
            await self.send_error("bad_frame", "Frames must be JSON text, not binary.")
            return
        if len(text_data) > settings.MAX_FRAME_BYTES // 4 and len(text_data.encode()) > settings.MAX_FRAME_BYTES:
            await self.send_error("frame_too_large", frames.frame_too_large_message())
            return
        try:
            content = json.loads(text_data)
        except ValueError:
            await self.send_error("bad_frame", "The frame is not valid JSON.")
            return
        except RecursionError:
            await self.send_error("bad_frame", "The frame is nested too deeply to read.")
            return
        try:
            # A frame is the clinician's activity: it restarts the idle timeout.
            await database_sync_to_async(session_activity_record)(
                session_key=getattr(self.scope.get("session"), "session_key", None))
            await self.receive_json(content)
        except (DatabaseError, RedisError) as exc:
            logger.error("frame refused, backing service unreachable: %s", type(exc).__name__)
            await self.send_unavailable()

    async def receive_json(self, content, **kwargs) -> None:
        received_ns = time.monotonic_ns()
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "translate":
            await self.start_translation(content, received_ns)
        elif kind == "watch":
            await self.watch(content.get("id"))
        elif kind == "cancel":
            if self.generating:
                self.task.cancel(stream.CANCEL_REQUESTED)
        else:
            await self.send_error("bad_frame", 'Unknown frame; expected type "translate", "cancel" or "watch".')

    async def start_translation(self, content: dict, received_ns: int) -> None:
        text = content.get("text")
        if self.generating:
            await self.send_error("in_progress", "A translation is already running; cancel it first.")
            return
        try:
            translation, engine = await admission.translation_accept(
                user=self.scope["user"], api_client=None, source=Translation.Source.WEB, text=text,
                reading_level=content.get("reading_level"), language=content.get("language"))
        except admission.TranslationRefused as refused:
            await self.send_json(frames.error_frame(refused.code, refused.message,
                                                    retry_after_s=refused.retry_after_s))
            return
        await self.follow(translation)
        if self.task is not None and not self.task.done():
            self.task.cancel()  # the previous one's frames after its text (verification state)
        self.generating = True
        self.task = asyncio.create_task(self.run(translation, engine, received_ns))

    async def run(self, translation: Translation, engine, received_ns: int) -> None:
        """Send the translation's events as frames. The socket takes the
        next request as soon as the text is final, before the verification
        frame; a new translate frame cancels what is left of this task
        (start_translation). The ``done`` frame carries the glossary, from
        the vocabularies only: no frame about this translation's text
        follows it but the verification's."""
        events = stream.translation_events(translation=translation, engine=engine, received_ns=received_ns)
        text_final = False  # this translation's text has ended (the socket is free)
        try:
            async for event in events:
                if event.kind == stream.TOKEN:
                    await self.send_json(frames.token_frame(event.text))
                    continue
                if event.kind in stream.FINAL:
                    text_final, self.generating = True, False
                if event.kind == stream.STARTED:
                    await self.send_json(frames.started_frame(translation, engine.info))
                elif event.kind == stream.CHECKING:
                    await self.send_json(frames.checking_frame(translation, event.sentences))
                elif event.kind == stream.DONE:
                    await self.send_json(frames.done_frame(event.translation))
                    await self.send_verification_state(event.translation)
                elif event.kind == stream.FAILED:
                    await self.send_json(frames.translation_failed_frame(event.translation))
                elif event.kind == stream.UNRECORDED:
                    # The text was streamed but its final state could not be
                    # stored; the row stays pending until the sweep finalises it.
                    await self.send_closed_safe(frames.error_frame(
                        "unavailable", stream.UNRECORDED_MESSAGE, retry_after_s=admission.UNAVAILABLE_RETRY_AFTER_S))
        except asyncio.CancelledError:
            # Cancelled while its text was still coming (a cancel frame, the
            # session's end): say so. Cancelled after its text was final (the
            # next translation started), it has nothing to say.
            if not text_final:
                self.generating = False
                await self.send_closed_safe(frames.cancelled_frame(translation))
            raise

    async def watch(self, request_id: object) -> None:
        try:
            translation = await database_sync_to_async(selectors.translation_get_for_user)(
                user=self.scope["user"], request_id=request_id)
        except (Translation.DoesNotExist, ValidationError, ValueError, TypeError):
            await self.send_error("not_found", "No such translation.")
            return
        await self.follow(translation)
        await self.send_verification_state(translation)

    async def follow(self, translation: Translation) -> None:
        """Join the translation's group: re-run workers report there."""
        group = notify.translation_group(translation.request_id)
        await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined.add(group)

    async def send_verification_state(self, translation: Translation) -> None:
        """Send the current verification state, read after joining the
        group so that no update from the worker falls between the two."""
        await translation.arefresh_from_db(fields=["verification"])
        frame = await database_sync_to_async(frames.verification_frame)(translation)
        if frame is not None:
            await self.send_json(frame)

    async def translation_verification(self, message: dict) -> None:
        """Channel-layer handler: a re-run worker reports progress (a
        :mod:`clinical.rerun.notify` event, sent as its frame)."""
        await self.send_json(frames.verification_event_frame(message["event"]))

    async def send_unavailable(self) -> None:
        refusal = admission.unavailable_refusal()
        await self.send_closed_safe(frames.error_frame(refusal.code, refusal.message,
                                                       retry_after_s=refusal.retry_after_s))

    async def send_error(self, code: str, message: str, *, retry_after_s: float | None = None) -> None:
        """Send an ``error`` frame (:func:`clinical.web.frames.error_frame`)."""
        await self.send_json(frames.error_frame(code, message, retry_after_s=retry_after_s))

    async def send_closed_safe(self, content: dict) -> None:
        """Send unless the socket is already gone (disconnect cancels too)."""
        try:
            await self.send_json(content)
        except Exception:  # noqa: BLE001 - the client left; nothing to tell
            pass


def _ignore_result(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("engine preload failed: %s", type(future.exception()).__name__)
