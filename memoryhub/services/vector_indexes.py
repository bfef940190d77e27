"""Vector indexes: one HNSW expression index per embedding model over the shared table,
and a partial one per large domain (built, kept, rebuilt and dropped by the maintenance
task). Queries find the right one by its predicate.

Vectors stored in bulk carry the number of the store that wrote them
(``MemoryRecord.vector_batch``) and are in no shared index. Where they go is
:func:`placement`'s decision: a small domain is scanned exactly anyway, so its vectors
need no index at all; a large domain's wait in its *delta* until its own index is built
again over them, in bulk (``CREATE INDEX CONCURRENTLY`` of the next one, then a swap:
:func:`ensure_tenant_indexes`). Queries scan a domain's delta exactly beside the HNSW
search, so a vector is searchable from the moment it is stored. The delta stays small by
construction: maintenance rebuilds the domain's index once the delta outgrows
``TENANT_INDEX_REBUILD_SHARE`` of what the index covers, and folds it into the shared
index (row by row) when the domain has no index of its own and is too large for an
exact scan.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from psycopg import sql

from ..cache import bump_generation, bump_generation_on_commit
from ..conf import memoryhub_settings
from ..models import MemoryRecord
from ..scope import Scope
from . import filter_indexes, record_indexes, word_statistics
from .distribution import is_citus, layout_lock
from .store.locks import int4_key

logger = logging.getLogger(__name__)


#: HNSW build parameters of the indexes built here (domains' own indexes, and the
#: shared index when it is built again). ``ef_construction`` is twice pgvector's 64: a
#: better-connected graph answers known-item questions with clearly higher recall
#: against exact search, the more so the larger the domain, for a longer build.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 128
#: The sequence numbering bulk stores of vectors (``MemoryRecord.vector_batch``).
VECTOR_BATCH_SEQUENCE = "memoryhub_vector_batch"


def _model_digest(model_name: str) -> str:
    """Eight hex digits naming ``model_name`` in index names."""
    return hashlib.sha1(model_name.encode("utf-8")).hexdigest()[:8]


def vector_index_name(model_name: str) -> str:
    """A stable, valid index name for ``model_name`` (at most 63 bytes)."""
    slug = "".join(ch if ch.isalnum() else "_" for ch in model_name.lower())[:30]
    return f"memoryhub_hnsw_{slug}_{_model_digest(model_name)}"


def vector_expression(dimensions: int) -> str:
    """The indexed expression; queries must use exactly this to use the index."""
    return f"(embedding::vector({int(dimensions)}))"


def ensure_vector_index(
    model_name: str, dimensions: int, *, concurrently: bool | None = None
) -> tuple[str, bool]:
    """Create the HNSW expression index of one embedding model if it is missing.

    It holds the model's vectors stored row by row (bulk-stored ones are searched
    elsewhere). Returns ``(index name, created)``. ``CONCURRENTLY`` is used outside a
    transaction (production), plain ``CREATE INDEX`` inside one (tests, migrations).
    """
    name = vector_index_name(model_name)
    return name, _create_hnsw_index(name, model_name, dimensions, concurrently=concurrently)


def _create_hnsw_index(
    name: str,
    model_name: str,
    dimensions: int,
    *,
    tenant: tuple[int, int] | None = None,
    covers: int = 0,
    concurrently: bool | None = None,
) -> bool:
    """``CREATE INDEX`` of the model's HNSW index, unless one of that name exists;
    whether it was created.

    The shared index holds the vectors stored row by row; a ``tenant``'s (org, domain)
    holds its domain's, and those of its bulk stores up to number ``covers``.
    """
    if concurrently is None:
        concurrently = not connection.in_atomic_block
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_class WHERE relname = %s AND relkind = 'i'", [name])
        if cursor.fetchone() is not None:
            return False
        predicate = sql.SQL("embedding_model = {model}").format(model=sql.Literal(model_name))
        if tenant is None:
            predicate = sql.SQL("{} AND vector_batch IS NULL").format(predicate)
        else:
            predicate = sql.SQL(
                "{} AND org_id = {} AND domain_id = {}"
                " AND (vector_batch IS NULL OR vector_batch <= {})"
            ).format(
                predicate,
                sql.Literal(int(tenant[0])),
                sql.Literal(int(tenant[1])),
                sql.Literal(int(covers)),
            )
        statement = sql.SQL(
            "CREATE INDEX {concurrently} IF NOT EXISTS {name} ON {table} "
            "USING hnsw ({expression} vector_cosine_ops) "
            "WITH (m = {m}, ef_construction = {ef}) WHERE {predicate}"
        ).format(
            concurrently=sql.SQL("CONCURRENTLY" if concurrently else ""),
            name=sql.Identifier(name),
            table=sql.Identifier(MemoryRecord._meta.db_table),
            expression=sql.SQL(vector_expression(dimensions)),
            m=sql.Literal(HNSW_M),
            ef=sql.Literal(HNSW_EF_CONSTRUCTION),
            predicate=predicate,
        )
    record_indexes.build(statement, concurrently=concurrently)
    return True


# --- per-tenant vector indexes ---------------------------------------------------------------

#: Tenant index names: ``memoryhub_thnsw_<org>_<domain>_<model digest>`` (``_next`` while
#: its successor is built). No shared index name (``memoryhub_hnsw_<model slug>_<digest>``)
#: can take this form.
TENANT_INDEX_PREFIX = "memoryhub_thnsw_"
#: A domain holding this share of all records gets its own index below
#: ``TENANT_INDEX_MIN_RECORDS`` (if it is above ``EXACT_SCAN_THRESHOLD``): at most ten such.
TENANT_INDEX_MIN_SHARE = 0.10
#: A domain's own index is built again once the vectors stored in bulk since it was built
#: (its delta, scanned exactly by every query meanwhile) outgrow this share of the records
#: it covers (or ``EXACT_SCAN_THRESHOLD``, whichever is larger). At 1 the index doubles
#: from one build to the next: a domain loaded from empty costs at most two builds of its
#: final size, where a quarter cost five.
TENANT_INDEX_REBUILD_SHARE = 1.0
#: What inserting a vector into an HNSW index row by row costs, in bulk builds of one:
#: 12 (the ratio ``python -m benchmarks.index_builds`` reports between a vector inserted
#: and one built in bulk with two workers), halved for the two scans of the whole table a
#: concurrent build adds. A settled delta smaller than the index over this is inserted
#: into it row by row rather than rebuilt.
ROW_INSERT_COST = 6

_TENANT_INDEX_NAME = re.compile(r"^memoryhub_thnsw_(\d+)_(\d+)_([0-9a-f]{8})(_next)?$")
#: How an index predicate (as PostgreSQL prints it) says which bulk stores it covers.
_COVERS = re.compile(r"vector_batch <= '?(\d+)")
NEXT_SUFFIX = "_next"


def tenant_index_name(model_name: str, org_id: int, domain_id: int) -> str:
    """The name of one domain's own HNSW index of ``model_name`` (at most 63 bytes)."""
    return f"{TENANT_INDEX_PREFIX}{int(org_id)}_{int(domain_id)}_{_model_digest(model_name)}"


