"""``manage.py memoryhub_import FILE [--org SLUG] [--dry-run]``.

Imports an archive written by ``memoryhub_export`` into its org (created if missing) or
into ``--org``. Importing again changes nothing; a record whose subject was erased here
after it was written is refused and counted. ``--dry-run`` writes nothing and says what
would change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memoryhub.exceptions import ValidationFailed
from memoryhub.services.archives import import_archive


class Command(BaseCommand):
    help = "Import an org archive (from memoryhub_export): idempotent, erased subjects refused."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the archive")
        parser.add_argument("--org", default=None, help="import into this org (slug)")
        parser.add_argument(
            "--dry-run", action="store_true", help="write nothing; say what would change"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        if not path.is_file():
            raise CommandError(f"No file {str(path)!r}.")
        try:
            report = import_archive(path, org=options["org"], dry_run=options["dry_run"])
        except ValidationFailed as exc:
            problems = "; ".join(
                f"{name}: {' '.join(map(str, messages))}" for name, messages in exc.errors.items()
            )
            raise CommandError(f"{path} was not imported: {problems}") from None
        created, skipped = report.created, report.skipped
        verb = "would import" if report.dry_run else "imported"
        self.stdout.write(
            f"{verb} into {report.org}: {created['record']} records"
            f" ({report.vectors_reused} with their vectors, {report.to_embed} to embed),"
            f" {created['version']} earlier states, {created['knowledge_base']} knowledge bases,"
            f" {created['domain']} domains, {created['receipt']} erasure receipts;"
            f" left out: {skipped['unchanged']} already here, {skipped['erased']} erased,"
            f" {skipped['conflict']} in conflict, {skipped['expired']} expired"
        )
        self.stdout.write(json.dumps(report.as_json()))
