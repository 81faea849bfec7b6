from django.apps import AppConfig


class ClinicalConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "clinical"
    verbose_name = "Clinical translation"

    def ready(self) -> None:
        # Imported here and in the handlers below, not at the top: this module
        # is loaded before Django's app registry is ready, and those modules
        # import models.
        from django.db.models.signals import post_migrate

        from clinical.api import schema  # noqa: F401 - registers the OpenAPI auth extension
        from clinical.runtime.metrics import connect_signals

        connect_signals()
        post_migrate.connect(_append_only_triggers, sender=self, dispatch_uid="clinical.append_only")
        post_migrate.connect(_roles, sender=self, dispatch_uid="clinical.roles")


def _append_only_triggers(sender, using, **kwargs) -> None:
    from django.db import connections

    from clinical.audit import append_only_triggers_ensure

    append_only_triggers_ensure(connection=connections[using])


def _roles(sender, using, **kwargs) -> None:
    from django.apps import apps as installed_apps

    from clinical.roles import roles_ensure

    # migrate passes its project state's registry; flush passes none
    roles_ensure(apps=kwargs.get("apps") or installed_apps, using=using)
