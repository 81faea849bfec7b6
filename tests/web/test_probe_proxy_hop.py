"""``clinical.serve --proxy-headers`` trusts one hop: the client address is
the last X-Forwarded-For entry (the one the proxy wrote), never an entry the
client put before it."""

from __future__ import annotations

from pathlib import Path

from daphne import http_protocol, utils, ws_protocol

from clinical import serve

TEMPLATE = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf.template"


def test_the_client_address_is_the_last_hop(monkeypatch):
    for module in (utils, http_protocol, ws_protocol):
        monkeypatch.setattr(module, "parse_x_forwarded_for", module.parse_x_forwarded_for)
    monkeypatch.setattr(utils, "_clinical_one_hop", False, raising=False)
    serve._trust_one_proxy_hop()
    for module in (http_protocol, ws_protocol):
        address, _ = module.parse_x_forwarded_for(
            {b"X-Forwarded-For": [b"203.0.113.9, 198.51.100.1,10.0.0.7"]}, "X-Forwarded-For",
            original_addr=["127.0.0.1", 1234])
        assert address == ["10.0.0.7", 0]
    assert module.parse_x_forwarded_for({}, "X-Forwarded-For", original_addr=["127.0.0.1", 1])[0] == [
        "127.0.0.1", 1]


def test_a_socket_handshake_gets_the_last_hop_too(monkeypatch):
    """Daphne's socket protocol hands over a dict of single bytes values,
    not twisted's lists."""
    for module in (utils, http_protocol, ws_protocol):
        monkeypatch.setattr(module, "parse_x_forwarded_for", module.parse_x_forwarded_for)
    monkeypatch.setattr(utils, "_clinical_one_hop", False, raising=False)
    serve._trust_one_proxy_hop()
    address, _ = ws_protocol.parse_x_forwarded_for(
        {b"x-forwarded-for": b"203.0.113.9, 10.0.0.7"}, "X-Forwarded-For", original_addr=["127.0.0.1", 1234])
    assert address == ["10.0.0.7", 0]


def test_nginx_writes_the_client_address_itself():
    text = TEMPLATE.read_text()
    assert "$proxy_add_x_forwarded_for" not in text
    assert text.count("proxy_set_header X-Forwarded-For $remote_addr;") == 2