@dataclass(slots=True)
class TenantIndexChanges:
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    #: Built again over their domain's delta (and swapped in).
    rebuilt: list[str] = field(default_factory=list)
    #: Bulk-stored vectors moved into the shared index, per "org/domain".
    folded: dict[str, int] = field(default_factory=dict)
    #: Domains whose words were counted ("org/domain"; ``services.word_statistics``).
    words: list[str] = field(default_factory=list)
    #: Domains' own full-text indexes built and dropped (``word_statistics``).
    keyword_created: list[str] = field(default_factory=list)
    keyword_dropped: list[str] = field(default_factory=list)
    #: ``INDEXED_METADATA_KEYS`` whose index was built; the names of those dropped.
    filter_keys_indexed: list[str] = field(default_factory=list)
    filter_indexes_dropped: list[str] = field(default_factory=list)
    #: Another process was maintaining the tenant indexes: this run did nothing.
    busy: bool = False


#: ``MemoryRecord.vector_batch`` of a vector stored row by row into its domain's own
#: index only (every own index covers it; the shared index holds nulls only).
OWN_INDEX_ONLY = 0


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one domain's vectors of a bulk store go: ``batch`` (their number: into the
    domain's delta; ``OWN_INDEX_ONLY``: row by row into its own index) or None (row by row
    into the shared index); ``maintain``: the domain's own index is due to be built or
    rebuilt."""

    batch: int | None
    maintain: bool = False
    #: The domain outgrew the exact scan without an index of its own: the delta it
    #: gathered while it was small goes into the shared index now (:func:`fold_delta`).
    fold: bool = False


def _tenant_bound(total: int, minimum: int) -> int:
    """The size at which a domain gets its own index: ``minimum`` records, or a
    ``TENANT_INDEX_MIN_SHARE`` of ``total`` and more than ``EXACT_SCAN_THRESHOLD``."""
    by_share = math.ceil(TENANT_INDEX_MIN_SHARE * total)
    return min(minimum, max(by_share, memoryhub_settings.EXACT_SCAN_THRESHOLD + 1))


def _rebuild_bound(covered: int) -> int:
    return max(
        memoryhub_settings.EXACT_SCAN_THRESHOLD, math.ceil(TENANT_INDEX_REBUILD_SHARE * covered)
    )


def _delta_most(bound: int) -> int:
    """How large a domain's delta may grow before its vectors go into its own index row
    by row: twice the size at which its index is rebuilt (a load keeps storing in bulk
    while the rebuild it asked for runs, so a domain loaded from empty costs about two
    builds of its final size), and at least ``BULK_DELTA_MAX``. Only a load that outruns
    its index's rebuilds reaches it."""
    return max(memoryhub_settings.BULK_DELTA_MAX, 2 * bound)


