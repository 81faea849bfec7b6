"""Account events (AccountEvent, append-only): changes of a user's groups
and flags and of API clients. On PostgreSQL a trigger refuses UPDATE and
DELETE of them in the database too, like the audit events' trigger (0004)."""

import django.utils.timezone
from django.db import migrations, models

PG_FORWARD = """
CREATE OR REPLACE FUNCTION clinical_accountevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'clinical_accountevent is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER clinical_accountevent_append_only
    BEFORE UPDATE OR DELETE ON clinical_accountevent
    FOR EACH ROW EXECUTE FUNCTION clinical_accountevent_append_only();
"""
PG_BACKWARD = """
DROP TRIGGER IF EXISTS clinical_accountevent_append_only ON clinical_accountevent;
DROP FUNCTION IF EXISTS clinical_accountevent_append_only();
"""


def trigger_forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_FORWARD, params=None)


def trigger_backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_BACKWARD, params=None)


class Migration(migrations.Migration):

    dependencies = [
        ('clinical', '0022_rerun_change_note_help_text'),
    ]

    operations = [
        migrations.CreateModel(
            name='AccountEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                ('action', models.CharField(choices=[('created', 'Created'), ('changed', 'Changed'), ('deleted', 'Deleted')], max_length=8)),
                ('subject_kind', models.CharField(choices=[('user', 'User account'), ('api_client', 'API client')], db_index=True, max_length=12)),
                ('subject_id', models.CharField(db_index=True, help_text="The user's id, or the API client's prefix.", max_length=64)),
                ('subject_label', models.CharField(blank=True, help_text='Username or client name.', max_length=150)),
                ('actor_user_id', models.PositiveIntegerField(blank=True, help_text='Id of the user who made the change, if known.', null=True)),
                ('actor', models.CharField(blank=True, help_text='Username of who made the change; empty outside a request.', max_length=150)),
                ('changes', models.JSONField(blank=True, default=dict, help_text='{"field": [before, after]}; groups as sorted lists of names.')),
            ],
            options={
                'ordering': ['-created_at', '-id'],
                'base_manager_name': 'objects',
            },
        ),
        migrations.RunPython(trigger_forward, trigger_backward),
    ]
