from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('clinical', '0021_faithfulness_direction_help_text'),
    ]

    operations = [
        migrations.AlterField(
            model_name='rerun',
            name='change_note',
            field=models.TextField(blank=True, help_text='Why the text changed, in plain words, as the clinician is told (clinical.rerun.change_note.rerun_change_note).'),
        ),
    ]
