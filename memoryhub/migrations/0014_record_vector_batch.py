"""Bulk-stored vectors: the batch that stored a record's vector (``vector_batch``), the
sequence numbering those batches, and the index of the vectors not yet in an HNSW index.

Adding a nullable column without a default rewrites nothing; the partial index starts
empty (every existing vector was stored row by row)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memoryhub", "0013_record_occurred_at"),
        ("tenants", "0003_domain_hybrid_vector_weight"),
    ]

    operations = [
        migrations.AddField(
            model_name="memoryrecord",
            name="vector_batch",
            field=models.BigIntegerField(
                blank=True, editable=False, null=True, verbose_name="vector batch"
            ),
        ),
        migrations.AddIndex(
            model_name="memoryrecord",
            index=models.Index(
                condition=models.Q(("vector_batch__isnull", False)),
                fields=["domain", "vector_batch"],
                name="memoryhub_record_delta_idx",
            ),
        ),
        migrations.RunSQL(
            "CREATE SEQUENCE IF NOT EXISTS memoryhub_vector_batch",
            "DROP SEQUENCE IF EXISTS memoryhub_vector_batch",
        ),
    ]
