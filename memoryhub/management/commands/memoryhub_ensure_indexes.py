"""``manage.py memoryhub_ensure_indexes``: the HNSW index of the configured embedder, and
the own HNSW indexes of domains with at least ``TENANT_INDEX_MIN_RECORDS`` records, built
again over the vectors stored in bulk since (the sweeper maintains those too, once a load
has settled; run this after a bulk load not to wait for it).

The shared index is also created after ``migrate``. Pass ``--model NAME --dimensions D``
to create the indexes of another model (e.g. before switching ``MEMORYHUB["EMBEDDER"]``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memoryhub.conf import memoryhub_settings
from memoryhub.services.vector_indexes import ensure_tenant_indexes, ensure_vector_index


class Command(BaseCommand):
    help = "Create the per-model HNSW expression index (CONCURRENTLY) if it is missing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--model", default=None, help="embedding model name")
        parser.add_argument("--dimensions", type=int, default=None)

    def handle(self, *args: Any, model: str | None, dimensions: int | None, **options: Any) -> None:
        if (model is None) != (dimensions is None):
            raise CommandError("Give both --model and --dimensions, or neither.")
        if model is None or dimensions is None:
            embedder = memoryhub_settings.embedder()
            model, dimensions = embedder.name, embedder.dimensions
        if dimensions < 1 or dimensions > 16000:
            raise CommandError("--dimensions must be between 1 and 16000.")
        name, created = ensure_vector_index(model, dimensions)
        state = "created" if created else "already present"
        self.stdout.write(f"HNSW index {name} for {model} ({dimensions}-d): {state}.")
        changes = ensure_tenant_indexes(model, dimensions, settle_after=timedelta(0))
        for label, names in (
            ("created", changes.created),
            ("dropped", changes.dropped),
            ("rebuilt", changes.rebuilt),
        ):
            for tenant_index in names:
                self.stdout.write(f"Tenant HNSW index {tenant_index}: {label}.")
        for label, names in (
            ("created", changes.keyword_created),
            ("dropped", changes.keyword_dropped),
        ):
            for keyword_index in names:
                self.stdout.write(f"Domain full-text index {keyword_index}: {label}.")
        for key in changes.filter_keys_indexed:
            self.stdout.write(f"Metadata key {key!r}: index built.")
        for name in changes.filter_indexes_dropped:
            self.stdout.write(f"Metadata key index {name}: dropped.")
        for domain, count in changes.folded.items():
            self.stdout.write(f"Domain {domain}: {count} bulk-stored vectors inserted row by row.")
        if changes.busy:
            self.stdout.write("Tenant HNSW indexes: another process is maintaining them.")
