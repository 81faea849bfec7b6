"""ASGI entry point: HTTP through Django, WebSockets through Channels.

Served by Daphne: ``daphne clinical.asgi:application``.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from clinical.web.origin import SameOriginValidator  # noqa: E402
from clinical.web.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter({
    "http": django_asgi_app,
    "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
})
