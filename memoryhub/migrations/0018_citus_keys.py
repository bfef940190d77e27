"""Keys a cluster distributed by org accepts: every primary key, unique constraint and
foreign key between tenant tables holds ``org_id`` (Citus enforces uniqueness and
references only within one shard, and a shard holds whole orgs).

* Primary keys become ``(id, org_id)``: ``id`` leads, so a lookup by id still reads the
  key's index; ``id`` stays the models' primary key in Django (ids are unique on their
  own, by uuid4 or identity).
* Unique constraints gain ``org_id`` last. Each already held the domain, the knowledge
  base, the record or the import, which belongs to one org: what they forbid is
  unchanged.
* The foreign keys between tenant tables become ``(x_id, org_id) -> (id, org_id)``:
  declared ``db_constraint=False`` on the fields (Django's own would hold ``x_id`` only)
  and made here, so a row can no more point at another org's row than at none. They are
  checked at each statement, not deferred to the commit: a tenant table's rows are
  written after what they refer to, and a deferred check would leave pending trigger
  events in the transaction, which a ``CREATE INDEX`` of the table refuses on a worker.
* ``ImportChunk`` gains the org of its job.

The same schema on PostgreSQL and on Citus; ``manage.py memoryhub_citus distribute``
does the rest on a cluster. The large tables' new indexes are built concurrently, and
each key is swapped in one short ``ALTER TABLE``.
"""

import django.db.models.deletion
from django.db import migrations, models

#: (table, foreign key column, referenced table) between tenant tables.
KEYS = [
    ("memoryhub_memoryrecord", "knowledge_base_id", "memoryhub_knowledgebase"),
    ("memoryhub_memoryrecord", "import_job_id", "memoryhub_importjob"),
    ("memoryhub_importjob", "knowledge_base_id", "memoryhub_knowledgebase"),
    ("memoryhub_recordversion", "record_id", "memoryhub_memoryrecord"),
    ("memoryhub_importchunk", "job_id", "memoryhub_importjob"),
]

TABLES = [
    "memoryhub_knowledgebase",
    "memoryhub_memoryrecord",
    "memoryhub_recordversion",
    "memoryhub_observation",
    "memoryhub_importjob",
    "memoryhub_importchunk",
    "memoryhub_erasurereceipt",
    "memoryhub_wordstatistics",
    "memoryhub_wordfrequency",
]

#: (table, constraint, columns without the org): the unique constraints.
UNIQUE = [
    ("memoryhub_knowledgebase", "memoryhub_kb_unique_name", "domain_id, name"),
    ("memoryhub_recordversion", "memoryhub_version_unique", "record_id, version"),
    ("memoryhub_importchunk", "memoryhub_import_chunk_seq", "job_id, seq"),
    ("memoryhub_wordstatistics", "memoryhub_wordstats_domain_uniq", "domain_id"),
    ("memoryhub_wordfrequency", "memoryhub_wordfreq_domain_lexeme_uniq", "domain_id, lexeme"),
]


def fk_name(table: str, column: str) -> str:
    return f"{table.removeprefix('memoryhub_')}_{column}_org_fk"[:63]


def swap_primary_key(table: str, columns: str) -> list[str]:
    return [
        f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {table}_pk_next ON {table} ({columns})",
        f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
        f"ADD CONSTRAINT {table}_pkey PRIMARY KEY USING INDEX {table}_pk_next",
    ]


def swap_unique(table: str, name: str, columns: str) -> list[str]:
    return [
        f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {name}_next ON {table} ({columns})",
        f"ALTER TABLE {table} DROP CONSTRAINT {name}, "
        f"ADD CONSTRAINT {name} UNIQUE USING INDEX {name}_next",
    ]


def add_keys() -> list[str]:
    statements = []
    for table, column, target in KEYS:
        name = fk_name(table, column)
        statements += [
            f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY ({column}, org_id) "
            f"REFERENCES {target} (id, org_id) NOT VALID",
            f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}",
        ]
    return statements


def drop_keys() -> list[str]:
    return [
        f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {fk_name(table, column)}"
        for table, column, _ in KEYS
    ]


def forwards_sql() -> list[str]:
    statements = drop_keys()
    for table in TABLES:
        statements += swap_primary_key(table, "id, org_id")
    for table, name, columns in UNIQUE:
        statements += swap_unique(table, name, f"{columns}, org_id")
    statements += [
        "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS memoryhub_record_unique_key_next "
        "ON memoryhub_memoryrecord (knowledge_base_id, namespace, key, org_id) "
        "WHERE key IS NOT NULL",
        "DROP INDEX CONCURRENTLY IF EXISTS memoryhub_record_unique_key",
        "ALTER INDEX memoryhub_record_unique_key_next RENAME TO memoryhub_record_unique_key",
    ]
    return statements + add_keys()