def placement(scope: Scope, model_name: str) -> Placement:
    """Where a bulk store of ``scope``'s domain puts its vectors (its records already
    written): outside the shared index when the domain is small enough to be scanned
    exactly, or has or qualifies for its own index (built in bulk over them); else into
    the shared index, row by row."""
    threshold = memoryhub_settings.EXACT_SCAN_THRESHOLD
    minimum = memoryhub_settings.TENANT_INDEX_MIN_RECORDS
    own = own_index(scope, model_name)
    table = MemoryRecord._meta.db_table
    with connection.cursor() as cursor:
        if own is not None:
            bound = _rebuild_bound(own.covered)
            most = _delta_most(bound)
            delta = _delta_size(cursor, scope, model_name, own.covers, most + 1)
            if delta >= most:
                return Placement(OWN_INDEX_ONLY, maintain=True)
            return Placement(_next_batch(cursor), maintain=delta > bound)
        cursor.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE org_id = %s AND domain_id = %s"
            " LIMIT %s) AS domain",
            [scope.org_id, scope.domain_id, max(minimum, threshold) + 1],
        )
        (size,) = cursor.fetchone()
        if size <= threshold:
            return Placement(_next_batch(cursor))
        if minimum > 0 and size >= _tenant_bound(_table_size(cursor, size), minimum):
            return Placement(_next_batch(cursor), maintain=True)
        return Placement(None, fold=_delta_size(cursor, scope, model_name, -1, 1) > 0)


def _next_batch(cursor: object) -> int:
    cursor.execute("SELECT nextval(%s)", [VECTOR_BATCH_SEQUENCE])  # type: ignore[attr-defined]
    return int(cursor.fetchone()[0])  # type: ignore[attr-defined]


def _last_batch(cursor: object) -> int:
    """The number of the latest bulk store (0: none yet)."""
    cursor.execute(  # type: ignore[attr-defined]
        f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {VECTOR_BATCH_SEQUENCE}"
    )
    return int(cursor.fetchone()[0])  # type: ignore[attr-defined]


def _table_size(cursor: object, domain_size: int) -> int:
    """All records, as the statistics know them (the planner's estimate, or the live
    rows counted since, whichever is larger); counted, as far as the share rule needs
    for a domain of ``domain_size``, while the statistics know nothing yet."""
    cursor.execute(  # type: ignore[attr-defined]
        "SELECT greatest(c.reltuples, coalesce(s.n_live_tup, 0)) FROM pg_class c"
        " LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = %s::regclass",
        [MemoryRecord._meta.db_table],
    )
    (estimate,) = cursor.fetchone()  # type: ignore[attr-defined]
    if estimate > 0:
        return int(estimate)
    cursor.execute(  # type: ignore[attr-defined]
        f"SELECT count(*) FROM (SELECT 1 FROM {MemoryRecord._meta.db_table} LIMIT %s) AS t",
        [math.ceil(domain_size / TENANT_INDEX_MIN_SHARE) + 1],
    )
    return int(cursor.fetchone()[0])  # type: ignore[attr-defined]


