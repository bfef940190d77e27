"""Where each table lives on a Citus cluster, and putting it there.

memoryhub on Citus keeps every tenant's rows on one shard group, chosen by ``org_id``:

* **distributed by org, co-located** (:data:`DISTRIBUTED`): every table that holds a
  tenant's data. A tenant's statements (they all name its org) are routed to the one
  worker holding its shard group, where its rows join each other locally; Citus moves
  and isolates a tenant as one group.
* **reference** (:data:`REFERENCE`): the tenancy tables (orgs, domains, API keys,
  memberships). They are small, read on every request before the org is known (a key is
  found by its prefix), and joined with every tenant table: a copy on each node keeps
  those reads and joins local, and the tenant tables' keys to them stay real foreign keys.
* **local to the coordinator**: everything else (Django's auth, sessions and admin log,
  worker heartbeats). Citus adds the tables a reference table's foreign keys reach (the
  users behind memberships) to its metadata as coordinator-local tables.

The keys were made Citus-valid by migration ``0018_citus_keys`` (``org_id`` in every
primary key, unique constraint and key between tenant tables, :data:`TENANT_KEYS`), so
:func:`distribute` only moves tables; it is idempotent. :func:`layout_problems` is what
the system check and ``memoryhub_citus status`` report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import DatabaseError, models
from django.db.backends.base.base import BaseDatabaseWrapper

from tenants.models import ApiKey, Domain, Membership, Org

from ..models import (
    ArchiveJob,
    ErasureReceipt,
    IdempotentRequest,
    ImportChunk,
    ImportJob,
    KnowledgeBase,
    MemoryRecord,
    Observation,
    RecordVersion,
    WordFrequency,
    WordStatistics,
)
from .store.transient import is_transient

__all__ = [
    "DISTRIBUTED",
    "DISTRIBUTION_COLUMN",
    "REFERENCE",
    "TENANT_KEYS",
    "CopyIncomplete",
    "MoveRefused",
    "Placement",
    "TenantNode",
    "cleanup",
    "distribute",
    "distributed_tables",
    "is_citus",
    "isolate_tenant",
    "layout",
    "layout_problems",
    "move_tenant",
    "org_of",
    "problems_in",
    "tenant_node",
    "unflushed_commit_nodes",
    "verify_copy",
]

logger = logging.getLogger(__name__)

DISTRIBUTION_COLUMN = "org_id"

#: Tenant data, distributed by org and co-located with the first (the knowledge bases),
#: in the order they are distributed (a table after the tables its keys reference).
DISTRIBUTED: tuple[type[models.Model], ...] = (
    KnowledgeBase,
    ImportJob,
    MemoryRecord,
    RecordVersion,
    ImportChunk,
    Observation,
    ErasureReceipt,
    WordStatistics,
    WordFrequency,
    IdempotentRequest,
    ArchiveJob,
)

#: Tenancy, replicated to every node (an org before what refers to it).
REFERENCE: tuple[type[models.Model], ...] = (Org, Domain, ApiKey, Membership)

#: The foreign keys between tenant tables, each ``(field, org_id) -> (id, org_id)``:
#: declared ``db_constraint=False`` on the field and made by migration 0018.
TENANT_KEYS: tuple[tuple[type[models.Model], str], ...] = (
    (MemoryRecord, "knowledge_base"),
    (MemoryRecord, "import_job"),
    (ImportJob, "knowledge_base"),
    (RecordVersion, "record"),
    (ImportChunk, "job"),
)


@dataclass(frozen=True)
class Placement:
    """Where a table is: ``distributed`` (with its column and co-location group),
    ``reference``, ``local`` (a coordinator-local table Citus knows) or ``postgres``."""

    kind: str
    column: str | None = None
    group: int | None = None


def is_citus(connection: BaseDatabaseWrapper) -> bool:
    """Whether the database has the ``citus`` extension (asked once per connection
    object: a database does not become a cluster under a running process)."""
    known = getattr(connection, "_memoryhub_citus", None)
    if known is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'")
            known = cursor.fetchone() is not None
        connection._memoryhub_citus = known  # type: ignore[attr-defined]
    return bool(known)


def distributed_tables(connection: BaseDatabaseWrapper) -> set[str]:
    """The names of the tables distributed by org (sharded) in the database."""
    return {table for table, place in layout(connection).items() if place.kind == "distributed"}


def layout(connection: BaseDatabaseWrapper) -> dict[str, Placement]:
    """Every table Citus knows, by name, and where it is."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT logicalrelid::regclass::text, partmethod, repmodel, colocationid,"
            " CASE WHEN partmethod = 'h' THEN column_to_column_name(logicalrelid, partkey)"
            " END FROM pg_dist_partition"
        )
        rows = cursor.fetchall()
    places = {}
    for table, method, replication, group, column in rows:
        if method == "h":
            places[table] = Placement("distributed", column, group)
        elif replication == "t":
            places[table] = Placement("reference")
        else:
            places[table] = Placement("local")
    return places


