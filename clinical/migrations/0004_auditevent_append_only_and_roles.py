"""Refuse UPDATE and DELETE of audit events in PostgreSQL itself, and create
the two roles: Clinician (the translation page) and IT (the admin)."""

from django.db import migrations

PG_FORWARD = """
CREATE OR REPLACE FUNCTION clinical_auditevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'clinical_auditevent is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER clinical_auditevent_append_only
    BEFORE UPDATE OR DELETE ON clinical_auditevent
    FOR EACH ROW EXECUTE FUNCTION clinical_auditevent_append_only();
"""
PG_BACKWARD = """
DROP TRIGGER IF EXISTS clinical_auditevent_append_only ON clinical_auditevent;
DROP FUNCTION IF EXISTS clinical_auditevent_append_only();
"""

IT_PERMISSIONS = [
    ("clinical", "auditevent", ["view"]),
    ("clinical", "translation", ["view"]),
    ("clinical", "rerun", ["view"]),
    ("auth", "user", ["view", "add", "change"]),
    ("auth", "group", ["view"]),
    ("axes", "accessattempt", ["view"]),
    ("axes", "accessfailurelog", ["view"]),
    ("axes", "accesslog", ["view"]),
    ("auditlog", "logentry", ["view"]),
]


def trigger_forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_FORWARD, params=None)


def trigger_backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_BACKWARD, params=None)


def roles_forward(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    Group.objects.get_or_create(name="Clinician")
    it, _ = Group.objects.get_or_create(name="IT")
    for app_label, model, actions in IT_PERMISSIONS:
        codenames = [f"{action}_{model}" for action in actions]
        it.permissions.add(*Permission.objects.filter(
            content_type__app_label=app_label, codename__in=codenames))


def roles_backward(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=["Clinician", "IT"]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("clinical", "0003_auditevent"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("axes", "__latest__"),
        ("auditlog", "__latest__"),
    ]

    operations = [
        migrations.RunPython(trigger_forward, trigger_backward),
        migrations.RunPython(roles_forward, roles_backward),
    ]
