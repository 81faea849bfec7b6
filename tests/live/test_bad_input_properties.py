"""Property-based bad input (hypothesis) against a real Daphne: random JSON,
wrong types, huge strings, control characters, invalid UTF-8 and binary
frames on the WebSocket, and the same kinds of bodies on the REST API.

For every input: no server error, a clear error message (a code and a
sentence), the server still serves the next good request, and the audit
log holds exactly one final record per accepted request and none for the
others."""

from __future__ import annotations

import contextlib
import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from clinical.models import APIClient, AuditEvent, Translation
from tests.data import laymaker_sentences

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Each of the six kinds of message (five kinds of text for a translation)
# comes up dozens of times in these counts; more examples repeat kinds.
WS_EXAMPLES = 350
API_EXAMPLES = 225
GENEROUS_LIMITS = {"TRANSLATE_RATE_PER_USER": "1000000/minute", "SOCKET_FRAME_RATE": "1000000/second"}
FINAL_OUTCOMES = ("completed", "cancelled", "error")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)
# Strings a person or a broken EHR could send: control characters, lone
# surrogates escaped in JSON, zero-width and right-to-left marks, and sizes
# around and far beyond the 8,000-character limit.
awkward_text = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(codec="utf-8", categories=["Cc", "Cf", "Zs", "Zl", "Zp"]), max_size=50),
    st.builds(lambda n, c: c * n, st.integers(7_990, 9_000), st.sampled_from(["a", "é", "\u200b", " "])),
    st.builds(lambda n: "x" * n, st.integers(100_000, 300_000)),
    st.sampled_from(["", " ", "\x00", "\ud800", "\n\t", laymaker_sentences()[7] + "\x07"]),
)
wrong_types = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                        st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=3), st.integers()))
translate_frames = st.fixed_dictionaries(
    {"type": st.just("translate"), "text": awkward_text | wrong_types},
    optional={"reading_level": json_values, "language": json_values, "extra": json_values})
other_frames = st.fixed_dictionaries(
    {"type": st.sampled_from(["cancel", "watch", "translated", "", "TRANSLATE"]) | wrong_types},
    optional={"id": json_values | st.uuids().map(str), "text": awkward_text})


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass").decode("utf-8", "replace")


ws_messages = st.one_of(
    translate_frames.map(lambda f: ("text", json.dumps(f))),  # ensure_ascii keeps lone surrogates escaped
    other_frames.map(lambda f: ("text", _dumps(f))),
    json_values.map(lambda v: ("text", json.dumps(v))),
    st.text(max_size=200).map(lambda t: ("text", t.encode("utf-8", "replace").decode("utf-8"))),
    st.binary(max_size=300).map(lambda b: ("binary", b)),
    st.binary(min_size=1, max_size=50).map(lambda b: ("invalid-utf8", b"\xff" + b)),
)

class Socket:
    """A logged-in socket that reconnects when the server closed it.

    After each message it sends a probe (a ``watch`` of a translation whose
    verification is queued) whose unique answer marks the end of the
    message's own answers."""

    def __init__(self, server, session: str, probe_id: str) -> None:
        self.server, self.session, self.ws = server, session, None
        self.probe = json.dumps({"type": "watch", "id": probe_id})
        self.probe_id = probe_id
        self.reconnects = 0
        self.connections = contextlib.ExitStack()

    def open(self):
        if self.ws is None:
            self.ws = self.connections.enter_context(connect(self.server.ws_url + "/ws/translate/", open_timeout=30, max_size=None,
                              additional_headers={"Cookie": f"sessionid={self.session}",
                                                  "Origin": self.server.base_url}))
        return self.ws

    def exchange(self, kind: str, payload) -> list[dict]:
        """Send one message then the probe; return the frames answering the
        message. ``[]`` when the server failed the connection, as WebSocket
        requires for invalid UTF-8 in a text frame (RFC 6455 §8.1)."""
        ws = self.open()
        if kind == "invalid-utf8":
            ws.send(payload, text=True)
        else:
            ws.send(payload)
        frames, probed = [], False
        try:
            ws.send(self.probe)
            while True:
                frame = json.loads(ws.recv(timeout=30))
                if frame.get("id") == self.probe_id and frame["type"] == "verifying":
                    probed = True
                else:
                    frames.append(frame)
                streaming = frames and frames[0]["type"] == "started" and \
                    frames[-1]["type"] not in ("done", "error", "cancelled")
                if probed and not streaming:
                    return frames
        except ConnectionClosed as closed:
            self.ws = None
            self.reconnects += 1
            assert kind == "invalid-utf8", f"{kind} {payload!r:.200} closed the socket: {closed}"
            # Daphne's autobahn fails the connection by dropping it (its
            # failByDrop default) or with a 1007 close frame.
            assert closed.rcvd is None or closed.rcvd.code == 1007, closed
            return []


@pytest.fixture
def probe_translation(clinician):
    """A translation of the clinician whose verification is queued (no
    worker runs here), for :class:`Socket`'s probe."""
    return Translation.objects.create(
        user=clinician, source=Translation.Source.CLI, input_text=laymaker_sentences()[9],
        output_text="probe", status=Translation.Status.COMPLETED,
        verification=Translation.Verification.PENDING)


