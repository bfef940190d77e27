from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memoryhub", "0020_idempotent_requests")]

    operations = [
        migrations.AddField(
            model_name="workerheartbeat",
            name="holding",
            field=models.JSONField(
                blank=True, editable=False, null=True, verbose_name="records held"
            ),
        ),
    ]
