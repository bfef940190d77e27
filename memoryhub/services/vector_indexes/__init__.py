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

from .maintenance import (
    FOLD_LOCK_CLASS,
    ROW_INSERT_COST,
    TenantIndexChanges,
    ensure_tenant_indexes,
    fold_delta,
    logger,
)
from .own import (
    SHARD_SIZES_SECONDS,
    TENANT_INDEX_PREFIX,
    OwnIndex,
    has_deltas,
    has_tenant_indexes,
    own_index,
    tenant_index_name,
    tenant_index_share,
)
from .placement import (
    OWN_INDEX_ONLY,
    TENANT_INDEX_MIN_SHARE,
    TENANT_INDEX_REBUILD_SHARE,
    Placement,
    placement,
)
from .shared import (
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    NEXT_SUFFIX,
    VECTOR_BATCH_SEQUENCE,
    ensure_vector_index,
    vector_expression,
    vector_index_name,
)

__all__ = [
    "FOLD_LOCK_CLASS",
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "NEXT_SUFFIX",
    "OWN_INDEX_ONLY",
    "ROW_INSERT_COST",
    "SHARD_SIZES_SECONDS",
    "TENANT_INDEX_MIN_SHARE",
    "TENANT_INDEX_PREFIX",
    "TENANT_INDEX_REBUILD_SHARE",
    "VECTOR_BATCH_SEQUENCE",
    "OwnIndex",
    "Placement",
    "TenantIndexChanges",
    "ensure_tenant_indexes",
    "ensure_vector_index",
    "fold_delta",
    "has_deltas",
    "has_tenant_indexes",
    "logger",
    "own_index",
    "placement",
    "tenant_index_name",
    "tenant_index_share",
    "vector_expression",
    "vector_index_name",
]