def backwards_sql() -> list[str]:
    statements = drop_keys()
    statements += [
        "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS memoryhub_record_unique_key_next "
        "ON memoryhub_memoryrecord (knowledge_base_id, namespace, key) WHERE key IS NOT NULL",
        "DROP INDEX CONCURRENTLY IF EXISTS memoryhub_record_unique_key",
        "ALTER INDEX memoryhub_record_unique_key_next RENAME TO memoryhub_record_unique_key",
    ]
    for table, name, columns in UNIQUE:
        statements += swap_unique(table, name, columns)
    for table in TABLES:
        statements += swap_primary_key(table, "id")
    return statements


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("memoryhub", "0017_record_path_index"),
        ("tenants", "0003_domain_hybrid_vector_weight"),
    ]

    operations = [
        # Django drops its single-column keys (it knows their names).
        migrations.AlterField(
            model_name="memoryrecord",
            name="knowledge_base",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="records",
                to="memoryhub.knowledgebase",
                verbose_name="knowledge base",
            ),
        ),
        migrations.AlterField(
            model_name="memoryrecord",
            name="import_job",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="memoryhub.importjob",
                verbose_name="import",
            ),
        ),
        migrations.AlterField(
            model_name="importjob",
            name="knowledge_base",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="import_jobs",
                to="memoryhub.knowledgebase",
                verbose_name="knowledge base",
            ),
        ),
        migrations.AlterField(
            model_name="recordversion",
            name="record",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="versions",
                to="memoryhub.memoryrecord",
            ),
        ),
        migrations.AlterField(
            model_name="importchunk",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="chunks",
                to="memoryhub.importjob",
            ),
        ),
        # The chunk's org, from its job.
        migrations.AddField(
            model_name="importchunk",
            name="org",
            field=models.ForeignKey(
                null=True,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="tenants.org",
                verbose_name="org",
            ),
        ),
        migrations.RunSQL(
            "UPDATE memoryhub_importchunk AS chunk SET org_id = job.org_id "
            "FROM memoryhub_importjob AS job WHERE job.id = chunk.job_id",
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name="importchunk",
            name="org",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="tenants.org",
                verbose_name="org",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(forwards_sql(), reverse_sql=backwards_sql())],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="knowledgebase", name="memoryhub_kb_unique_name"
                ),
                migrations.AddConstraint(
                    model_name="knowledgebase",
                    constraint=models.UniqueConstraint(
                        fields=("domain", "name", "org"), name="memoryhub_kb_unique_name"
                    ),
                ),
                migrations.RemoveConstraint(
                    model_name="memoryrecord", name="memoryhub_record_unique_key"
                ),
                migrations.AddConstraint(
                    model_name="memoryrecord",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("key__isnull", False)),
                        fields=("knowledge_base", "namespace", "key", "org"),
                        name="memoryhub_record_unique_key",
                    ),
                ),
                migrations.RemoveConstraint(
                    model_name="recordversion", name="memoryhub_version_unique"
                ),
                migrations.AddConstraint(
                    model_name="recordversion",
                    constraint=models.UniqueConstraint(
                        fields=("record", "version", "org"), name="memoryhub_version_unique"
                    ),
                ),
                migrations.RemoveConstraint(
                    model_name="importchunk", name="memoryhub_import_chunk_seq"
                ),
                migrations.AddConstraint(
                    model_name="importchunk",
                    constraint=models.UniqueConstraint(
                        fields=("job", "seq", "org"), name="memoryhub_import_chunk_seq"
                    ),
                ),
                migrations.RemoveConstraint(
                    model_name="wordstatistics", name="memoryhub_wordstats_domain_uniq"
                ),
                migrations.AddConstraint(
                    model_name="wordstatistics",
                    constraint=models.UniqueConstraint(
                        fields=("domain", "org"), name="memoryhub_wordstats_domain_uniq"
                    ),
                ),
                migrations.RemoveConstraint(
                    model_name="wordfrequency", name="memoryhub_wordfreq_domain_lexeme_uniq"
                ),
                migrations.AddConstraint(
                    model_name="wordfrequency",
                    constraint=models.UniqueConstraint(
                        fields=("domain", "lexeme", "org"),
                        name="memoryhub_wordfreq_domain_lexeme_uniq",
                    ),
                ),
            ],
        ),
    ]
