"""Indexes of the metadata keys queries filter on (``MEMORYHUB["INDEXED_METADATA_KEYS"]``).

A vector query filtered to a small part of a large domain is the HNSW index's worst
case: the graph is searched for neighbours the filter then throws away. pgvector's
iterative scans keep it from coming back short of k, but not from missing neighbours.
Measured on this machine (issue 19): a 300k-record HNSW graph (m 16, ef_construction
128), a metadata filter keeping 1% of it (3,000 records), 60 known-item questions
against exact search: recall@10 0.927 at ``ef_search`` 100, 0.932 at 200, 0.937 at 400,
0.945 at 800, in 66-89 ms at the median; the same filter through a btree on the
filtered column, then an exact scan of its 3,000 rows: recall 1.0 in 10.7 ms.

So each key named in the setting gets a btree index of ``(domain_id, metadata -> key)``
on the records table, built (``CONCURRENTLY`` outside a transaction) by the sweeper's
maintenance run and by ``memoryhub_ensure_indexes``, and dropped once the key leaves the
setting. A vector query whose ``where`` names an indexed key in its conjunction (at its
top level or in an ``$and``) is scanned exactly up to :data:`EXACT_SCAN_FACTOR` times
``EXACT_SCAN_THRESHOLD`` rows (recall 1.0), where other filters are exact up to
``EXACT_SCAN_THRESHOLD`` (without an index their rows are found by reading the domain's).
The index serves the filters' comparisons as :mod:`memoryhub.filters` writes them
(``metadata -> 'key'`` compared with a JSON value: ``$eq $in $gt $gte $lt $lte``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

from django.db import connection

from ..conf import memoryhub_settings
from ..models import MemoryRecord

#: A vector query filtered on an indexed key is scanned exactly up to this many times
#: ``EXACT_SCAN_THRESHOLD`` rows: 10,000 by default (the probe above: 3,000 rows in
#: 10.7 ms against 66 ms through the HNSW graph).
EXACT_SCAN_FACTOR = 5
#: Index names: ``memoryhub_meta_<digest of the key>``.
INDEX_PREFIX = "memoryhub_meta_"


def index_name(key: str) -> str:
    return INDEX_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16]


def _wanted() -> dict[str, str]:
    """The index name of each key of the setting."""
    return {index_name(key): key for key in memoryhub_settings.INDEXED_METADATA_KEYS or ()}


def _existing() -> dict[str, bool]:
    """Every metadata key index on the records table, and whether it is valid."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c"
            " ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass AND c.relname LIKE %s",
            [MemoryRecord._meta.db_table, INDEX_PREFIX + "%"],
        )
        return {name: bool(valid) for name, valid in cursor.fetchall()}


def indexed_keys() -> frozenset[str]:
    """The keys of the setting whose index exists and is valid."""
    wanted = _wanted()
    if not wanted:
        return frozenset()
    return frozenset(
        wanted[name] for name, valid in _existing().items() if valid and name in wanted
    )


def finds(where: Any) -> bool:
    """Whether the index of a key ``where`` narrows on finds the records it matches."""
    if not where or not memoryhub_settings.INDEXED_METADATA_KEYS:
        return False
    return bool(set(conjunction_keys(where)) & indexed_keys())


def ensure_filter_indexes(*, concurrently: bool) -> tuple[list[str], list[str]]:
    """Build the index of each key of the setting that has none (or an invalid one, as a
    failed ``CONCURRENTLY`` build leaves), drop those of keys no longer in it. Returns the
    keys whose index was built and the names dropped."""
    from psycopg import sql

    wanted, existing = _wanted(), _existing()
    keyword = sql.SQL("CONCURRENTLY" if concurrently else "")
    built: list[str] = []
    dropped: list[str] = []
    with connection.cursor() as cursor:
        if not concurrently:
            # CREATE INDEX refuses to run while deferred FK checks are pending.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for name, valid in existing.items():
            if name not in wanted or not valid:
                drop = sql.SQL("DROP INDEX {} IF EXISTS {}").format(keyword, sql.Identifier(name))
                cursor.execute(drop.as_string(cursor.connection))
                dropped.append(name)
        for name, key in wanted.items():
            if existing.get(name):
                continue
            # The expression as memoryhub.filters writes it: metadata -> 'key' (text).
            create = sql.SQL(
                "CREATE INDEX {} IF NOT EXISTS {} ON {} (domain_id, (metadata -> {}))"
            ).format(
                keyword,
                sql.Identifier(name),
                sql.Identifier(MemoryRecord._meta.db_table),
                sql.Literal(key),
            )
            cursor.execute(create.as_string(cursor.connection))
            # No planner statistics of the values (metadata may hold personal data: see
            # migration 0005): ANALYZE would sample them into pg_statistic.
            no_statistics = sql.SQL("ALTER INDEX {} ALTER COLUMN 2 SET STATISTICS 0").format(
                sql.Identifier(name)
            )
            cursor.execute(no_statistics.as_string(cursor.connection))
            built.append(key)
    return built, dropped


def conjunction_keys(where: Any) -> Iterator[str]:
    """The metadata keys every record a ``where`` filter matches is compared on (its
    top-level keys and those of its ``$and`` lists, not those under an ``$or``)."""
    if not isinstance(where, Mapping):
        return
    for key, condition in where.items():
        if key == "$and" and isinstance(condition, list):
            for part in condition:
                yield from conjunction_keys(part)
        elif not key.startswith("$") and _narrows(condition):
            yield key


def _narrows(condition: Any) -> bool:
    """Whether a key's condition selects records holding the key (what its index finds):
    equality or a comparison, not ``$ne``, ``$nin`` or ``$exists``."""
    if not isinstance(condition, Mapping):
        return condition is not None  # null is matched by the key's type, not its value
    return any(operator in condition for operator in ("$eq", "$in", "$gt", "$gte", "$lt", "$lte"))
