"""``manage.py memoryhub_import_from PEER WHERE --org ORG --domain DOMAIN [--source KB]
[--namespace NS] [--dry-run]``.

Imports another store's memory through memoryhub's adapter for it (``memoryhub.importers``):

* ``langgraph-postgres CONNINFO``: a LangGraph ``PostgresStore``'s items;
* ``openai-agents-sqlite FILE``: every session of an OpenAI Agents ``SQLiteSession``
  database;
* ``claude-memory-dir DIRECTORY``: the files Claude's memory tool kept, into
  ``--namespace``.

It says what it imported, and what it skipped and why. Running it again changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memoryhub.exceptions import PolicyDenied, ValidationFailed
from memoryhub.importers import PeerImport
from memoryhub.scope import Scope
from tenants.models import Domain

PEERS = ("langgraph-postgres", "openai-agents-sqlite", "claude-memory-dir")


class Command(BaseCommand):
    help = (
        "Import another store's memory (LangGraph PostgresStore, OpenAI Agents"
        " SQLiteSession, Claude's memory directory)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("peer", choices=PEERS, help="what the memory is kept in")
        parser.add_argument("where", help="its connection string, file or directory")
        parser.add_argument("--org", required=True, help="the org (slug)")
        parser.add_argument("--domain", required=True, help="the domain (slug)")
        parser.add_argument("--source", default="memory", help="the knowledge base")
        parser.add_argument(
            "--namespace", default=None, help="claude-memory-dir: whose files (user:alice)"
        )
        parser.add_argument("--dry-run", action="store_true", help="write nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            domain = Domain.objects.get(org__slug=options["org"], slug=options["domain"])
        except Domain.DoesNotExist:
            raise CommandError(
                f"No domain {options['domain']!r} in org {options['org']!r}."
            ) from None
        if options["peer"] == "claude-memory-dir" and not options["namespace"]:
            raise CommandError("claude-memory-dir needs --namespace (whose files they are).")
        try:
            report = self._import(options, Scope.for_domain(domain))
        except (FileNotFoundError, ImportError, OSError) as exc:
            raise CommandError(f"{options['where']}: {exc}") from None
        except (ValidationFailed, PolicyDenied) as exc:
            raise CommandError(str(exc)) from None
        verb = "would import" if report.dry_run else "imported"
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(report.skipped.items()))
        self.stdout.write(
            f"{verb} {report.imported} from {report.peer}; skipped: {skipped or 'none'}"
        )
        self.stdout.write(json.dumps(report.as_json()))

    @staticmethod
    def _import(options: dict[str, Any], scope: Scope) -> PeerImport:
        common = {"source": options["source"], "dry_run": options["dry_run"]}
        if options["peer"] == "langgraph-postgres":
            from memoryhub.importers.langgraph import from_langgraph_postgres

            return from_langgraph_postgres(options["where"], scope, **common)
        if options["peer"] == "openai-agents-sqlite":
            from memoryhub.importers.openai_agents import from_openai_agents_sqlite

            return from_openai_agents_sqlite(options["where"], scope, **common)
        from memoryhub.importers.claude_memory import from_claude_memory_dir

        return from_claude_memory_dir(
            options["where"], scope, namespace=options["namespace"], **common
        )
