"""IT creates, changes and revokes API clients."""

from django.db import migrations


def forward(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    app_config = apps.get_app_config("clinical")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    it, _ = Group.objects.get_or_create(name="IT")
    it.permissions.add(*Permission.objects.filter(
        content_type__app_label="clinical",
        codename__in=["view_apiclient", "add_apiclient", "change_apiclient"]))


class Migration(migrations.Migration):
    dependencies = [("clinical", "0005_api_clients")]
    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