def layout_problems(connection: BaseDatabaseWrapper) -> list[str]:
    """What is not where memoryhub needs it, one line per table (empty: all is well)."""
    return problems_in(layout(connection))


def problems_in(places: dict[str, Placement]) -> list[str]:
    """What is not where memoryhub needs it in ``places`` (:func:`layout`)."""
    problems = []
    groups = set()
    for model in DISTRIBUTED:
        table = model._meta.db_table
        place = places.get(table, Placement("postgres"))
        if place.kind != "distributed" or place.column != DISTRIBUTION_COLUMN:
            problems.append(f"{table} is a {place.kind} table, not distributed by org_id")
        else:
            groups.add(place.group)
    if len(groups) > 1:
        problems.append("the tenant tables are not co-located (several co-location groups)")
    for model in REFERENCE:
        table = model._meta.db_table
        place = places.get(table, Placement("postgres"))
        if place.kind != "reference":
            problems.append(f"{table} is a {place.kind} table, not a reference table")
    return problems


def _tenancy_keys(model: type[models.Model]) -> list[models.ForeignKey[Any, Any]]:
    """``model``'s foreign keys to a tenancy table (Django makes their constraints)."""
    reference = {target._meta.db_table for target in REFERENCE}
    return [
        field
        for field in model._meta.concrete_fields
        if isinstance(field, models.ForeignKey)
        and field.db_constraint  # type: ignore[attr-defined]
        and field.related_model._meta.db_table in reference
    ]


def _constraint_on(cursor: Any, table: str, column: str) -> list[str]:
    cursor.execute(
        "SELECT c.conname FROM pg_constraint c JOIN pg_attribute a"
        " ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)"
        " WHERE c.contype = 'f' AND c.conrelid = %s::regclass AND a.attname = %s"
        " AND cardinality(c.conkey) = 1",
        [table, column],
    )
    return [name for (name,) in cursor.fetchall()]


def distribute(connection: BaseDatabaseWrapper, *, shard_count: int | None = None) -> list[str]:  # noqa: C901
    """Put every table where :data:`DISTRIBUTED` and :data:`REFERENCE` say; return what
    was done (nothing, the second time).

    Citus distributes a table only when the tables its keys reference are distributed or
    reference tables already, and it turns a local table that a reference table's key
    reaches into a coordinator-local one (which it then cannot distribute). So the tenant
    tables' keys to the tenancy tables are dropped, the tenant tables distributed, the
    tenancy tables made reference tables, and the keys made again, to the reference
    tables. Each step runs in its own transaction; a run that stopped half-way is
    finished by the next.
    """
    done: list[str] = []
    places = layout(connection)
    pending = [
        model
        for model in DISTRIBUTED
        if places.get(model._meta.db_table, Placement("postgres")).kind != "distributed"
    ]
    with connection.cursor() as cursor:
        if pending:
            for model in pending:
                table = model._meta.db_table
                for field in _tenancy_keys(model):
                    for name in _constraint_on(cursor, table, field.column):
                        cursor.execute(f'ALTER TABLE "{table}" DROP CONSTRAINT "{name}"')
            colocate = None
            for model in DISTRIBUTED:
                table = model._meta.db_table
                if model in pending:
                    if colocate is None:
                        cursor.execute(
                            "SELECT create_distributed_table(%s, %s, colocate_with => 'none'"
                            + (", shard_count => %s)" if shard_count else ")"),
                            [table, DISTRIBUTION_COLUMN, *([shard_count] if shard_count else [])],
                        )
                    else:
                        cursor.execute(
                            "SELECT create_distributed_table(%s, %s, colocate_with => %s)",
                            [table, DISTRIBUTION_COLUMN, colocate],
                        )
                    done.append(f"distributed {table} by {DISTRIBUTION_COLUMN}")
                colocate = colocate or table
        for model in REFERENCE:
            table = model._meta.db_table
            if places.get(table, Placement("postgres")).kind != "reference":
                cursor.execute("SELECT create_reference_table(%s)", [table])
                done.append(f"made {table} a reference table")
        for model in DISTRIBUTED:
            table = model._meta.db_table
            for field in _tenancy_keys(model):
                if _constraint_on(cursor, table, field.column):
                    continue
                target = field.related_model._meta
                cursor.execute(
                    f'ALTER TABLE "{table}" ADD CONSTRAINT "{table[:40]}_{field.column}_ref"'
                    f' FOREIGN KEY ("{field.column}") REFERENCES "{target.db_table}"'
                    f' ("{target.pk.column}")'
                )
                done.append(f"keyed {table}.{field.column} to {target.db_table}")
    return done


