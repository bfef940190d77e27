"""Time-scoped facts: when a record's content became true and stopped being true, and
the record that superseded it (services/supersession.py); and whether a turn's vector was
embedded with the turn before it (``TURN_CONTEXT``).

A key is unique among the records nobody superseded: a closed fact keeps its key beside
the fact that replaced it. The new unique index is built concurrently before the old one
is dropped, so keyed writes stay guarded throughout; the new columns are nullable (no
rewrite, no backfill).
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

TABLE = "memoryhub_memoryrecord"
CURRENT_KEY = "memoryhub_record_unique_current_key"
OLD_KEY = "memoryhub_record_unique_key"
COLUMNS = "knowledge_base_id, namespace, key, org_id"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("memoryhub", "0018_citus_keys"),
        ("tenants", "0003_domain_hybrid_vector_weight"),
    ]

    operations = [
        migrations.AddField(
            model_name="memoryrecord",
            name="superseded_by",
            field=models.UUIDField(
                blank=True, editable=False, null=True, verbose_name="superseded by"
            ),
        ),
        migrations.AddField(
            model_name="memoryrecord",
            name="context_embedded",
            # A default in the database too: processes of the previous release, still
            # writing during a rolling upgrade, insert rows without the column.
            field=models.BooleanField(
                db_default=False,
                default=False,
                editable=False,
                verbose_name="embedded with its previous turn",
            ),
        ),
        migrations.AddField(
            model_name="memoryrecord",
            name="valid_from",
            field=models.DateTimeField(
                blank=True,
                help_text="When it became true; empty: when it occurred (or was created).",
                null=True,
                verbose_name="valid from",
            ),
        ),
        migrations.AddField(
            model_name="memoryrecord",
            name="valid_until",
            field=models.DateTimeField(
                blank=True,
                help_text="When it stopped being true (exclusive); empty: still true.",
                null=True,
                verbose_name="valid until",
            ),
        ),
        migrations.AddField(
            model_name="recordversion",
            name="valid_from",
            field=models.DateTimeField(blank=True, null=True, verbose_name="valid from"),
        ),
        migrations.AddField(
            model_name="recordversion",
            name="valid_until",
            field=models.DateTimeField(blank=True, null=True, verbose_name="valid until"),
        ),
        migrations.AlterField(
            model_name="recordversion",
            name="cause",
            field=models.CharField(
                choices=[
                    ("create", "created"),
                    ("upsert", "written again by key"),
                    ("update", "updated"),
                    ("import", "imported"),
                    ("admin", "edited in the admin"),
                    ("restore", "restored"),
                    ("consolidation", "consolidated"),
                    ("supersede", "superseded"),
                ],
                max_length=16,
                verbose_name="cause",
            ),
        ),
        AddIndexConcurrently(
            model_name="memoryrecord",
            index=models.Index(
                condition=models.Q(("superseded_by__isnull", False)),
                fields=["superseded_by"],
                name="memoryhub_record_chain_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="memoryrecord",
            index=models.Index(
                condition=models.Q(("context_embedded", True)),
                fields=["org"],
                name="memoryhub_record_ctx_idx",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {CURRENT_KEY} ON {TABLE}"
                    f" ({COLUMNS}) WHERE key IS NOT NULL AND superseded_by IS NULL",
                    f"DROP INDEX CONCURRENTLY IF EXISTS {CURRENT_KEY}",
                ),
                migrations.RunSQL(
                    f"DROP INDEX CONCURRENTLY IF EXISTS {OLD_KEY}",
                    f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {OLD_KEY} ON {TABLE}"
                    f" ({COLUMNS}) WHERE key IS NOT NULL",
                ),
            ],
            state_operations=[
                migrations.RemoveConstraint(model_name="memoryrecord", name=OLD_KEY),
                migrations.AddConstraint(
                    model_name="memoryrecord",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("key__isnull", False), ("superseded_by__isnull", True)),
                        fields=("knowledge_base", "namespace", "key", "org"),
                        name=CURRENT_KEY,
                    ),
                ),
            ],
        ),
    ]
