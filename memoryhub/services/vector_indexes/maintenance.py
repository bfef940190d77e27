"""Maintaining the domains' own indexes: built when a domain qualifies, rebuilt or folded
when its delta grows, dropped when it no longer qualifies; one run at a time, beside
tenant moves."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from ...cache import bump_generation, bump_generation_on_commit
from ...conf import memoryhub_settings
from ...models import MemoryRecord
from ...scope import Scope
from .. import filter_indexes, record_indexes, word_statistics
from ..distribution import layout_lock
from ..store.locks import int4_key
from .own import (
    TENANT_INDEX_NAME,
    own_index_by_name,
    shard_sizes,
    tenant_index_name,
    tenant_indexes,
)
from .placement import OWN_INDEX_ONLY, delta_size, last_batch, rebuild_bound, tenant_bound
from .shared import (
    NEXT_SUFFIX,
    connection_cursor,
    create_hnsw_index,
    model_digest,
    no_statement_timeout,
    swap_index,
    upgrade_shared_index,
)

logger = logging.getLogger(__name__)


#: What inserting a vector into an HNSW index row by row costs, in bulk builds of one:
#: 12 (the ratio ``python -m benchmarks.index_builds`` reports between a vector inserted
#: and one built in bulk with two workers), halved for the two scans of the whole table a
#: concurrent build adds. A settled delta smaller than the index over this is inserted
#: into it row by row rather than rebuilt.
ROW_INSERT_COST = 6


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
        with no_statement_timeout(concurrently):
            upgrade_shared_index(model_name, dimensions, concurrently=concurrently)
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
    bound = tenant_bound(sum(counts.values()), minimum) if minimum > 0 else 0
    digest = model_digest(model_name)
    existing = {
        name: ok
        for name, ok in tenant_indexes().items()
        if TENANT_INDEX_NAME.match(name)[3] == digest  # type: ignore[index]
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
                own = own_index_by_name(name)
                covers = own.covers if own is not None else 0
                changes.folded[f"{tenant[0]}/{tenant[1]}"] = _fold(
                    tenant, model_name, after=covers, into=OWN_INDEX_ONLY
                )
            continue
        with connection_cursor() as cursor:
            covers = last_batch(cursor)
        if create_hnsw_index(
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
        match = TENANT_INDEX_NAME.match(name)
        if match and name in kept and name not in dropped and not match[4]:
            yield name, (int(match[1]), int(match[2]))


def _deltas(model_name: str) -> dict[tuple[int, int], int]:
    """Bulk-stored vectors of ``model_name`` per (org, domain), covered or not (the
    partial index of bulk-stored vectors)."""
    with connection_cursor() as cursor:
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
    own = own_index_by_name(name)
    if own is None:
        return None
    if own.outdated:
        return "rebuild"  # built before bulk stores existed: its predicate says nothing of them
    scope = Scope(org_id=tenant[0], domain_id=tenant[1])
    bound = rebuild_bound(own.covered)
    with connection.cursor() as cursor:
        delta = delta_size(cursor, scope, model_name, own.covers, bound + 1)
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
    with connection_cursor() as cursor:
        covers = last_batch(cursor)
    successor = name + NEXT_SUFFIX
    create_hnsw_index(
        successor, model_name, dimensions, tenant=tenant, covers=covers, concurrently=concurrently
    )
    swap_index(successor, name, concurrently=concurrently)
    _bump(name)


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
    with connection_cursor() as cursor:
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


def _domain_sizes() -> dict[tuple[int, int], int]:
    """Records per (org, domain), any status: an index-only scan of the tenant btree."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT org_id, domain_id, count(*) FROM {MemoryRecord._meta.db_table} GROUP BY 1, 2"
        )
        return {(org, domain): n for org, domain, n in cursor.fetchall()}


def _bump(name: str) -> None:
    """The domain's compiled plans chose their index and ``ef_search`` for the old set
    of indexes (and the delta it left)."""
    shard_sizes.pop(name, None)
    match = TENANT_INDEX_NAME.match(name)
    if match:
        bump_generation(Scope(org_id=int(match[1]), domain_id=int(match[2])))