@dataclass(frozen=True)
class TenantNode:
    """The shard (of the knowledge bases) holding an org, and the worker holding it."""

    shard: int
    host: str
    port: int


def _anchor() -> str:
    return DISTRIBUTED[0]._meta.db_table


def tenant_node(connection: BaseDatabaseWrapper, org_id: int) -> TenantNode:
    """Where org ``org_id``'s rows are (every tenant table's shard of it is co-located)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT shardid, nodename, nodeport FROM pg_dist_shard_placement"
            " WHERE shardid = get_shard_id_for_distribution_column(%s, %s)",
            [_anchor(), org_id],
        )
        shard, host, port = cursor.fetchone()
    return TenantNode(shard, host, port)


class MoveRefused(Exception):
    """A tenant move or isolation refused before it began (nothing was changed)."""


class CopyIncomplete(Exception):
    """Rows of the old placement of a moved or split shard group are not on the new one.

    ``missing`` counts them per table. They were lost, or deleted since the switch-over
    (an erasure running during the move); the old copy is left to Citus's deferred
    cleanup instead of being dropped at once, so an operator can look at it first."""

    def __init__(self, missing: dict[str, int]) -> None:
        self.missing = missing
        listed = ", ".join(f"{table}: {n}" for table, n in sorted(missing.items()))
        super().__init__(
            f"rows of the old placement are not on the new one ({listed}); the old copy"
            " is left to Citus's deferred cleanup (citus.defer_shard_delete_interval)"
        )


def unflushed_commit_nodes(connection: BaseDatabaseWrapper) -> list[str]:
    """The nodes (and this connection) that acknowledge a commit before it is flushed
    (``synchronous_commit = off``), each as ``host:port``.

    Citus's online move waits until the new placement has caught up with the old one's
    WAL *write* position, then switches over; an asynchronously committed write is
    acknowledged before its commit record is flushed, and can miss the copy. Measured
    (docs/how-to/citus.md): 27 acknowledged records lost in 25 moves under writes with
    synchronous commit off, none in 40 with it on.
    """
    nodes = []
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        (value,) = cursor.fetchone()
        if value == "off":
            nodes.append("this connection")
        cursor.execute(
            "SELECT nodename, nodeport, success, result"
            " FROM run_command_on_workers($$SHOW synchronous_commit$$)"
        )
        for host, port, success, result in cursor.fetchall():
            if not success or result == "off":
                nodes.append(f"{host}:{port}")
    return nodes


def _refuse_unflushed(connection: BaseDatabaseWrapper, what: str) -> None:
    unsafe = unflushed_commit_nodes(connection)
    if unsafe:
        raise MoveRefused(
            f"refusing to {what}: synchronous_commit is off on {', '.join(unsafe)}, so a"
            " write acknowledged just before the switch-over could be missing from the"
            " copy. Set synchronous_commit = on (or local) on every node and try again."
        )


def _group_shards(connection: BaseDatabaseWrapper, org_id: int) -> dict[str, tuple[int, str]]:
    """Each tenant table's shard holding org ``org_id``: ``{table: (shard id, name)}``."""
    shards = {}
    with connection.cursor() as cursor:
        for model in DISTRIBUTED:
            table = model._meta.db_table
            cursor.execute(
                "SELECT s, shard_name(%s::regclass, s)"
                " FROM get_shard_id_for_distribution_column(%s, %s) AS s",
                [table, table, org_id],
            )
            shard, name = cursor.fetchone()
            shards[table] = (int(shard), name)
    return shards


