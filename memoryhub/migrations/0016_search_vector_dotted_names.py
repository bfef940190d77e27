"""The generated ``search_vector`` also holds the words of dotted names ("enum.IntEnum"
-> 'enum', 'intenum' beside 'enum.intenum'), URLs, e-mail addresses and tags ("<unk>"
-> 'unk'): ``models.search_vector``.

Django cannot alter a generated column's expression, so the column is dropped and added
again: PostgreSQL computes it for every record, rewriting the records table and
rebuilding its indexes (HNSW included) under an exclusive lock; what that costs at
scale: docs/how-to/upgrade.md. The shared full-text index goes with the column
and is built again here; the domains' own full-text indexes and word statistics
(services/word_statistics.py) are rebuilt and counted again by the sweeper's next
maintenance run: until then a large domain's keyword leg ranks every match, as it does
after an erasure in it.
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

#: The counts were taken from the old vectors: they lack the words of dotted names.
FORGET_WORD_STATISTICS = (
    'DELETE FROM "memoryhub_wordfrequency"; DELETE FROM "memoryhub_wordstatistics"'
)


#: The column added again has no planner statistics, as migration 0005 made the old one
#: (an erased subject's words must not stay in pg_stats).
NO_STATISTICS = 'ALTER TABLE "memoryhub_memoryrecord" ALTER COLUMN "search_vector" SET STATISTICS 0'


class Migration(migrations.Migration):
    dependencies = [
        ("memoryhub", "0015_word_statistics"),
    ]

    operations = [
        migrations.RunSQL(FORGET_WORD_STATISTICS, FORGET_WORD_STATISTICS),
        # Backwards, the old column (added again last) gets no statistics either.
        migrations.RunSQL(migrations.RunSQL.noop, NO_STATISTICS),
        migrations.RemoveIndex(model_name="memoryrecord", name="memoryhub_record_fts_idx"),
        migrations.RemoveField(model_name="memoryrecord", name="search_vector"),
        migrations.AddField(
            model_name="memoryrecord",
            name="search_vector",
            field=models.GeneratedField(
                db_persist=True,
                expression=django.contrib.postgres.search.CombinedSearchVector(
                    django.contrib.postgres.search.SearchVector("content", config="english"),
                    "||",
                    django.contrib.postgres.search.SearchVector(
                        models.Case(
                            models.When(
                                content__regex="\\w[./:@]+\\w|</?\\w+>",
                                then=models.Func(
                                    models.Func(
                                        models.F("content"),
                                        models.Value(
                                            "(\\w+(?:[./:@]+\\w+)+|</?\\w+>)|\\w+|[^\\w<]+|<"
                                        ),
                                        models.Value("\\1 "),
                                        models.Value("g"),
                                        function="regexp_replace",
                                        output_field=models.TextField(),
                                    ),
                                    models.Value("./:@<>"),
                                    models.Value("      "),
                                    function="translate",
                                ),
                            ),
                            default=models.Value(""),
                            output_field=models.TextField(),
                        ),
                        config="english",
                    ),
                    django.contrib.postgres.search.SearchConfig("english"),
                ),
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        migrations.AddIndex(
            model_name="memoryrecord",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["search_vector"], name="memoryhub_record_fts_idx"
            ),
        ),
        migrations.RunSQL(NO_STATISTICS, migrations.RunSQL.noop),
    ]
