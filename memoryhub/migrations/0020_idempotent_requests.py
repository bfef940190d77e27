"""Answers kept for retries sent with an ``Idempotency-Key`` (``services.idempotency``).

The primary key is ``(id, org_id)`` from the start, as 0018 made every tenant table's:
a cluster distributed by org accepts it (the table is new and empty: no index to build
concurrently).
"""

import django.db.models.deletion
import django.db.models.manager
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memoryhub", "0019_valid_time"),
        ("tenants", "0003_domain_hybrid_vector_weight"),
    ]

    operations = [
        migrations.CreateModel(
            name="IdempotentRequest",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("sender", models.CharField(max_length=64, verbose_name="sender")),
                (
                    "idempotency_key",
                    models.CharField(max_length=255, verbose_name="idempotency key"),
                ),
                (
                    "fingerprint",
                    models.CharField(max_length=64, verbose_name="request fingerprint"),
                ),
                ("status", models.PositiveSmallIntegerField(verbose_name="status")),
                ("answer", models.JSONField(verbose_name="answer")),
                (
                    "created_at",
                    models.DateTimeField(
                        db_index=True, default=django.utils.timezone.now, verbose_name="created"
                    ),
                ),
                (
                    "domain",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.domain",
                        verbose_name="domain",
                    ),
                ),
                (
                    "org",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.org",
                        verbose_name="org",
                    ),
                ),
            ],
            options={
                "verbose_name": "idempotent request",
                "verbose_name_plural": "idempotent requests",
                "abstract": False,
                "base_manager_name": "unscoped",
                "default_manager_name": "objects",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("sender", "idempotency_key", "org"),
                        name="memoryhub_idempotency_unique",
                    )
                ],
            },
            managers=[
                ("objects", django.db.models.manager.Manager()),
                ("unscoped", django.db.models.manager.Manager()),
            ],
        ),
        migrations.RunSQL(
            "ALTER TABLE memoryhub_idempotentrequest DROP CONSTRAINT memoryhub_idempotentrequest_pkey,"
            " ADD CONSTRAINT memoryhub_idempotentrequest_pkey PRIMARY KEY (id, org_id)",
            "ALTER TABLE memoryhub_idempotentrequest DROP CONSTRAINT memoryhub_idempotentrequest_pkey,"
            " ADD CONSTRAINT memoryhub_idempotentrequest_pkey PRIMARY KEY (id)",
        ),
    ]
