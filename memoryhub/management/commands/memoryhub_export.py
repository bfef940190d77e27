"""``manage.py memoryhub_export ORG --output FILE [--domain SLUG] [--vectors]``.

Writes the org (or one of its domains) as an archive (docs/reference/archive.md): its
domains, knowledge bases, erasure receipts, records with their history, and with
``--vectors`` their vectors. A name ending in ``.gz`` is compressed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memoryhub.services.archives import export_archive
from tenants.models import Domain, Org


class Command(BaseCommand):
    help = "Export an org (or one of its domains) as an archive of JSON lines."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("org", help="the org's slug")
        parser.add_argument(
            "--output", required=True, help="the archive to write (.gz: compressed)"
        )
        parser.add_argument("--domain", default=None, help="only this domain (slug)")
        parser.add_argument(
            "--vectors",
            action="store_true",
            help="include the records' vectors (an import reuses them when its embedder"
            " is the same model)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            org = Org.objects.get(slug=options["org"])
        except Org.DoesNotExist:
            raise CommandError(f"Unknown org {options['org']!r}.") from None
        output = Path(options["output"])
        if not output.parent.is_dir():
            raise CommandError(f"No directory {str(output.parent)!r} to write the archive in.")
        try:
            manifest = export_archive(
                org, output, domain=options["domain"], vectors=options["vectors"]
            )
        except Domain.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        counts = manifest["counts"]
        self.stdout.write(
            f"wrote {output}: {counts['record']} records, {counts['version']} earlier states,"
            f" {counts['knowledge_base']} knowledge bases, {counts['domain']} domains,"
            f" {counts['receipt']} erasure receipts"
        )
        self.stdout.write(json.dumps(counts))
