"""Time-scoped facts: a record is valid from ``valid_from`` until ``valid_until``, and a
fact that stopped being true is closed, not overwritten.

A write item with ``supersede`` and a key (a REST or MCP write, an import line, the
admin, consolidation's ``supersede`` operation) meets the current record of that key: if
it says something else, that record is closed at the new item's ``valid_from`` (default
its ``occurred_at``, else now), keeps its key, content and embedding, and names the new
record in ``superseded_by``; the new record takes the key and starts its validity there.
An overwrite by key (no ``supersede``) stays what it was: a correction, the previous
state kept in the record's history.

A query reads what is valid now (``models.valid_q``), or what was valid at its
``as_of``; :func:`timeline` is a fact's chain, oldest first. Forgetting a fact forgets
what it superseded, all the way back (``store.deletion.predecessors``), so erasure
leaves no link of a chain.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from ..exceptions import ValidationFailed
from ..models import KnowledgeBase, MemoryRecord
from ..scope import Scope, tenant_scope
from ..vocabulary import WriteItem
from .records import get_record

__all__ = [
    "TIMELINE_LIMIT",
    "check_item",
    "check_start",
    "close",
    "effective_start",
    "holder",
    "starts",
    "timeline",
]

#: The most links of a chain a timeline shows on each side of a record.
TIMELINE_LIMIT = 50


def effective_start(record: MemoryRecord) -> datetime:
    """When a record's validity starts: its ``valid_from``, else when it occurred."""
    return record.valid_from or record.occurred_at or record.created_at


def check_start(record: MemoryRecord, moment: datetime, path: str) -> None:
    """Refuse (under ``path``) a successor of ``record`` that would begin at ``moment``,
    at or before the record's own start: a successor cannot begin before what it
    replaces."""
    if moment <= effective_start(record):
        raise ValidationFailed(
            {
                path: [
                    "must be later than when the record it supersedes became true "
                    f"({effective_start(record).isoformat()})."
                ]
            }
        )


def starts(item: WriteItem, now: datetime) -> datetime:
    """When a successor written as ``item`` starts (and what it supersedes ends): its
    ``valid_from``, else when it occurred, else ``now``."""
    return item.valid_from or item.occurred_at or now


def holder(knowledge_base: KnowledgeBase, namespace: str, key: str) -> MemoryRecord | None:
    """The current record of ``key`` (the one no record superseded), if any."""
    return MemoryRecord.unscoped.filter(
        org_id=knowledge_base.org_id,
        knowledge_base=knowledge_base,
        namespace=namespace,
        key=key,
        superseded_by__isnull=True,
    ).first()


def check_item(knowledge_base: KnowledgeBase, item: WriteItem, path: str) -> None:
    """What a write of ``item`` (validated) to ``knowledge_base`` would refuse of its
    supersession, without writing: for a form to show before anything is saved."""
    if not item.supersede or item.key is None:
        return
    current = holder(knowledge_base, item.namespace, item.key)
    if current is not None and current.content_hash != item.content_hash:
        check_start(current, starts(item, timezone.now()), path)


def close(record: MemoryRecord, successor: MemoryRecord, moment: datetime, path: str) -> None:
    """Close ``record`` at ``moment`` in favour of ``successor`` (both unsaved changes:
    the write saves them); :func:`check_start` first."""
    check_start(record, moment, path)
    if record.valid_until is None or record.valid_until > moment:
        record.valid_until = moment
    record.superseded_by = successor.pk
    successor.valid_from = moment


def check_closed(record: MemoryRecord, item: WriteItem) -> None:
    """Refuse a change (an update, a restored version) that would reopen ``record`` once
    it is superseded: its validity must end, at the latest when its successor's begins;
    otherwise two states of the fact would be valid at once."""
    if record.superseded_by is None:
        return
    successor = MemoryRecord.unscoped.filter(org_id=record.org_id, pk=record.superseded_by).first()
    end = effective_start(successor) if successor is not None else None
    if item.valid_until is not None and (end is None or item.valid_until <= end):
        return
    by = f" by {end.isoformat()}, when its successor begins" if end is not None else ""
    raise ValidationFailed({"valid_until": [f"a superseded record stays closed: it must end{by}."]})


def closed_validity(record: MemoryRecord, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` (a version of ``record`` to restore) with the record's own validity
    when it is superseded: restoring what a closed fact said keeps it closed, where its
    successor took over."""
    if record.superseded_by is None:
        return fields
    return {**fields, "valid_from": record.valid_from, "valid_until": record.valid_until}


def _link(record: MemoryRecord) -> dict[str, Any]:
    return {
        "id": str(record.pk),
        "content": record.content,
        "key": record.key,
        "valid_from": effective_start(record),
        "valid_until": record.valid_until,
        "superseded_by": str(record.superseded_by) if record.superseded_by else None,
        "created_at": record.created_at,
    }


def timeline(scope: Scope, record_id: Any) -> list[dict[str, Any]]:
    """The chain ``record_id`` is in, oldest first: what it superseded (following
    ``superseded_by`` back) and what superseded it, at most :data:`TIMELINE_LIMIT` links
    each way, one indexed read per link. ``RecordNotFound`` outside the scope."""
    record = get_record(scope, record_id)
    before: list[MemoryRecord] = []
    after: list[MemoryRecord] = []
    with tenant_scope(scope):
        records = MemoryRecord.objects.all()
        current = record
        while len(before) < TIMELINE_LIMIT:
            # A chain is a line: each record supersedes at most one other.
            previous = records.filter(superseded_by=current.pk).order_by("-created_at").first()
            if previous is None:
                break
            before.append(previous)
            current = previous
        current = record
        while current.superseded_by and len(after) < TIMELINE_LIMIT:
            following = records.filter(pk=current.superseded_by).first()
            if following is None:
                break
            after.append(following)
            current = following
    return [_link(link) for link in [*reversed(before), record, *after]]
