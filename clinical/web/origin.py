"""The WebSocket's Origin check, with the semantics of Django's CSRF origin
check: a socket is accepted only from the page's own origin (scheme, host
and port of the request, its host in ``ALLOWED_HOSTS``) or from an origin in
``CSRF_TRUSTED_ORIGINS`` (scheme, host and port; ``https://*.example.com``
for subdomains). Channels' ``AllowedHostsOriginValidator`` compares the host
only, so ``http://localhost:1234`` passed for a server on port 8000.

Matching is Channels' own (:class:`channels.security.websocket.OriginValidator`:
scheme, host and port, default ports filled in); what differs is the list,
made per connection from the request's ``Host`` and scheme. The scheme is
``https`` when the socket is ``wss`` or, behind a proxy that ends TLS, when
``SECURE_PROXY_SSL_HEADER`` says so, as for Django's ``request.is_secure()``.
A refused socket is denied at the handshake (HTTP 403).
"""

from __future__ import annotations

from urllib.parse import urlparse

from channels.security.websocket import OriginValidator, WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return None


def _is_secure(scope) -> bool:
    if scope.get("scheme") == "wss":
        return True
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        meta_name, value = proxy_header
        header = meta_name.removeprefix("HTTP_").lower().replace("_", "-").encode("latin1")
        return (_header(scope, header) or "").split(",")[0].strip() == value
    return False


def allowed_origins(scope) -> list[str]:
    """The origins a socket with this ``scope`` may come from."""
    origins = []
    host = _header(scope, b"host")
    if host:
        domain, _ = split_domain_port(host)
        if domain and validate_host(domain, settings.ALLOWED_HOSTS):
            origins.append(f"{'https' if _is_secure(scope) else 'http'}://{host}")
    # CSRF_TRUSTED_ORIGINS writes subdomain wildcards "*.", Channels ".".
    origins += [origin.replace("://*.", "://.", 1) for origin in settings.CSRF_TRUSTED_ORIGINS]
    return origins


class SameOriginValidator(OriginValidator):
    """ASGI middleware: refuses a WebSocket whose ``Origin`` is not the
    page's own or a trusted one (see the module docstring)."""

    def __init__(self, application) -> None:
        super().__init__(application, allowed_origins=[])

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator guards WebSocket connections only")
        origin = _header(scope, b"origin")
        parsed = urlparse(origin) if origin else None
        if parsed is not None and any(self.match_allowed_origin(parsed, pattern)
                                      for pattern in allowed_origins(scope)):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