def _delta_size(cursor: object, scope: Scope, model_name: str, covers: int, limit: int) -> int:
    """How many of the domain's vectors of ``model_name`` were stored in bulk after
    ``covers`` (counted up to ``limit``)."""
    cursor.execute(  # type: ignore[attr-defined]
        f"SELECT count(*) FROM (SELECT 1 FROM {MemoryRecord._meta.db_table}"
        " WHERE domain_id = %s AND vector_batch > %s AND org_id = %s AND embedding_model = %s"
        " LIMIT %s) AS delta",
        [scope.domain_id, covers, scope.org_id, model_name, limit],
    )
    return int(cursor.fetchone()[0])  # type: ignore[attr-defined]


def ensure_tenant_indexes(
    model_name: str | None = None,
    dimensions: int | None = None,
    *,
    min_records: int | None = None,
    concurrently: bool | None = None,
    settle_after: timedelta | None = None,
) -> TenantIndexChanges:
    """Give every domain with at least ``min_records`` records (default
    ``TENANT_INDEX_MIN_RECORDS``; 0 gives none), or at least ``TENANT_INDEX_MIN_SHARE`` of
    all records and more than ``EXACT_SCAN_THRESHOLD``, its own HNSW index of the model;
    drop the indexes of domains that fell under half of that (or are gone), and any left
    invalid by a failed ``CONCURRENTLY`` build.

    Then the deltas (vectors stored in bulk since): a domain's own index is built again
    over its delta once the delta outgrows ``TENANT_INDEX_REBUILD_SHARE`` of what the
    index covers, or once no bulk store has added to it for ``settle_after`` (default
    ``SWEEP_PENDING_AFTER`` seconds; zero: now, as after a load); a domain without its own
    index that is too large to be scanned exactly has its delta folded into the shared
    index.

    A large domain's queries then search a graph of its own records only, smaller than
    the shared one and holding none of the records its filter would throw away: as good
    a recall in less time. Run by the sweeper's task, by the indexing pipeline when a
    bulk store asks for it, and by ``memoryhub_ensure_indexes``; one run at a time, and
    none while ``memoryhub_citus`` moves or isolates a tenant
    (:data:`~.distribution.LAYOUT_LOCK`; such a run returns ``busy``).
    """
    if model_name is None or dimensions is None:
        embedder = memoryhub_settings.embedder()
        model_name, dimensions = embedder.name, embedder.dimensions
    minimum = memoryhub_settings.TENANT_INDEX_MIN_RECORDS if min_records is None else min_records
    if concurrently is None:
        concurrently = not connection.in_atomic_block
    if settle_after is None:
        settle_after = timedelta(seconds=memoryhub_settings.SWEEP_PENDING_AFTER)
    changes = TenantIndexChanges()
    with layout_lock(connection, wait=False) as locked:
        if not locked:
            changes.busy = True
            return changes
        with _no_statement_timeout(concurrently):
            _upgrade_shared_index(model_name, dimensions, concurrently=concurrently)
            sizes = _maintain(model_name, dimensions, minimum, concurrently, settle_after, changes)
            # The keyword leg's statistics and indexes of large domains, in the same run
            # (and lock).
            if memoryhub_settings.KEYWORD_STATISTICS_MIN_RECORDS and not sizes:
                sizes = _domain_sizes()
            changes.words = word_statistics.refresh(sizes)
            changes.keyword_created, changes.keyword_dropped = (
                word_statistics.ensure_keyword_indexes(sizes, concurrently=concurrently)
            )
            # The indexes of the metadata keys queries filter on.
            changes.filter_keys_indexed, changes.filter_indexes_dropped = (
                filter_indexes.ensure_filter_indexes(concurrently=concurrently)
            )
    if changes.created or changes.dropped or changes.rebuilt or changes.folded:
        logger.info(
            "tenant HNSW indexes: created %s, dropped %s, rebuilt %s; folded %s",
            changes.created,
            changes.dropped,
            changes.rebuilt,
            changes.folded,
        )
    return changes


