"""Record history: every change of a record keeps its previous state as a version.

The write service calls :func:`snapshot` with the records it is about to change (an
upsert by key, an update by id, an import, a restore, consolidation): each one's current
state becomes a ``RecordVersion`` and the record is stamped with the change (its version
number, actor and cause). Only ``HISTORY_VERSIONS`` previous states are kept per record
(the oldest dropped; ``0`` keeps none); a record's versions are deleted with it by every
erasure path (the foreign key cascades).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from ..conf import memoryhub_settings
from ..items import STORED_FIELDS
from ..models import MemoryRecord, RecordVersion
from ..scope import Scope, tenant_scope
from .records import get_record

__all__ = ["history", "snapshot", "version_fields"]


def version_fields(state: Any) -> dict[str, Any]:
    """The stored fields (:data:`memoryhub.items.STORED_FIELDS`) of a record or a version."""
    fields = {name: getattr(state, name) for name in STORED_FIELDS}
    fields["tags"] = list(fields["tags"])
    return fields


def snapshot(records: Sequence[MemoryRecord], *, actor: str, cause: str) -> None:
    """Keep each of ``records``' current state as a version, then stamp each record with
    the change about to be applied (the next version number, ``actor``, ``cause``).

    Call it before applying the change, inside the write's transaction (with the rows
    locked); the caller saves the records, including ``version``, ``changed_by`` and
    ``change_cause``.
    """
    if not records:
        return
    keep = int(memoryhub_settings.HISTORY_VERSIONS)
    if keep > 0:
        RecordVersion.unscoped.bulk_create(
            RecordVersion(
                org_id=record.org_id,
                domain_id=record.domain_id,
                record_id=record.pk,
                version=record.version,
                changed_at=record.updated_at,
                actor=record.changed_by,
                cause=record.change_cause,
                **version_fields(record),
            )
            for record in records
        )
    for record in records:
        record.version += 1
        record.changed_by = actor[:200]
        record.change_cause = cause
    _trim(records, keep)


def _trim(records: Sequence[MemoryRecord], keep: int) -> None:
    """Drop versions beyond the ``keep`` newest previous states of each record."""
    ids, oldest_kept = [], []
    for record in records:
        # After this change the record is at ``version``; previous states are
        # 1 .. version - 1, and the newest ``keep`` of them stay.
        threshold = record.version - 1 - keep
        if threshold >= 1:
            ids.append(str(record.pk))
            oldest_kept.append(threshold)
    if not ids:
        return
    table = RecordVersion._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} AS v USING unnest(%s::uuid[], %s::int[]) AS t(id, upto)"
            " WHERE v.record_id = t.id AND v.version <= t.upto",
            [ids, oldest_kept],
        )


def history(scope: Scope, record_id: Any) -> dict[str, Any]:
    """A record's states, newest first, the current one first: each with its version
    number, the stored fields, when it came to be, by whom and why. A state without an
    ``occurred_at`` shows the record's creation time (what it means).

    Raises ``RecordNotFound`` for a record the scope does not hold (another tenant's
    included).
    """
    record = get_record(scope, record_id)
    with tenant_scope(scope):
        versions = list(
            RecordVersion.objects.filter(record_id=record.pk).order_by("-version")[
                : max(int(memoryhub_settings.HISTORY_VERSIONS), 0)
            ]
        )

    def shown(state: Any) -> dict[str, Any]:
        return {**version_fields(state), "occurred_at": state.occurred_at or record.created_at}

    current = {
        "version": record.version,
        **shown(record),
        "changed_at": record.updated_at if record.version > 1 else record.created_at,
        "actor": record.changed_by,
        "cause": record.change_cause,
    }
    return {
        "record": str(record.pk),
        "versions": [
            current,
            *(
                {
                    "version": version.version,
                    **shown(version),
                    "changed_at": version.changed_at,
                    "actor": version.actor,
                    "cause": version.cause,
                }
                for version in versions
            ),
        ],
    }