def _node_connection(
    connection: BaseDatabaseWrapper, host: str, port: int, *, autocommit: bool = True
) -> Any:
    """A connection of memoryhub's database user to one node (Citus's own connections
    to its workers are made the same way: one user, one database name on every node)."""
    settings = connection.settings_dict
    return psycopg.connect(
        host=host,
        port=port,
        dbname=settings["NAME"],
        user=settings.get("USER") or None,
        password=settings.get("PASSWORD") or None,
        autocommit=autocommit,
    )


#: Ids compared per round trip when a copy is verified.
VERIFY_CHUNK = 10_000


def verify_copy(
    connection: BaseDatabaseWrapper,
    old: dict[str, tuple[str, int, str]],
    new: dict[str, tuple[str, int, str]],
    *,
    org_id: int | None = None,
) -> dict[str, int]:
    """How many rows of each old shard (``{table: (host, port, shard name)}``) are not
    in its new shard (same shape); only org ``org_id``'s rows when given. Streams the
    old ids in chunks: bounded memory at any size."""
    missing: dict[str, int] = {}
    where = "WHERE org_id = %s" if org_id is not None else ""
    params = [org_id] if org_id is not None else []
    for table, (old_host, old_port, old_name) in old.items():
        new_host, new_port, new_name = new[table]
        lost = 0
        with (
            # A transaction of its own: the old ids are read through a server-side cursor.
            _node_connection(connection, old_host, old_port, autocommit=False) as source,
            _node_connection(connection, new_host, new_port) as target,
            source.cursor(name="memoryhub_verify") as ids,
        ):
            ids.execute(f'SELECT id FROM "{old_name}" {where}', params)
            while chunk := [row[0] for row in ids.fetchmany(VERIFY_CHUNK)]:
                (found,) = target.execute(
                    f'SELECT count(*) FROM "{new_name}" WHERE id = ANY(%s)', [chunk]
                ).fetchone()
                lost += len(chunk) - int(found)
        if lost:
            missing[table] = lost
    return missing