def _maintain(
    model_name: str,
    dimensions: int,
    minimum: int,
    concurrently: bool,
    settle_after: timedelta,
    changes: TenantIndexChanges,
) -> dict[tuple[int, int], int]:
    """One maintenance run's work (under the lock; see :func:`ensure_tenant_indexes`);
    returns the records per (org, domain) it counted (none when it needed no count)."""
    deltas = _deltas(model_name)
    counts = _domain_sizes() if minimum > 0 or deltas else {}
    # Large, or a large share of a smaller table (and too large for the exact scan):
    # what a filtered search of the shared index costs depends on the share.
    bound = _tenant_bound(sum(counts.values()), minimum) if minimum > 0 else 0
    digest = _model_digest(model_name)
    existing = {
        name: ok
        for name, ok in _tenant_indexes().items()
        if _TENANT_INDEX_NAME.match(name)[3] == digest  # type: ignore[index]
    }
    wanted = {
        tenant_index_name(model_name, org, domain): (org, domain)
        for (org, domain), n in counts.items()
        if minimum > 0 and n >= bound
    }
    # At least half the bound: kept (a domain hovering at the line is not rebuilt).
    kept = {
        tenant_index_name(model_name, org, domain)
        for (org, domain), n in counts.items()
        if minimum > 0 and n >= max(bound // 2, 1)
    }
    for name, valid in existing.items():
        # Shrunk, gone, a failed build, or a successor a crash left behind.
        if name not in kept or not valid or name.endswith(NEXT_SUFFIX):
            record_indexes.drop(name, concurrently=concurrently)
            if not name.endswith(NEXT_SUFFIX):
                changes.dropped.append(name)
                _bump(name)
    # Every own index that stays (wanted, or kept above half the bound) keeps up with its
    # domain's delta; a wanted one that is missing is built over every bulk store so far.
    staying = {**dict(_kept_tenants(existing, kept, changes.dropped)), **wanted}
    for name, tenant in staying.items():
        if existing.get(name) and name not in changes.dropped:
            due = _due(name, tenant, model_name, settle_after)
            if due == "rebuild":
                _rebuild(name, tenant, model_name, dimensions, concurrently)
                changes.rebuilt.append(name)
            elif due == "insert":
                own = _own_index_by_name(name)
                covers = own.covers if own is not None else 0
                changes.folded[f"{tenant[0]}/{tenant[1]}"] = _fold(
                    tenant, model_name, after=covers, into=OWN_INDEX_ONLY
                )
            continue
        with _connection_cursor() as cursor:
            covers = _last_batch(cursor)
        if _create_hnsw_index(
            name, model_name, dimensions, tenant=tenant, covers=covers, concurrently=concurrently
        ):
            changes.created.append(name)
            _bump(name)
    threshold = memoryhub_settings.EXACT_SCAN_THRESHOLD
    owned = set(staying.values())
    for tenant in deltas:
        # A domain without an index of its own, too large for the exact scan: its
        # vectors belong in the shared index. A small one's stay out of every index.
        if tenant not in owned and counts.get(tenant, 0) > threshold:
            changes.folded[f"{tenant[0]}/{tenant[1]}"] = _fold(tenant, model_name)
    return counts


def _kept_tenants(
    existing: dict[str, bool], kept: set[str], dropped: list[str]
) -> Iterator[tuple[str, tuple[int, int]]]:
    for name in existing:
        match = _TENANT_INDEX_NAME.match(name)
        if match and name in kept and name not in dropped and not match[4]:
            yield name, (int(match[1]), int(match[2]))


@contextmanager
def _connection_cursor() -> Iterator[object]:
    with connection.cursor() as cursor:
        yield cursor


def _deltas(model_name: str) -> dict[tuple[int, int], int]:
    """Bulk-stored vectors of ``model_name`` per (org, domain), covered or not (the
    partial index of bulk-stored vectors)."""
    with _connection_cursor() as cursor:
        cursor.execute(  # type: ignore[attr-defined]
            f"SELECT org_id, domain_id, count(*) FROM {MemoryRecord._meta.db_table}"
            " WHERE vector_batch IS NOT NULL AND embedding_model = %s GROUP BY 1, 2",
            [model_name],
        )
        return {(org, domain): n for org, domain, n in cursor.fetchall()}  # type: ignore[attr-defined]


def _due(
    name: str, tenant: tuple[int, int], model_name: str, settle_after: timedelta
) -> str | None:
    """What a domain's own index needs for its delta: ``"rebuild"`` (built again over
    it), ``"insert"`` (a settled delta small beside the index: inserted row by row) or
    None (nothing yet)."""
    own = _own_index_by_name(name)
    if own is None:
        return None
    if own.outdated:
        return "rebuild"  # built before bulk stores existed: its predicate says nothing of them
    scope = Scope(org_id=tenant[0], domain_id=tenant[1])
    bound = _rebuild_bound(own.covered)
    with connection.cursor() as cursor:
        delta = _delta_size(cursor, scope, model_name, own.covers, bound + 1)
        if delta > bound:
            return "rebuild"
        if not delta:
            return None
        cursor.execute(
            f"SELECT max(indexed_at) FROM {MemoryRecord._meta.db_table}"
            " WHERE domain_id = %s AND vector_batch > %s AND org_id = %s AND embedding_model = %s",
            [scope.domain_id, own.covers, scope.org_id, model_name],
        )
        (newest,) = cursor.fetchone()
    if newest is not None and newest > timezone.now() - settle_after:
        return None  # still growing: a load is under way
    return "insert" if delta * ROW_INSERT_COST < own.covered else "rebuild"


def _rebuild(
    name: str, tenant: tuple[int, int], model_name: str, dimensions: int, concurrently: bool
) -> None:
    """Build a domain's index again over every bulk store so far (concurrently, under a
    second name), then swap it in: queries use the old one until the new one is valid."""
    with _connection_cursor() as cursor:
        covers = _last_batch(cursor)
    successor = name + NEXT_SUFFIX
    _create_hnsw_index(
        successor, model_name, dimensions, tenant=tenant, covers=covers, concurrently=concurrently
    )
    _swap(successor, name, concurrently=concurrently)
    _bump(name)


def _swap(successor: str, name: str, *, concurrently: bool) -> None:
    record_indexes.drop(name, concurrently=concurrently)
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("ALTER INDEX {} RENAME TO {}")
            .format(sql.Identifier(successor), sql.Identifier(name))
            .as_string(cursor.connection)
        )


