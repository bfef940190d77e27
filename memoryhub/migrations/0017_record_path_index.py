"""The records' path index: (knowledge base, namespace, key) in code point order, which
the namespace listing (``services.records.list_namespaces``) walks one seek per row.

Built concurrently: writes go on while a large records table is indexed.
"""

import django.db.models.functions.comparison
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("memoryhub", "0016_search_vector_dotted_names"),
        ("tenants", "0003_domain_hybrid_vector_weight"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="memoryrecord",
            index=models.Index(
                models.F("knowledge_base"),
                django.db.models.functions.comparison.Collate(models.F("namespace"), "C"),
                django.db.models.functions.comparison.Collate(models.F("key"), "C"),
                name="memoryhub_record_path_idx",
            ),
        ),
    ]
