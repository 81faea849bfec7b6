from django.apps import AppConfig


class ClinicalConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "clinical"
    verbose_name = "Clinical translation"

    def ready(self) -> None:
        from clinical.api import schema  # noqa: F401 - registers the OpenAPI auth extension
        from clinical.runtime.metrics import connect_signals

        connect_signals()