def _is_cancel(payload) -> bool:
    try:
        frame = json.loads(payload)
    except (TypeError, ValueError):
        return False
    return isinstance(frame, dict) and frame.get("type") == "cancel"


def assert_clear_error(frame: dict) -> None:
    assert frame["type"] == "error", frame
    assert frame["code"] and isinstance(frame["code"], str)
    assert isinstance(frame["message"], str) and len(frame["message"]) > 10


def test_bad_websocket_frames_get_clear_errors_and_lose_nothing(daphne_server, clinician, probe_translation):
    server = daphne_server(INFERENCE_ENGINE="fake", **GENEROUS_LIMITS)
    socket = Socket(server, server.login(clinician.username), str(probe_translation.request_id))
    seen = {"examples": 0, "accepted": 0, "errors": 0}

    @settings(max_examples=WS_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(ws_messages)
    def send(message):
        kind, payload = message
        frames = socket.exchange(kind, payload)
        seen["examples"] += 1
        if frames and frames[0]["type"] == "started":
            seen["accepted"] += 1
            assert frames[-1]["type"] == "done", frames[-1]
            assert json.loads(payload)["type"] == "translate"
        elif kind != "invalid-utf8" and not _is_cancel(payload):  # an idle cancel needs no answer
            assert len(frames) == 1, frames
            assert_clear_error(frames[0])
            seen["errors"] += 1
        # The next good request is served.
        if seen["examples"] % 50 == 0:
            good = socket.exchange("text", json.dumps({"type": "translate", "text": laymaker_sentences()[0]}))
            assert good[-1]["type"] == "done", good
            seen["accepted"] += 1

    with socket.connections:
        send()
        good = socket.exchange("text", json.dumps({"type": "translate", "text": laymaker_sentences()[1]}))
    assert good[-1]["type"] == "done"
    assert seen["examples"] >= WS_EXAMPLES and seen["errors"] > WS_EXAMPLES // 2 and socket.reconnects > 0
    seen["accepted"] += 1
    assert_one_final_audit_record_per_accepted_request(seen["accepted"], source="web")
    assert server.process.poll() is None
    assert "Traceback" not in server.logs()


api_bodies = st.one_of(
    st.fixed_dictionaries({"text": awkward_text | wrong_types},
                          optional={"reading_level": json_values, "language": json_values,
                                    "wait": json_values}).map(lambda b: ("json", json.dumps(b).encode())),
    json_values.map(lambda v: ("json", json.dumps(v).encode())),
    st.binary(max_size=300).map(lambda b: ("json", b)),
    st.binary(min_size=1, max_size=50).map(lambda b: ("json", b"\xff" + b)),
    st.text(max_size=100).map(lambda t: ("text/plain", t.encode("utf-8", "replace"))),
    st.text(max_size=100).map(lambda t: ("form", t.encode("utf-8", "replace"))),
)
CONTENT_TYPES = {"json": "application/json", "text/plain": "text/plain",
                 "form": "application/x-www-form-urlencoded"}


def test_bad_api_bodies_get_clear_errors_and_lose_nothing(daphne_server):
    server = daphne_server(INFERENCE_ENGINE="fake", **GENEROUS_LIMITS)
    _, key = APIClient.objects.create_key(name="fuzz", throttle_rate="1000000/min")
    api = httpx.Client(base_url=server.base_url + "/api/v1", timeout=60,
                       headers={"Authorization": f"Bearer {key}"})
    seen = {"examples": 0, "accepted": 0}

    @settings(max_examples=API_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(api_bodies)
    def post(body):
        kind, content = body
        response = api.post("/translations/", content=content, headers={"Content-Type": CONTENT_TYPES[kind]})
        seen["examples"] += 1
        assert response.status_code < 500, (response.status_code, response.text[:300])
        if response.status_code in (201, 202):
            seen["accepted"] += 1
            return
        assert response.status_code in (400, 415), response.status_code
        error = response.json()
        assert isinstance(error, dict) and error
        messages = [m for value in error.values() for m in (value if isinstance(value, list) else [value])]
        assert messages and all(isinstance(m, (str, dict)) and m for m in messages), error

    post()
    assert seen["examples"] >= API_EXAMPLES
    good = api.post("/translations/", json={"text": laymaker_sentences()[2]})
    assert good.status_code == 201 and good.json()["status"] == "completed"
    seen["accepted"] += 1
    assert_one_final_audit_record_per_accepted_request(seen["accepted"], source="api")
    assert "Traceback" not in server.logs()


def assert_one_final_audit_record_per_accepted_request(accepted: int, *, source: str) -> None:
    translations = list(Translation.objects.filter(source=source).values_list("request_id", "status"))
    assert len(translations) == accepted
    assert all(status in FINAL_OUTCOMES for _, status in translations)
    final = list(AuditEvent.objects.filter(event_type="translation", source=source, outcome__in=FINAL_OUTCOMES)
                 .values_list("request_id", flat=True))
    assert sorted(map(str, final)) == sorted(str(request_id) for request_id, _ in translations)
