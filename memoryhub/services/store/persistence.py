"""Storing records: a write's new and changed records, a consolidated fact's sources,
and the states of a record's consolidation."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

from ...conf import memoryhub_settings
from ...items import STORED_FIELDS
from ...models import MemoryRecord
from . import bulk

__all__ = [
    "CONSOLIDATION_DONE",
    "CONSOLIDATION_FAILED",
    "CONSOLIDATION_PENDING",
    "UNEMBEDDED",
    "UPSERT_FIELDS",
    "add_sources",
    "save_records",
]

#: A record's ``consolidation``: waiting for a run, consolidated, or failed.
CONSOLIDATION_PENDING, CONSOLIDATION_DONE, CONSOLIDATION_FAILED = "pending", "done", "failed"

#: A record whose vector must be made again (new content, or a vector holding an erased
#: turn): pending, with no vector, and its indexing attempts counted afresh.
UNEMBEDDED: dict[str, object] = {
    "status": MemoryRecord.Status.PENDING,
    "embedding": None,
    "embedding_model": "",
    "vector_batch": None,
    "attempts": 0,
    "last_error": "",
    "indexed_at": None,
}

#: What an upsert of an existing record may change (``bulk_update``'s fields).
UPSERT_FIELDS = [
    *(name for name in STORED_FIELDS if name != "key"),
    "content_hash",
    "superseded_by",
    "updated_at",
    "status",
    "embedding",
    "embedding_model",
    "vector_batch",
    "attempts",
    "last_error",
    "indexed_at",
    "version",
    "changed_by",
    "change_cause",
    "consolidation",
]


def save_records(new_records: Sequence[MemoryRecord], changed: Sequence[MemoryRecord]) -> None:
    """Store a write's records: changed ones (kept in their history first) with
    ``bulk_update``; new ones with one binary COPY when there are at least
    ``BULK_MIN_RECORDS`` of them (the rows ``bulk_create`` would insert, without
    compiling an INSERT of them), else with ``bulk_create``."""
    # Changed first: a record superseded by a new one gives up its key (the unique
    # index covers current records only) before the new one takes it.
    if changed:
        MemoryRecord.objects.bulk_update(changed, UPSERT_FIELDS)
    if len(new_records) >= memoryhub_settings.BULK_MIN_RECORDS:
        bulk.copy_records(new_records)
    elif new_records:
        MemoryRecord.objects.bulk_create(new_records)


def add_sources(fact_id: str, sources: Sequence[str]) -> None:
    """Add ``sources`` to a fact's ``derived_from`` (sources are never dropped here: a
    reworded fact may still carry what an earlier turn said)."""
    if not sources:
        return
    table = MemoryRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET derived_from = ARRAY("
            " SELECT DISTINCT unnest(derived_from || %s::uuid[]) ORDER BY 1)"
            " WHERE id = %s",
            [list(sources), fact_id],
        )
