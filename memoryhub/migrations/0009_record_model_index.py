"""An index on (embedding_model, domain, status): which models' vectors a domain holds
and how many, answered from the index during an embedding-model change. Built
concurrently: writes go on while it builds on a large table."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("memoryhub", "0008_knowledge_base_deletion"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="memoryrecord",
            index=models.Index(
                fields=["embedding_model", "domain", "status"], name="memoryhub_record_model_idx"
            ),
        ),
    ]