def cleanup(connection: BaseDatabaseWrapper) -> int:
    """Drop what moves and splits left behind (the old copies of moved shards, which
    Citus drops lazily); return how many there were."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_dist_cleanup")
        (before,) = cursor.fetchone()
        cursor.execute("CALL citus_cleanup_orphaned_resources()")
    return int(before)


#: The advisory lock of the shards' layout: the index maintenance run holds it, and
#: skips its run while it is taken; a tenant's move or isolation holds it for its length,
#: after a running maintenance run has finished. An index built while a shard moves
#: deadlocks with the move, or finds the shard's relation gone.
LAYOUT_LOCK = "memoryhub tenant indexes"


#: How often a move asks again for :data:`LAYOUT_LOCK` while a maintenance run holds it.
LAYOUT_POLL_SECONDS = 0.2


@contextmanager
def layout_lock(connection: BaseDatabaseWrapper, *, wait: bool) -> Iterator[bool]:
    """Hold :data:`LAYOUT_LOCK` (yields True), or, not ``wait``-ing, yield False when
    another session holds it. A transaction lock inside a transaction (released however
    it ends), else a session lock."""
    in_transaction = connection.in_atomic_block
    function = "pg_try_advisory_xact_lock" if in_transaction else "pg_try_advisory_lock"
    told = False
    while True:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {function}(hashtext(%s))", [LAYOUT_LOCK])
            (locked,) = cursor.fetchone()
        if locked or not wait:
            break
        # Asked again rather than waited for in one statement: a waiting statement keeps
        # its snapshot, which the running build (CREATE INDEX CONCURRENTLY) would wait
        # for in turn, and one of the two would be cancelled as a deadlock.
        if not told:
            logger.info("waiting for the index maintenance run to finish")
            told = True
        time.sleep(LAYOUT_POLL_SECONDS)
    try:
        yield locked
    finally:
        if locked and not in_transaction:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [LAYOUT_LOCK])


def move_tenant(connection: BaseDatabaseWrapper, org_id: int, host: str, port: int) -> str:
    """Move org ``org_id``'s shard group (and the orgs sharing it) to worker
    ``host:port``, online (see :func:`_move`), holding :data:`LAYOUT_LOCK`."""
    with layout_lock(connection, wait=True):
        return _move(connection, org_id, host, port)


def _move(connection: BaseDatabaseWrapper, org_id: int, host: str, port: int) -> str:
    """Move org ``org_id``'s shard group (and the orgs sharing it) to worker
    ``host:port``, online: Citus copies it by logical replication while writes go on and
    switches over with a brief block of writes to it.

    Refused (:class:`MoveRefused`, nothing changed) while a node acknowledges commits it
    has not flushed (:func:`unflushed_commit_nodes`). Once moved, every row of the old
    placement is looked for on the new one (:func:`verify_copy`); then the old copy is
    dropped, or, if any is missing, left to Citus's deferred cleanup and
    :class:`CopyIncomplete` raised."""
    node = tenant_node(connection, org_id)
    if (node.host, node.port) == (host, port):
        return f"already on {host}:{port}"
    _refuse_unflushed(connection, "move")
    shards = _group_shards(connection, org_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT citus_move_shard_placement(%s, %s, %s, %s, %s,"
            " shard_transfer_mode => 'force_logical')",
            [node.shard, node.host, node.port, host, port],
        )
    missing = verify_copy(
        connection,
        {table: (node.host, node.port, name) for table, (_, name) in shards.items()},
        {table: (host, port, name) for table, (_, name) in shards.items()},
    )
    if missing:
        raise CopyIncomplete(missing)
    _cleanup_now(connection)
    return f"moved from {node.host}:{node.port} to {host}:{port}"


def _cleanup_now(connection: BaseDatabaseWrapper) -> None:
    """Drop the old copies at once; a cleanup the database cancels (a deadlock with a
    writer of the orgs just moved) leaves them to Citus's deferred cleanup, which drops
    them within ``citus.defer_shard_delete_interval``."""
    try:
        cleanup(connection)
    except DatabaseError as exc:
        if not is_transient(exc):
            raise
        logger.warning("old copies left to Citus's deferred cleanup: %s", exc)


def isolate_tenant(connection: BaseDatabaseWrapper, org_id: int) -> int:
    """Give org ``org_id`` a shard group of its own (see :func:`_isolate`), holding
    :data:`LAYOUT_LOCK`; return its shard."""
    with layout_lock(connection, wait=True):
        return _isolate(connection, org_id)


def _isolate(connection: BaseDatabaseWrapper, org_id: int) -> int:
    """Give org ``org_id`` a shard group of its own; return its shard. An org already
    alone keeps its shard.

    The split blocks writes to the orgs of the shard group being split while it copies
    them (reads go on); queries and writes elsewhere go on. Citus's non-blocking split
    (``force_logical``) never finishes here while a record is updated during it: its
    apply worker stops on every update ("publisher did not send replica identity
    column", citusdata/citus#6790), so it is not used. A move is online.
    """
    node = tenant_node(connection, org_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT shardminvalue = shardmaxvalue FROM pg_dist_shard WHERE shardid = %s",
            [node.shard],
        )
        (alone,) = cursor.fetchone()
        if alone:
            return node.shard
        _refuse_unflushed(connection, "isolate")
        before = _group_shards(connection, org_id)
        cursor.execute(
            "SELECT isolate_tenant_to_new_shard(%s, %s, 'CASCADE',"
            " shard_transfer_mode => 'block_writes')",
            [_anchor(), org_id],
        )
        (shard,) = cursor.fetchone()
    after = _group_shards(connection, org_id)
    missing = verify_copy(
        connection,
        {table: (node.host, node.port, name) for table, (_, name) in before.items()},
        {table: (node.host, node.port, name) for table, (_, name) in after.items()},
        org_id=org_id,
    )
    if missing:
        raise CopyIncomplete(missing)
    _cleanup_now(connection)
    return int(shard)


def org_of(model: type[models.Model], pk: Any) -> list[int]:
    """The org of ``model``'s row ``pk`` (empty if there is none), read first by a task
    given only an id: a row lock then names its org, which a cluster needs to find the
    row's shard (a ``FOR UPDATE`` must be routed to one)."""
    manager = model._base_manager
    return list(manager.filter(pk=pk).values_list("org_id", flat=True)[:1])