#: The first key of a domain's fold lock (the writer lock's is -1, word statistics' -2).
FOLD_LOCK_CLASS = -3


def _fold(
    tenant: tuple[int, int], model_name: str, *, after: int = -1, into: int | None = None
) -> int:
    """Move a domain's bulk-stored vectors numbered above ``after`` into an index row by
    row: the shared one (``into`` None) or the domain's own (``OWN_INDEX_ONLY``); how
    many. Waits for a worker folding the same domain (:func:`fold_delta`)."""
    with transaction.atomic():
        folded = _fold_rows(tenant, model_name, after=after, into=into, wait=True)
    bump_generation(Scope(org_id=tenant[0], domain_id=tenant[1]))
    return folded


def fold_delta(scope: Scope, model_name: str) -> int:
    """In the caller's transaction, move the delta of ``scope``'s domain (grown past the
    exact scan, with no index of its own) into the shared index: the indexing worker
    that stores the batch which took it past does it, so the load's workers share that
    work instead of leaving it to one maintenance run after the load. Another
    transaction folding the same domain does it instead (0)."""
    folded = _fold_rows((scope.org_id, scope.domain_id), model_name, wait=False)
    if folded:
        bump_generation_on_commit(scope)
    return folded


def _fold_rows(
    tenant: tuple[int, int],
    model_name: str,
    *,
    after: int = -1,
    into: int | None = None,
    wait: bool,
) -> int:
    """The fold's statement, under the domain's fold lock (until the transaction ends),
    so two folds of one domain never update its rows in different orders; without
    ``wait``, nothing when another transaction holds it."""
    function = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
    with _connection_cursor() as cursor:
        cursor.execute(  # type: ignore[attr-defined]
            f"SELECT {function}(%s, %s)::text", [FOLD_LOCK_CLASS, int4_key(tenant[1])]
        )
        if cursor.fetchone()[0] == "false":  # type: ignore[attr-defined]
            return 0
        cursor.execute(  # type: ignore[attr-defined]
            f"UPDATE {MemoryRecord._meta.db_table} SET vector_batch = %s"
            " WHERE domain_id = %s AND vector_batch > %s AND org_id = %s"
            " AND embedding_model = %s",
            [into, tenant[1], after, tenant[0], model_name],
        )
        return int(cursor.rowcount)  # type: ignore[attr-defined]


