"""A domain's own HNSW index, as queries see it: its name, what it covers (the vector
batches before its build), its share of the model's vectors, and on a cluster the sizes
of the shards it lives on."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from django.db import DatabaseError, connection
from psycopg import sql

from ...models import MemoryRecord
from ...scope import Scope
from .. import record_indexes
from ..distribution import is_citus
from ..store.cluster import on_each_placement
from .shared import connection_cursor, model_digest

#: Tenant index names: ``memoryhub_thnsw_<org>_<domain>_<model digest>`` (``_next`` while
#: its successor is built). No shared index name (``memoryhub_hnsw_<model slug>_<digest>``)
#: can take this form.
TENANT_INDEX_PREFIX = "memoryhub_thnsw_"


TENANT_INDEX_NAME = re.compile(r"^memoryhub_thnsw_(\d+)_(\d+)_([0-9a-f]{8})(_next)?$")


#: How an index predicate (as PostgreSQL prints it) says which bulk stores it covers.
_COVERS = re.compile(r"vector_batch <= '?(\d+)")


def tenant_index_name(model_name: str, org_id: int, domain_id: int) -> str:
    """The name of one domain's own HNSW index of ``model_name`` (at most 63 bytes)."""
    return f"{TENANT_INDEX_PREFIX}{int(org_id)}_{int(domain_id)}_{model_digest(model_name)}"


def tenant_indexes() -> dict[str, bool]:
    """Every tenant index on the records table (any model), and whether it is valid."""
    return record_indexes.named(TENANT_INDEX_NAME)


def has_tenant_indexes() -> bool:
    """Whether any domain has its own HNSW index (of any model)."""
    return bool(tenant_indexes())


def has_deltas() -> bool:
    """Whether any vector was stored in bulk (maintenance may have a delta to fold)."""
    with connection_cursor() as cursor:
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
    with connection_cursor() as cursor:
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


shard_sizes: dict[str, tuple[float, tuple[float, float, str] | None]] = {}


def _own_index_row_on_shards(name: str) -> tuple[float, float, str] | None:
    """:func:`_own_index_row` on a Citus cluster, whose coordinator's catalog counts no
    rows: the records table's rows summed over its shards (each worker's statistics),
    and the index's on the shard of its org, the one that holds the domain."""
    cached = shard_sizes.get(name)
    if cached is not None and time.monotonic() - cached[0] < SHARD_SIZES_SECONDS:
        return cached[1]
    match = TENANT_INDEX_NAME.match(name)
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
    with connection_cursor() as cursor:
        rows = on_each_placement(cursor, table, per_shard, int(match[1]))
    total, mine, predicate, valid = 0.0, 0.0, "", False
    for own_shard, success, result in rows:
        if not success:
            raise DatabaseError(f"reading a shard's statistics failed: {result}")
        shard_rows, index_rows, index_predicate = json.loads(result)
        total += max(float(shard_rows), 0.0)
        if own_shard and index_rows is not None and index_predicate is not None:
            mine, predicate, valid = float(index_rows), str(index_predicate), True
    row = (mine, total, predicate) if valid else None
    shard_sizes[name] = (time.monotonic(), row)
    return row


def own_index_by_name(name: str) -> OwnIndex | None:
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
    return own_index_by_name(tenant_index_name(model_name, scope.org_id, scope.domain_id))


def tenant_index_share(scope: Scope, model_name: str) -> float | None:
    """The share of all records that ``scope``'s domain's own index holds, when that index
    exists and is valid (the planner's row counts, from the catalog)."""
    own = own_index(scope, model_name)
    return None if own is None else own.share
