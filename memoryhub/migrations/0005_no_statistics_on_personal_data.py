"""No planner statistics on columns that hold personal data.

``ANALYZE`` samples column values into ``pg_stats`` (most common values, histograms,
most common elements of arrays and tsvectors): an erased subject's words would stay
there until the next analyse. With the statistics target at 0 PostgreSQL samples none of
these columns; the planner then uses default selectivities for them, which memoryhub's
queries do not depend on (their plans are chosen by the scope's size and explicit
indexes). The namespace is not among them (a subject's namespace goes from ``pg_stats``
with the analyse that follows every erasure).
"""

from django.db import migrations

COLUMNS = {
    "memoryhub_memoryrecord": ["content", "key", "tags", "metadata", "search_vector"],
    "memoryhub_importjob": ["text", "filename"],
}


def _statements(target: int) -> list[str]:
    return [
        f'ALTER TABLE "{table}" ALTER COLUMN "{column}" SET STATISTICS {target}'
        for table, columns in COLUMNS.items()
        for column in columns
    ]


class Migration(migrations.Migration):
    dependencies = [("memoryhub", "0004_worker_heartbeat")]

    operations = [
        migrations.RunSQL(_statements(0), reverse_sql=_statements(-1)),
    ]