def _upgrade_shared_index(model_name: str, dimensions: int, *, concurrently: bool) -> None:
    """A shared index built before bulk stores existed holds their vectors too (each
    inserted row by row): build it again without them, then swap it in."""
    name = vector_index_name(model_name)
    successor = name + NEXT_SUFFIX
    predicate = _predicate(name)
    if predicate is None and _predicate(successor) is not None:
        _swap(successor, name, concurrently=concurrently)  # a crash between drop and rename
        return
    if predicate is None or "vector_batch" in predicate:
        return
    record_indexes.drop(successor, concurrently=concurrently)  # a crashed upgrade's leftover
    _create_hnsw_index(successor, model_name, dimensions, concurrently=concurrently)
    _swap(successor, name, concurrently=concurrently)


def _predicate(name: str) -> str | None:
    with _connection_cursor() as cursor:
        cursor.execute(  # type: ignore[attr-defined]
            "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
            [name],
        )
        row = cursor.fetchone()  # type: ignore[attr-defined]
    return None if row is None else str(row[0] or "")


def _domain_sizes() -> dict[tuple[int, int], int]:
    """Records per (org, domain), any status: an index-only scan of the tenant btree."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT org_id, domain_id, count(*) FROM {MemoryRecord._meta.db_table} GROUP BY 1, 2"
        )
        return {(org, domain): n for org, domain, n in cursor.fetchall()}


def _tenant_indexes() -> dict[str, bool]:
    """Every tenant index on the records table (any model), and whether it is valid."""
    return record_indexes.named(_TENANT_INDEX_NAME)


def _bump(name: str) -> None:
    """The domain's compiled plans chose their index and ``ef_search`` for the old set
    of indexes (and the delta it left)."""
    _shard_sizes.pop(name, None)
    match = _TENANT_INDEX_NAME.match(name)
    if match:
        bump_generation(Scope(org_id=int(match[1]), domain_id=int(match[2])))


@contextmanager
def _no_statement_timeout(session: bool) -> Iterator[None]:
    """Index builds take minutes on a large domain: a role's ``statement_timeout`` would
    leave an invalid index behind, dropped and rebuilt at every run."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SET statement_timeout = 0" if session else "SET LOCAL statement_timeout = 0"
        )
    try:
        yield
    finally:
        if session:
            with connection.cursor() as cursor:
                cursor.execute("RESET statement_timeout")


def has_tenant_indexes() -> bool:
    """Whether any domain has its own HNSW index (of any model)."""
    return bool(_tenant_indexes())


def has_deltas() -> bool:
    """Whether any vector was stored in bulk (maintenance may have a delta to fold)."""
    with _connection_cursor() as cursor:
        cursor.execute(  # type: ignore[attr-defined]
            f"SELECT EXISTS (SELECT 1 FROM {MemoryRecord._meta.db_table}"
            " WHERE vector_batch IS NOT NULL)"
        )
        return bool(cursor.fetchone()[0])  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class OwnIndex:
    """A domain's own index as queries see it: the share of all records it holds (what
    the shared index would hold of the model's vectors, had none been stored in bulk),
    the bulk stores it covers (up to number ``covers``) and about how many records
    (``covered``)."""

    share: float
    covers: int
    covered: int
    #: Built before bulk stores existed (its predicate does not name them).
    outdated: bool = False


