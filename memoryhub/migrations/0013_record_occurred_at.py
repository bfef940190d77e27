"""When a record's content happened (``occurred_at``), in records and their history, and
the index a query's ``context_turns`` reads a hit's neighbouring turns from.

At millions of rows per domain:

* ``occurred_at`` is nullable without a default, so adding it only changes the catalog
  (no rewrite, no backfill): NULL reads as ``created_at`` through one expression,
  ``memoryhub.models.occurred``. A ``NOT NULL DEFAULT now()`` column would not have
  rewritten the table either (PostgreSQL 11+ keeps a non-volatile default in the
  catalog), but every existing row would then read the migration's time instead of its
  own creation time;
* the two indexes are built concurrently (writes go on while they build): one on (domain,
  when it occurred) for the time filters of queries, and the turns index, partial: only
  records whose metadata names a session are in it;
* the session column of the index gets no planner statistics, like the metadata it comes
  from (migration 0005): a session id can name a data subject.
"""

import django.db.models.fields.json
import django.db.models.functions.comparison
import django.db.models.functions.text
import django.db.models.lookups
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

#: The session expression is the index's third column.
SESSION_COLUMN = 3


class Migration(migrations.Migration):
    atomic = False

    # After 0012 (rerank.failed): one line of migrations, no merge migration.
    dependencies = [
        ("memoryhub", "0012_rerank_failed_observation"),
    ]

    operations = [
        migrations.AddField(
            model_name="memoryrecord",
            name="occurred_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When what it says happened or was said (a conversation turn's "
                "time); empty: when the record was created.",
                null=True,
                verbose_name="occurred",
            ),
        ),
        migrations.AddField(
            model_name="recordversion",
            name="occurred_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="occurred"),
        ),
        AddIndexConcurrently(
            model_name="memoryrecord",
            index=models.Index(
                models.F("domain"),
                django.db.models.functions.comparison.Coalesce(
                    models.F("occurred_at"), models.F("created_at")
                ),
                name="memoryhub_record_occurred_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="memoryrecord",
            index=models.Index(
                models.F("knowledge_base"),
                models.F("namespace"),
                django.db.models.fields.json.KeyTextTransform("session", "metadata"),
                django.db.models.functions.comparison.Coalesce(
                    models.F("occurred_at"), models.F("created_at")
                ),
                condition=models.Q(
                    django.db.models.lookups.LessThanOrEqual(
                        django.db.models.functions.text.Length(
                            django.db.models.fields.json.KeyTextTransform("session", "metadata")
                        ),
                        200,
                    )
                ),
                name="memoryhub_record_turns_idx",
            ),
        ),
        migrations.RunSQL(
            "ALTER INDEX memoryhub_record_turns_idx"
            f" ALTER COLUMN {SESSION_COLUMN} SET STATISTICS 0",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
