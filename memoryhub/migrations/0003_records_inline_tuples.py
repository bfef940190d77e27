"""Keep memory records' rows whole (no TOAST) up to a page.

PostgreSQL moves a row's long values out of line once the row passes about 2 KB; a
record with a 384-d embedding (1.5 KB), its content and its tsvector often does, and then
every exact scan and keyword rank reads the TOAST table too. Rows written before this
migration keep their layout until rewritten.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memoryhub", "0002_import_job")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memoryhub_memoryrecord SET (toast_tuple_target = 8160)",
            reverse_sql="ALTER TABLE memoryhub_memoryrecord RESET (toast_tuple_target)",
        )
    ]
