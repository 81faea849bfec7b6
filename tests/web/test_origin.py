"""The WebSocket origin list beyond the page's own origin (the live test,
tests/live/test_access.py, performs the foreign-origin attack): trusted
origins and a proxy that ends TLS."""

from __future__ import annotations

import pytest

from clinical.web.origin import SameOriginValidator, allowed_origins


def scope(host: str, **headers: str) -> dict:
    raw = [(b"host", host.encode())] + [(k.replace("_", "-").lower().encode(), v.encode())
                                         for k, v in headers.items()]
    return {"type": "websocket", "headers": raw}


def accepted(origin: str, sc: dict) -> bool:
    from urllib.parse import urlparse

    validator = SameOriginValidator(None)
    return any(validator.match_allowed_origin(urlparse(origin), p) for p in allowed_origins(sc))


def test_only_the_pages_own_scheme_host_and_port_pass(settings):
    settings.CSRF_TRUSTED_ORIGINS = []
    sc = scope("localhost:8000")
    assert accepted("http://localhost:8000", sc)
    for origin in ("http://localhost:1234", "https://localhost:8000", "http://localhost", "null"):
        assert not accepted(origin, sc), origin


def test_a_host_outside_allowed_hosts_gives_no_own_origin(settings):
    settings.CSRF_TRUSTED_ORIGINS = []
    assert allowed_origins(scope("evil.example:8000")) == []


def test_trusted_origins_match_with_their_scheme_and_subdomain_wildcard(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://ehr.hospital.example", "https://*.clinic.example"]
    sc = scope("localhost:8000")
    assert accepted("https://ehr.hospital.example", sc)
    assert accepted("https://ward3.clinic.example", sc)
    assert not accepted("http://ehr.hospital.example", sc)
    assert not accepted("https://ehr.hospital.example:8443", sc)


@pytest.mark.parametrize("proto, expected", [("https", "https://app.hospital.example"),
                                             ("http", "http://app.hospital.example")])
def test_behind_a_tls_proxy_the_page_origin_is_https(settings, proto, expected):
    settings.ALLOWED_HOSTS = ["app.hospital.example"]
    settings.CSRF_TRUSTED_ORIGINS = []
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert allowed_origins(scope("app.hospital.example", x_forwarded_proto=proto)) == [expected]
