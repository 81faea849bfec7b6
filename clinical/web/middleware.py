"""Response headers for pages and API answers."""

from __future__ import annotations

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
