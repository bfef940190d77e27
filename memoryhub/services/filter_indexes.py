"""Indexes of the metadata keys queries filter on (``MEMORYHUB["INDEXED_METADATA_KEYS"]``).

A vector query filtered to a small part of a large domain is the HNSW index's worst
case: the graph is searched for neighbours the filter then throws away. pgvector's
iterative scans keep it from coming back short of k, but not from missing neighbours,
and a larger ``ef_search`` buys little recall for its cost. The same filter through a
btree on the filtered column, then an exact scan of the rows it keeps, has recall 1.0
and reads only those rows.

So each key named in the setting gets a btree index of ``(domain_id, metadata -> key)``
on the records table, built (``CONCURRENTLY`` outside a transaction) by the sweeper's
maintenance run and by ``memoryhub_ensure_indexes``, and dropped once the key leaves the
setting. A vector query whose ``where`` names an indexed key in its conjunction (at its
top level or in an ``$and``) is scanned exactly up to :data:`EXACT_SCAN_FACTOR` times
``EXACT_SCAN_THRESHOLD`` rows (recall 1.0), where other filters are exact up to
``EXACT_SCAN_THRESHOLD`` (without an index their rows are found by reading the domain's).
The index serves the conditions :mod:`memoryhub.filters` writes as ``metadata -> 'key'``
compared with a JSON value: ``$eq`` and ``$in`` of values other than null, and
``$gt $gte $lt $lte`` with a number (a string comparison reads the key as text). An
indexed key's value is at most ``filters.MAX_INDEXED_VALUE_BYTES`` of JSON (a btree entry's
limit; writes of larger ones are refused with a 400 naming the key).

The indexes rely, like the domains' own HNSW and full-text indexes, on the statement
carrying its values as literals (Django's client-side binding, the default for
psycopg 3): a generic plan of a server-side prepared statement could not match them.
A compiled plan (kept up to a minute) chooses by the indexes that existed when it was
compiled.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from typing import Any

from django.core.cache import caches
from django.db import DatabaseError, connection, transaction
from psycopg import sql

from ..conf import memoryhub_settings
from ..models import MemoryRecord
from . import record_indexes

logger = logging.getLogger(__name__)

#: A vector query filtered on an indexed key is scanned exactly up to this many times
#: ``EXACT_SCAN_THRESHOLD`` rows: 10,000 by default (an exact scan of that many rows
#: found through the btree costs less than a filtered walk of a large HNSW graph).
EXACT_SCAN_FACTOR = 5
#: Index names: ``memoryhub_meta_<digest of the key>``.
INDEX_PREFIX = "memoryhub_meta_"


def index_name(key: str) -> str:
    return INDEX_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16]


def _wanted() -> dict[str, str]:
    """The index name of each key of the setting."""
    return {index_name(key): key for key in memoryhub_settings.INDEXED_METADATA_KEYS or ()}


_INDEX_NAME = re.compile(r"^memoryhub_meta_[0-9a-f]{16}$")
#: A build that failed (say, over a value written before its key was listed) is not
#: tried again for this long.
RETRY_FAILED_BUILD_AFTER = 3600


def _existing() -> dict[str, bool]:
    """Every metadata key index on the records table, and whether it is valid."""
    return record_indexes.named(_INDEX_NAME)


def _sampled(name: str) -> bool:
    """Whether the index's values could be (or were) sampled into planner statistics:
    its expression's statistics target is not 0, or ``pg_stats`` holds some of them (a
    build interrupted before its target was set, and an ANALYZE in between)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(a.attstattarget, -1) <> 0 OR EXISTS (SELECT 1 FROM pg_stats s"
            " WHERE s.schemaname = n.nspname AND s.tablename = c.relname)"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = 2"
            " WHERE c.oid = %s::regclass",
            [name],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


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
    failed ``CONCURRENTLY`` build leaves, or one whose values reached the planner's
    statistics), drop those of keys no longer in it. Returns the keys whose index was
    built and the names dropped. A build that fails is logged and tried again after
    :data:`RETRY_FAILED_BUILD_AFTER` seconds; the other keys' go on."""
    wanted, existing = _wanted(), _existing()
    table = sql.Identifier(MemoryRecord._meta.db_table)
    cache = caches[memoryhub_settings.CACHE_ALIAS]
    built: list[str] = []
    dropped: list[str] = []
    for name, valid in existing.items():
        if name not in wanted or not valid or _sampled(name):
            record_indexes.drop(name, concurrently=concurrently)
            dropped.append(name)
            existing[name] = False
    for name, key in wanted.items():
        failed = f"memoryhub:filter-index-failed:{name}"
        if existing.get(name) or cache.get(failed):
            continue
        # The expression as memoryhub.filters writes it: metadata -> 'key' (text).
        create = sql.SQL(
            "CREATE INDEX {} IF NOT EXISTS {} ON {} (domain_id, (metadata -> {}))"
        ).format(
            sql.SQL("CONCURRENTLY" if concurrently else ""),
            sql.Identifier(name),
            table,
            sql.Literal(key),
        )
        # No planner statistics of the values (metadata may hold personal data: see
        # migration 0005): ANALYZE would sample them into pg_statistic.
        no_statistics = sql.SQL("ALTER INDEX {} ALTER COLUMN 2 SET STATISTICS 0").format(
            sql.Identifier(name)
        )
        try:
            with transaction.atomic() if not concurrently else nullcontext():
                record_indexes.build(create, concurrently=concurrently)
                with connection.cursor() as cursor:
                    cursor.execute(no_statistics.as_string(cursor.connection))
        except DatabaseError as exc:
            logger.error("the index of metadata key %r could not be built: %s", key, exc)
            cache.set(failed, 1, timeout=RETRY_FAILED_BUILD_AFTER)
            continue
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
    """Whether the index finds the records a key's condition selects: an equality or
    ``$in`` of values other than null, or a comparison with a number (``filters`` writes
    these as ``metadata -> key`` against a JSON value; a string comparison reads the
    key's text, a null its type, and ``$ne``, ``$nin`` and ``$exists`` select records
    without the key)."""
    if not isinstance(condition, Mapping):
        return condition is not None
    if "$eq" in condition and condition["$eq"] is not None:
        return True
    members = condition.get("$in")
    if isinstance(members, list) and members and None not in members:
        return True
    return any(
        isinstance(condition.get(operator), int | float)
        and not isinstance(condition.get(operator), bool)
        for operator in ("$gt", "$gte", "$lt", "$lte")
    )
