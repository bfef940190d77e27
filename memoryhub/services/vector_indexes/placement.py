"""Where a batch of vectors goes: into the shared index row by row, or in bulk outside it
for a domain that has (or qualifies for) its own index or is searched exactly."""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.db import connection

from ...conf import memoryhub_settings
from ...models import MemoryRecord
from ...scope import Scope
from .own import own_index
from .shared import VECTOR_BATCH_SEQUENCE

#: A domain holding this share of all records gets its own index below
#: ``TENANT_INDEX_MIN_RECORDS`` (if it is above ``EXACT_SCAN_THRESHOLD``): at most ten such.
TENANT_INDEX_MIN_SHARE = 0.10


#: A domain's own index is built again once the vectors stored in bulk since it was built
#: (its delta, scanned exactly by every query meanwhile) outgrow this share of the records
#: it covers (or ``EXACT_SCAN_THRESHOLD``, whichever is larger). At 1 the index doubles
#: from one build to the next: a domain loaded from empty costs at most two builds of its
#: final size, where a quarter cost five.
TENANT_INDEX_REBUILD_SHARE = 1.0


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


def tenant_bound(total: int, minimum: int) -> int:
    """The size at which a domain gets its own index: ``minimum`` records, or a
    ``TENANT_INDEX_MIN_SHARE`` of ``total`` and more than ``EXACT_SCAN_THRESHOLD``."""
    by_share = math.ceil(TENANT_INDEX_MIN_SHARE * total)
    return min(minimum, max(by_share, memoryhub_settings.EXACT_SCAN_THRESHOLD + 1))


def rebuild_bound(covered: int) -> int:
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
            bound = rebuild_bound(own.covered)
            most = _delta_most(bound)
            delta = delta_size(cursor, scope, model_name, own.covers, most + 1)
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
        if minimum > 0 and size >= tenant_bound(_table_size(cursor, size), minimum):
            return Placement(_next_batch(cursor), maintain=True)
        return Placement(None, fold=delta_size(cursor, scope, model_name, -1, 1) > 0)


def _next_batch(cursor: object) -> int:
    cursor.execute("SELECT nextval(%s)", [VECTOR_BATCH_SEQUENCE])  # type: ignore[attr-defined]
    return int(cursor.fetchone()[0])  # type: ignore[attr-defined]


def last_batch(cursor: object) -> int:
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


def delta_size(cursor: object, scope: Scope, model_name: str, covers: int, limit: int) -> int:
    """How many of the domain's vectors of ``model_name`` were stored in bulk after
    ``covers`` (counted up to ``limit``)."""
    cursor.execute(  # type: ignore[attr-defined]
        f"SELECT count(*) FROM (SELECT 1 FROM {MemoryRecord._meta.db_table}"
        " WHERE domain_id = %s AND vector_batch > %s AND org_id = %s AND embedding_model = %s"
        " LIMIT %s) AS delta",
        [scope.domain_id, covers, scope.org_id, model_name, limit],
    )
    return int(cursor.fetchone()[0])  # type: ignore[attr-defined]
