"""Run one web replica: Daphne serving ``clinical.asgi`` with a graceful
drain on SIGTERM/SIGINT, the lease renewal and the orphan sweep.

    python -m clinical.serve --host 127.0.0.1 --port 8001 [--proxy-headers]

(``HOST``/``PORT`` from the environment are the defaults.) Several replicas
run side by side behind nginx (``deploy/``), each with its own in-process
engine, sharing Redis and PostgreSQL.

On start the engine is loaded in the background (``SERVE_PRELOAD=0`` turns
that off; ``/readyz`` answers 503 until it is loaded) and the orphan sweep
starts (``ORPHAN_SWEEP_INTERVAL_S``; :mod:`clinical.runtime.replica`).

A connection that sends no complete request headers, or nothing at all,
for ``HTTP_HEADER_TIMEOUT_S`` (default 20 s) is closed: Twisted's HTTP idle
timeout (``HTTPFactory.timeOut``), which Daphne leaves at Twisted's 60 s
(plus 15 s to abort), so slow-header clients held connections for 75 s. It
is paused while a request is answered (streams are not cut) and does not
apply to an upgraded WebSocket. A WebSocket's opening handshake may take up
to ``WEBSOCKET_HANDSHAKE_TIMEOUT_S`` (default 20 s, as Daphne's CLI; its
``Server`` alone drops the connection after 5 s without an answer).

The first SIGTERM or SIGINT stops listening (nginx passes new connections
to the other replicas), marks the replica draining (``/readyz`` 503,
new translations refused with ``draining``), lets streams finish for up to
``DRAIN_TIMEOUT_S``, then cancels and records the rest, closes every socket
with 1012 and exits 0 (:func:`clinical.runtime.drain.drain_run`). A second signal
stops at once (streams then left pending are finalised by another
replica's sweep). Either way the process ends only when the engine's
thread has finished the step it is in: on llama.cpp during the cluster
warm-up, that is one prefix evaluation, which llama.cpp cannot stop (the
default model on two cores: exit 6.1 s after SIGTERM with nothing to
drain).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

logger = logging.getLogger("clinical.serve")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m clinical.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--proxy-headers", action="store_true",
                        default=os.environ.get("PROXY_HEADERS", "") in {"1", "true", "yes"},
                        help="take the client address from the last X-Forwarded-For entry, the one "
                             "nginx wrote (one trusted hop)")
    parser.add_argument("--verbosity", type=int, default=1, help="Daphne's verbosity (0-3)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")
    # Daphne's server module installs the asyncio Twisted reactor: import it first.
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server
    from django.conf import settings
    from twisted.internet import reactor

    from clinical.asgi import application  # sets Django up
    from clinical.ops.sweeps import sweep_forever
    from clinical.runtime import drain
    from clinical.translation.engine import engine_get, engine_shutdown

    class DrainingServer(Server):
        """Daphne's server, keeping its listening ports so a drain can
        close them, with the HTTP idle timeout bounded (module docstring)."""

        ports: list = []

        def listen_success(self, port):
            # Before the reactor runs: every connection is built with it.
            self.http_factory.timeOut = settings.HTTP_HEADER_TIMEOUT_S
            self.ports.append(port)
            return super().listen_success(port)

    _allow_service_restart_close()
    _answer_oversized_messages()
    state = {"signals": 0}

    async def shut_down() -> None:
        for port in DrainingServer.ports:
            port.stopListening()
        try:
            await drain.drain_run()
            await engine_shutdown()
        except Exception:  # noqa: BLE001 - stop anyway
            logger.exception("drain failed")
        finally:
            reactor.stop()

    def on_signal(signum: int) -> None:
        state["signals"] += 1
        if state["signals"] == 1:
            logger.warning("%s: draining replica %s (up to %.0f s)", signal.Signals(signum).name,
                           settings.REPLICA_ID, settings.DRAIN_TIMEOUT_S)
            drain.drain_begin()
            asyncio.get_event_loop().create_task(shut_down())
        else:
            logger.warning("second signal: stopping now")
            reactor.stop()

    def on_ready() -> None:
        loop = asyncio.get_event_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        loop.create_task(sweep_forever(), name="orphan-sweep")
        if os.environ.get("SERVE_PRELOAD", "1") not in {"0", "false", "no"}:
            loop.create_task(_preload(engine_get), name="engine-preload")
        logger.info("replica %s serving on %s:%s", settings.REPLICA_ID, args.host, args.port)

    if args.proxy_headers:
        _trust_one_proxy_hop()
    server = DrainingServer(
        application=application,
        endpoints=build_endpoint_description_strings(host=args.host, port=args.port),
        signal_handlers=False,
        ready_callable=on_ready,
        proxy_forwarded_address_header="X-Forwarded-For" if args.proxy_headers else None,
        proxy_forwarded_port_header="X-Forwarded-Port" if args.proxy_headers else None,
        proxy_forwarded_proto_header="X-Forwarded-Proto" if args.proxy_headers else None,
        verbosity=args.verbosity,
        # Streams are long; the drain, not Daphne, decides when they end.
        application_close_timeout=max(10, int(settings.DRAIN_TIMEOUT_S) + 5),
        # Daphne's Server would drop a handshake after 5 s (its CLI allows 20 s).
        websocket_handshake_timeout=settings.WEBSOCKET_HANDSHAKE_TIMEOUT_S,
        websocket_max_message_size=settings.WEBSOCKET_MAX_MESSAGE_BYTES,
        websocket_max_frame_size=settings.WEBSOCKET_MAX_MESSAGE_BYTES,
    )
    server.run()
    logger.info("replica %s stopped", settings.REPLICA_ID)
    return 0


def _allow_service_restart_close() -> None:
    """Let Daphne send close code 1012 (Service Restart, registered with
    IANA for exactly this). Daphne closes sockets through autobahn's
    ``sendClose``, which only accepts 1000 and 3000-4999 and otherwise
    raises (the socket is then dropped without a close frame); autobahn's
    ``sendCloseFrame`` sends any code and keeps the closing handshake."""
    from daphne.ws_protocol import WebSocketProtocol

    from clinical.runtime.drain import CLOSE_SERVICE_RESTART

    if getattr(WebSocketProtocol, "_clinical_1012", False):
        return
    server_close = WebSocketProtocol.serverClose

    def serverClose(self, code=None):  # noqa: N802 - Daphne's name
        if code == CLOSE_SERVICE_RESTART:
            self.sendCloseFrame(code=code, reasonUtf8=b"service restart")
        else:
            server_close(self, code=code)

    WebSocketProtocol.serverClose = serverClose
    WebSocketProtocol._clinical_1012 = True


def _answer_oversized_messages() -> None:
    """A WebSocket message over ``WEBSOCKET_MAX_MESSAGE_BYTES`` gets an
    ``error`` frame (``frame_too_large``) and a close with 1009 (message too
    big); the rest of its bytes are read and discarded. Autobahn's own answer
    drops the TCP connection at once (``failByDrop``), which the page sees
    as 1006 with no reason."""
    import json

    from daphne.ws_protocol import WebSocketProtocol

    from clinical.web.frames import error_frame, frame_too_large_message

    if getattr(WebSocketProtocol, "_clinical_too_big", False):
        return
    exceeded = WebSocketProtocol._max_message_size_exceeded

    def _max_message_size_exceeded(self, msg_size, max_msg_size, reason):
        if self.state == WebSocketProtocol.STATE_OPEN:
            frame = error_frame("frame_too_large", frame_too_large_message())
            self.sendMessage(json.dumps(frame).encode(), isBinary=False)
        self.failByDrop = False  # the closing handshake, so the frame above arrives
        exceeded(self, msg_size, max_msg_size, reason)

    WebSocketProtocol._max_message_size_exceeded = _max_message_size_exceeded
    WebSocketProtocol._clinical_too_big = True


def _trust_one_proxy_hop() -> None:
    """Take the client address from the last X-Forwarded-For entry, the one
    the proxy in front (nginx, deploy/nginx.conf.template) wrote.

    Daphne takes the first entry, which a client chooses itself wherever a
    proxy appends to the header (``$proxy_add_x_forwarded_for``): each
    forged address would then be a new client to the login lockout and the
    rate limits. Exactly one hop is trusted: entries before the last are
    ignored."""
    from daphne import http_protocol, utils, ws_protocol

    if getattr(utils, "_clinical_one_hop", False):
        return
    parse = utils.parse_x_forwarded_for

    def parse_last_hop(headers, address_header_name="X-Forwarded-For", *args, **kwargs):
        if address_header_name:
            if not isinstance(headers, dict):
                headers = dict(headers.getAllRawHeaders())
            name = address_header_name.lower().encode()
            headers = {key.lower(): values for key, values in headers.items()}
            if name in headers:
                # HTTP requests hand over twisted's lists of values, sockets
                # a dict of single bytes values (daphne.ws_protocol).
                values = headers[name]
                joined = b",".join(values) if isinstance(values, list) else values
                headers[name] = [joined.rsplit(b",", 1)[-1].strip()]
        return parse(headers, address_header_name, *args, **kwargs)

    for module in (utils, http_protocol, ws_protocol):
        module.parse_x_forwarded_for = parse_last_hop
    utils._clinical_one_hop = True


async def _preload(engine_get) -> None:
    try:
        await engine_get()
    except Exception as exc:  # noqa: BLE001 - /readyz reports it; requests retry the load
        logger.error("engine preload failed: %s", type(exc).__name__)


if __name__ == "__main__":
    sys.exit(main())
