# Reading level, safety check, glossary and the re-run reason.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('clinical', '0007_reading_level_language'),
    ]

    operations = [
        migrations.AddField(
            model_name='translation',
            name='input_fkgl',
            field=models.FloatField(blank=True, null=True, help_text='Flesch-Kincaid grade level of the input (textstat).'),
        ),
        migrations.AddField(
            model_name='translation',
            name='output_fkgl',
            field=models.FloatField(blank=True, null=True, help_text='Flesch-Kincaid grade level of the output; English output only.'),
        ),
        migrations.AddField(
            model_name='translation',
            name='output_readability',
            field=models.FloatField(blank=True, null=True, help_text="The output's score on readability_measure (grade for fkgl, 0-100 ease for szigriszt_pazos)."),
        ),
        migrations.AddField(
            model_name='translation',
            name='readability_measure',
            field=models.CharField(blank=True, max_length=24, help_text='"fkgl" (English output), "szigriszt_pazos" (Spanish output) or "" (none; see the note).'),
        ),
        migrations.AddField(
            model_name='translation',
            name='readability_note',
            field=models.CharField(blank=True, max_length=200, help_text='Why no measure was computed, or how to read it.'),
        ),
        migrations.AddField(
            model_name='translation',
            name='safety_passed',
            field=models.BooleanField(blank=True, null=True, help_text='Every number+unit, dose, drug, laterality and negation of the input is in the output.'),
        ),
        migrations.AddField(
            model_name='translation',
            name='safety_missing',
            field=models.JSONField(blank=True, default=list, help_text='Missing items: [{"kind", "text"}].'),
        ),
        migrations.AddField(
            model_name='translation',
            name='glossary',
            field=models.JSONField(blank=True, default=list, help_text='Medical terms of the input: [{"term", "definition", "source"}].'),
        ),
        migrations.AddField(
            model_name='translation',
            name='rerun_reason',
            field=models.CharField(blank=True, max_length=32, help_text='Why the full-precision re-run was queued: "low_confidence", "safety_failed" or both, comma-separated.'),
        ),
        migrations.AlterField(
            model_name='translation',
            name='verification',
            field=models.CharField(choices=[('not_needed', 'Not needed'), ('pending', 'Verification pending'), ('running', 'Verifying'), ('verified', 'Verified'), ('failed', 'Verification failed')], db_index=True, default='not_needed', help_text='Full-precision re-run state; set when confidence is below the threshold or the safety check failed.', max_length=12),
        ),
        migrations.AddField(
            model_name='rerun',
            name='output_fkgl',
            field=models.FloatField(blank=True, null=True, help_text='FKGL of the output; English only.'),
        ),
        migrations.AddField(
            model_name='rerun',
            name='output_readability',
            field=models.FloatField(blank=True, null=True, help_text="Score on the translation's readability_measure."),
        ),
        migrations.AddField(
            model_name='rerun',
            name='safety_passed',
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='rerun',
            name='safety_missing',
            field=models.JSONField(blank=True, default=list, help_text='[{"kind", "text"}]'),
        ),
        migrations.AddField(
            model_name='auditevent',
            name='safety_passed',
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='auditevent',
            name='safety_missing_counts',
            field=models.JSONField(blank=True, default=dict, help_text='Missing items by kind, e.g. {"dose": 1}; no clinical text.'),
        ),
        migrations.AddField(
            model_name='auditevent',
            name='rerun_reason',
            field=models.CharField(blank=True, max_length=32),
        ),
    ]
