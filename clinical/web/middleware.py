"""Response headers for pages and API answers; the actor of account changes."""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.utils.cache import add_never_cache_headers
from django.utils.deprecation import MiddlewareMixin


class NoStoreMiddleware(MiddlewareMixin):
    """``Cache-Control: max-age=0, no-cache, no-store, must-revalidate,
    private`` on every response the application writes: translations, the
    history, handouts and the API hold clinical text, which neither the
    browser's cache nor a proxy may keep (static files are answered before
    this, by WhiteNoise, and stay cacheable)."""

    def process_response(self, request, response):
        add_never_cache_headers(response)
        return response


class ChangeActorMiddleware:
    """Makes the request's signed-in user the actor of the account changes
    it causes (:data:`clinical.audit.change_request`, read when an
    ``AccountEvent`` is written), for the request's duration only."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        from clinical.audit import change_request

        if iscoroutinefunction(self):
            return self._acall(request)
        token = change_request.set(request)
        try:
            return self.get_response(request)
        finally:
            change_request.reset(token)

    async def _acall(self, request):
        from clinical.audit import change_request

        token = change_request.set(request)
        try:
            return await self.get_response(request)
        finally:
            change_request.reset(token)
