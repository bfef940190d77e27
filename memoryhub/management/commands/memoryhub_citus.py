"""``manage.py memoryhub_citus``: memoryhub's tables on a Citus cluster.

    distribute [--shard-count N]   distribute the tenant tables by org and make the
                                   tenancy tables reference tables (idempotent)
    status                         what is not where it should be (exit 1 if anything)
    where ORG                      the worker holding an org's shard group
    move ORG --to HOST:PORT        move an org's shard group to another worker, online
    isolate ORG                    give an org a shard group of its own, online
    cleanup                        drop the copies a move or isolation left behind

ORG is an org's slug or id. A move and an isolation copy by logical replication while
writes and queries go on; the copies left on the old worker are dropped by ``cleanup``
(which ``move`` and ``isolate`` run when they finish, once every row of the old copy is
found on the new one), so no copy of an erased subject stays there. ``move`` moves every
org sharing the shard group: ``isolate`` first to move one org alone. Both refuse to run
while a node has ``synchronous_commit`` off (an acknowledged write could miss the copy).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections

from memoryhub.services import distribution
from tenants.models import Org


class Command(BaseCommand):
    help = "memoryhub's tables on a Citus cluster: distribute, status, where, move, isolate."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)
        actions = parser.add_subparsers(dest="action", required=True)
        distribute = actions.add_parser("distribute")
        distribute.add_argument("--shard-count", type=int, default=None)
        actions.add_parser("status")
        where = actions.add_parser("where")
        where.add_argument("org")
        move = actions.add_parser("move")
        move.add_argument("org")
        move.add_argument("--to", required=True, help="the target worker, HOST:PORT")
        isolate = actions.add_parser("isolate")
        isolate.add_argument("org")
        actions.add_parser("cleanup")

    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[options["database"]]
        if not distribution.is_citus(connection):
            raise CommandError(
                f"database {options['database']!r} has no citus extension: this is not a"
                " Citus coordinator (CREATE EXTENSION citus, then add the workers)."
            )
        action = options["action"]
        if action == "distribute":
            for line in distribution.distribute(connection, shard_count=options["shard_count"]):
                self.stdout.write(line)
            self._status(connection)
        elif action == "status":
            if self._status(connection):
                raise SystemExit(1)
        elif action == "cleanup":
            self.stdout.write(f"dropped {distribution.cleanup(connection)} old copies")
        else:
            try:
                self._tenant_action(connection, action, options)
            except (distribution.MoveRefused, distribution.CopyIncomplete) as exc:
                raise CommandError(str(exc)) from exc

    def _tenant_action(self, connection: Any, action: str, options: dict[str, Any]) -> None:
        org = self._org(options["org"])
        self._require_layout(connection)
        if action == "where":
            node = distribution.tenant_node(connection, org.pk)
            self.stdout.write(f"{org.slug}: shard group of {node.shard} on {node.host}:{node.port}")
        elif action == "move":
            host, _, port = options["to"].rpartition(":")
            if not host or not port.isdigit():
                raise CommandError(f"--to must be HOST:PORT, not {options['to']!r}")
            moved = distribution.move_tenant(connection, org.pk, host, int(port))
            self.stdout.write(f"{org.slug}: {moved}")
        elif action == "isolate":
            shard = distribution.isolate_tenant(connection, org.pk)
            self.stdout.write(f"{org.slug}: alone in the shard group of {shard}")

    def _org(self, name: str) -> Org:
        org = Org.objects.filter(slug=name).first()
        if org is None and name.isdigit():
            org = Org.objects.filter(pk=int(name)).first()
        if org is None:
            raise CommandError(f"no org {name!r}")
        return org

    def _require_layout(self, connection: Any) -> None:
        if distribution.layout_problems(connection):
            raise CommandError("the tables are not distributed yet: run distribute first")

    def _status(self, connection: Any) -> list[str]:
        problems = distribution.layout_problems(connection)
        for line in problems:
            self.stdout.write(line)
        if not problems:
            self.stdout.write(
                f"distributed by org_id: {len(distribution.DISTRIBUTED)} tables, co-located;"
                f" reference: {len(distribution.REFERENCE)} tables"
            )
        return problems
