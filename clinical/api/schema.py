"""OpenAPI description of the client-token authentication (drf-spectacular)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class APIClientAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "clinical.api.auth.APIClientAuthentication"
    name = "clientToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "<prefix>.<secret>",
                "description": "Client token created by IT in the admin (shown once)."}