def _own_index_row(name: str) -> tuple[float, float, str] | None:
    """The own index ``name``'s rows, the records table's, and the index's predicate, as
    the planner's statistics count them."""
    # On a cluster the shards are read over connections of their own, so only outside a
    # transaction: one that built or changed an index holds locks those reads would wait
    # for, and they would not see its uncommitted index anyway.
    if is_citus(connection) and not connection.in_atomic_block:
        return _own_index_row_on_shards(name)
    with _connection_cursor() as cursor:
        cursor.execute(  # type: ignore[attr-defined]
            "SELECT t.reltuples, r.reltuples, pg_get_expr(i.indpred, i.indrelid)"
            " FROM pg_class t JOIN pg_index i ON i.indexrelid = t.oid AND i.indisvalid"
            " JOIN pg_class r ON r.oid = i.indrelid WHERE t.relname = %s",
            [name],
        )
        row = cursor.fetchone()  # type: ignore[attr-defined]
    return None if row is None else (float(row[0]), float(row[1]), str(row[2] or ""))


#: On a Citus cluster, how long an own index's sizes read from the shards serve (they
#: change as the domain grows, not per query), and those read so far.
SHARD_SIZES_SECONDS = 60.0
_shard_sizes: dict[str, tuple[float, tuple[float, float, str] | None]] = {}


def _own_index_row_on_shards(name: str) -> tuple[float, float, str] | None:
    """:func:`_own_index_row` on a Citus cluster, whose coordinator's catalog counts no
    rows: the records table's rows summed over its shards (each worker's statistics),
    and the index's on the shard of its org, the one that holds the domain."""
    cached = _shard_sizes.get(name)
    if cached is not None and time.monotonic() - cached[0] < SHARD_SIZES_SECONDS:
        return cached[1]
    match = _TENANT_INDEX_NAME.match(name)
    if match is None:
        return None
    table = MemoryRecord._meta.db_table
    per_shard = (
        "SELECT json_build_array(r.reltuples, t.reltuples, pg_get_expr(i.indpred, i.indrelid))"
        " FROM pg_class r LEFT JOIN pg_class t ON t.relname = "
        + sql.Literal(name).as_string(None)
        + " || substring(r.relname from '_[0-9]+$')"
        " LEFT JOIN pg_index i ON i.indexrelid = t.oid AND i.indisvalid"
        " WHERE r.oid = '%s'::regclass"
    )
    with _connection_cursor() as cursor:
        cursor.execute(  # type: ignore[attr-defined]
            "SELECT shardid = get_shard_id_for_distribution_column(%s, %s), success, result"
            " FROM run_command_on_placements(%s, %s)",
            [table, int(match[1]), table, per_shard],
        )
        rows = cursor.fetchall()  # type: ignore[attr-defined]
    total, mine, predicate, valid = 0.0, 0.0, "", False
    for own_shard, success, result in rows:
        if not success:
            raise DatabaseError(f"reading a shard's statistics failed: {result}")
        shard_rows, index_rows, index_predicate = json.loads(result)
        total += max(float(shard_rows), 0.0)
        if own_shard and index_rows is not None and index_predicate is not None:
            mine, predicate, valid = float(index_rows), str(index_predicate), True
    row = (mine, total, predicate) if valid else None
    _shard_sizes[name] = (time.monotonic(), row)
    return row


def _own_index_by_name(name: str) -> OwnIndex | None:
    row = _own_index_row(name)
    if row is None:
        return None
    mine, total, predicate = row
    # Not counted yet (-1): assume the whole table.
    share = 1.0 if mine <= 0 or total <= 0 else min(mine / total, 1.0)
    found = _COVERS.search(predicate)
    return OwnIndex(
        share=share,
        covers=int(found[1]) if found else 0,
        covered=max(int(mine), 0),
        outdated=found is None,
    )


def own_index(scope: Scope, model_name: str) -> OwnIndex | None:
    """``scope``'s domain's own index of ``model_name``, when it exists and is valid
    (from the catalog: the planner's row counts and the index's predicate)."""
    return _own_index_by_name(tenant_index_name(model_name, scope.org_id, scope.domain_id))


def tenant_index_share(scope: Scope, model_name: str) -> float | None:
    """The share of all records that ``scope``'s domain's own index holds, when that index
    exists and is valid (the planner's row counts, from the catalog)."""
    own = own_index(scope, model_name)
    return None if own is None else own.share
