"""API client authentication, scopes and per-client throttling.

Clients send ``Authorization: Bearer <prefix>.<secret>``; keys are stored
hashed by djangorestframework-api-key. No or a bad token gives 401, a token
without the scope an endpoint needs gives 403.
"""

from __future__ import annotations

from rest_framework import authentication, exceptions, permissions, throttling

from clinical.models import APIClient


class APIClientAuthentication(authentication.BaseAuthentication):
    """Authenticates ``request.auth`` as an :class:`APIClient` (``request.user``
    stays ``None``: API clients are not users).

    Raises:
        AuthenticationFailed: malformed header, unknown, revoked or expired
            token (HTTP 401).
    """

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, key = header.partition(" ")
        if scheme.lower() != self.keyword.lower() or not key.strip():
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <client token>'.")
        try:
            client = APIClient.objects.get_from_key(key.strip())
        except APIClient.DoesNotExist:
            raise exceptions.AuthenticationFailed("Invalid, revoked or expired client token.") from None
        if client.has_expired:
            raise exceptions.AuthenticationFailed("Invalid, revoked or expired client token.")
        return (None, client)

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="api"'


class HasScope(permissions.BasePermission):
    """Requires an authenticated client holding the view's ``required_scope``."""

    message = "This client token lacks the scope this endpoint needs."

    def has_permission(self, request, view) -> bool:
        client = request.auth
        if not isinstance(client, APIClient):
            raise exceptions.NotAuthenticated("A client token is required.")
        scope = getattr(view, "required_scopes", {}).get(request.method)
        return scope is None or scope in client.scopes


class APIClientRateThrottle(throttling.SimpleRateThrottle):
    """Per-client request rate (``APIClient.throttle_rate``), counted in the
    shared cache (Redis), so it holds across web replicas."""

    scope = "api_client"

    def allow_request(self, request, view) -> bool:
        client = request.auth
        if not isinstance(client, APIClient):
            return True
        self.rate = client.throttle_rate
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_rate(self):
        return None  # set per client in allow_request

    def get_cache_key(self, request, view) -> str | None:
        client = request.auth
        return self.cache_format % {"scope": self.scope, "ident": client.prefix} if client else None
