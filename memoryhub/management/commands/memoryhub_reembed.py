"""``manage.py memoryhub_reembed [--org SLUG] [--domain SLUG] [--source NAME]``.

Re-embeds, with the configured embedder, every selected record not yet indexed with it
(after a change of model, or records that failed). Batches are enqueued to the workers;
with ``--wait`` (or when tasks run eagerly) a progress bar follows them to the end.
Until a record is re-embedded it keeps its previous vector and model, and serves
queries with them (``PREVIOUS_EMBEDDERS``): a change of model loses no recall.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from celery import current_app
from django.core.management.base import BaseCommand, CommandError, CommandParser

from memoryhub.conf import memoryhub_settings
from memoryhub.services.indexing import records_to_reembed, reembed
from tenants.models import Domain, Org


def progress_bar(done: int, total: int, width: int = 40) -> str:
    filled = width if total == 0 else int(width * done / total)
    percent = 100 if total == 0 else int(100 * done / total)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {percent}%"


class Command(BaseCommand):
    help = "Re-embed records with the configured embedder, in the background, with progress."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--org", default=None, help="only this org (slug)")
        parser.add_argument("--domain", default=None, help="only this domain (slug; needs --org)")
        parser.add_argument("--source", default=None, help="only this knowledge base")
        parser.add_argument("--wait", action="store_true", help="follow progress to the end")
        parser.add_argument("--timeout", type=float, default=3600.0)

    def handle(self, *args: Any, **options: Any) -> None:
        org_id = domain_id = None
        if options["domain"] is not None and options["org"] is None:
            raise CommandError("--domain needs --org.")
        if options["org"] is not None:
            try:
                org = Org.objects.get(slug=options["org"])
            except Org.DoesNotExist:
                raise CommandError(f"Unknown org {options['org']!r}.") from None
            org_id = org.pk
            if options["domain"] is not None:
                try:
                    domain_id = Domain.objects.get(org=org, slug=options["domain"]).pk
                except Domain.DoesNotExist:
                    raise CommandError(f"Unknown domain {options['domain']!r}.") from None
        embedder = memoryhub_settings.embedder()

        def remaining() -> int:
            return records_to_reembed(
                embedder.name, org_id=org_id, domain_id=domain_id, source=options["source"]
            ).count()

        total = remaining()
        self.stdout.write(f"{total} record(s) to embed with {embedder.name}.")
        eager = current_app.conf.task_always_eager
        # The one re-embedding path (the admin action uses it too): records keep serving
        # queries with their previous vectors until their new ones are stored.
        reembed(
            records_to_reembed(
                embedder.name, org_id=org_id, domain_id=domain_id, source=options["source"]
            )
        )
        if eager:
            self._draw(total - min(remaining(), total), total)
        if not eager and options["wait"]:
            deadline = time.monotonic() + options["timeout"]
            left = remaining()
            while left and time.monotonic() < deadline:
                self._draw(total - min(left, total), total)
                time.sleep(0.5)
                left = remaining()
            self._draw(total - min(left, total), total)
        if eager or options["wait"]:
            sys.stderr.write("\n")
            self.stdout.write(f"Done: {remaining()} record(s) still to embed.")
        else:
            self.stdout.write("Enqueued; workers are embedding. Re-run with --wait to follow.")

    def _draw(self, done: int, total: int) -> None:
        sys.stderr.write("\r" + progress_bar(done, total))
        sys.stderr.flush()
