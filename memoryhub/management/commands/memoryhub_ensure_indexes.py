"""``manage.py memoryhub_ensure_indexes``: the HNSW index of the configured embedder.

Also run after ``migrate``. Pass ``--model NAME --dimensions D`` to create the index of
another model (e.g. before switching ``MEMORYHUB["EMBEDDER"]`` to it).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memoryhub.conf import memoryhub_settings
from memoryhub.services.indexing import ensure_vector_index


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
