"""Keep audit events and handout edits append-only on the embedded SQLite
as on PostgreSQL (0004, 0009), where the models' guard covered the default
manager only and ``_base_manager.filter(...).update()`` went through:

* the guarded manager is also the base manager (every backend);
* SQLite refuses UPDATE in a trigger, as PostgreSQL's trigger does. DELETE
  stays with the model layer on SQLite: Django empties SQLite tables with
  ``DELETE FROM`` (``manage.py flush``, the test runner), where PostgreSQL
  uses ``TRUNCATE``, which row triggers do not see.
"""

from django.db import migrations

TABLES = ("clinical_auditevent", "clinical_translationedit")


def sqlite_forward(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER IF NOT EXISTS {table}_append_only_update BEFORE UPDATE ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{table} is append-only (UPDATE refused)'); END;")


def sqlite_backward(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only_update")


class Migration(migrations.Migration):
    dependencies = [("clinical", "0011_rerun_broker_epoch")]
    operations = [
        migrations.AlterModelOptions(
            name="auditevent", options={"base_manager_name": "objects", "ordering": ["-created_at", "-id"]}),
        migrations.AlterModelOptions(
            name="translationedit", options={"base_manager_name": "objects", "ordering": ["-created_at", "-id"]}),
        migrations.RunPython(sqlite_forward, sqlite_backward),
    ]
