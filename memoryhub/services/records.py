"""Reading records one by one: listing with filters, and fetching by id, within a scope."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from django.db import connection
from django.db.models import Count, QuerySet
from django.utils import timezone

from .. import boundary
from ..exceptions import RecordNotFound, ValidationFailed
from ..items import STORED_FIELDS
from ..models import KnowledgeBase, MemoryRecord, live_q
from ..scope import Scope, tenant_scope

__all__ = [
    "LIST_FILTERS",
    "LIST_ORDERINGS",
    "export_lines",
    "get_record",
    "knowledge_base_stats",
    "list_records",
    "summarize_sources",
]

LIST_FILTERS = ("namespace", "kind", "tag", "key", "key_prefix", "source", "status")
#: How a list of records may be ordered, newest first: by creation or by last update.
#: The last fields break ties, so the order (and a cursor over it) is total.
LIST_ORDERINGS: dict[str, tuple[str, ...]] = {
    "created": ("-created_at", "-id"),
    "updated": ("-updated_at", "-created_at", "-id"),
}


def list_records(
    scope: Scope, filters: Mapping[str, Any], *, ordering: str = "created"
) -> QuerySet[MemoryRecord]:
    """Live records of the scope, newest first (``ordering``: by creation or by last
    update, :data:`LIST_ORDERINGS`), narrowed by ``filters``.

    Filters are exact, except ``tag`` (the record has that tag) and ``key_prefix`` (its
    key starts with it; an empty prefix selects every record that has a key).

    The queryset is bound to the scope's org and domain explicitly, so it stays safe to
    evaluate (paginate) after the ``tenant_scope`` block has ended.
    """
    errors: dict[str, list[str]] = {}
    for name, value in filters.items():
        if name not in LIST_FILTERS:
            errors.setdefault(name, []).append("is not a filter of records.")
        else:
            problem = boundary.text_problem(value, max_length=boundary.MAX_NAME_LENGTH)
            if problem is not None:
                errors.setdefault(name, []).append(problem)
    if filters.get("kind") and filters["kind"] not in MemoryRecord.Kind.values:
        errors.setdefault("kind", []).append(
            f"must be one of {', '.join(MemoryRecord.Kind.values)}."
        )
    if filters.get("status") and filters["status"] not in MemoryRecord.Status.values:
        errors.setdefault("status", []).append(
            f"must be one of {', '.join(MemoryRecord.Status.values)}."
        )
    if ordering not in LIST_ORDERINGS:
        errors.setdefault("ordering", []).append(f"must be one of {', '.join(LIST_ORDERINGS)}.")
    if errors:
        raise ValidationFailed(errors)
    with tenant_scope(scope):
        records = MemoryRecord.objects.live().filter(org_id=scope.org_id, domain_id=scope.domain_id)
    if "namespace" in filters:
        records = records.filter(namespace=filters["namespace"])
    if "kind" in filters:
        records = records.filter(kind=filters["kind"])
    if "tag" in filters:
        records = records.filter(tags__contains=[filters["tag"]])
    if "key" in filters:
        records = records.filter(key=filters["key"])
    if "key_prefix" in filters:
        records = records.filter(key__startswith=filters["key_prefix"])
    if "source" in filters:
        records = records.filter(knowledge_base__name=filters["source"])
    if "status" in filters:
        records = records.filter(status=filters["status"])
    return (
        records.select_related("knowledge_base")
        .defer("embedding", "search_vector")
        .order_by(*LIST_ORDERINGS[ordering])
    )


def get_record(scope: Scope, record_id: Any) -> MemoryRecord:
    """The scope's record with this id; :class:`RecordNotFound` otherwise (bad ids too)."""
    try:
        pk = uuid.UUID(str(record_id))
    except ValueError:
        raise RecordNotFound(record_id) from None
    with tenant_scope(scope):
        record = (
            MemoryRecord.objects.live()
            .select_related("knowledge_base")
            .defer("search_vector")
            .filter(pk=pk)
            .first()
        )
    if record is None:
        raise RecordNotFound(record_id)
    return record


def summarize_sources(scope: Scope) -> list[dict[str, Any]]:
    """The scope's knowledge bases with their policies and live record counts."""
    now = timezone.now()
    live = live_q("records__", now)
    with tenant_scope(scope):
        rows = (
            KnowledgeBase.objects.annotate(record_count=Count("records", filter=live))
            .order_by("name")
            .values(
                "name", "description", "read_only", "on_write", "refused_writes", "record_count"
            )
        )
        return [
            {
                "name": row["name"],
                "description": row["description"],
                "read_only": row["read_only"],
                "on_write": row["on_write"],
                "records": row["record_count"],
                "refused_writes": row["refused_writes"],
            }
            for row in rows
        ]


#: How many namespaces a knowledge base's summary names (the largest first).
TOP_NAMESPACES = 10


#: Above this many records a knowledge base's largest namespaces are estimated from a
#: sample of about ``NAMESPACE_SAMPLE`` records (the exact GROUP BY reads every one).
NAMESPACE_EXACT_MAX = 100_000
NAMESPACE_SAMPLE = 20_000


def knowledge_base_stats(knowledge_base: KnowledgeBase) -> dict[str, Any]:
    """What a knowledge base holds, in a handful of bounded queries (the admin's KB page).

    The total is an index-only count; pending and failed come from the partial index of
    records not indexed (a backlog, not the whole knowledge base); the largest namespaces
    are counted exactly up to ``NAMESPACE_EXACT_MAX`` records and estimated above it
    from a page sample (``namespaces_estimated``). Nothing here loads a record.
    """
    records = MemoryRecord.unscoped.filter(knowledge_base=knowledge_base)
    total = records.order_by().count()
    unindexed = dict(
        records.exclude(status=MemoryRecord.Status.INDEXED)
        .order_by()
        .values_list("status")
        .annotate(n=Count("pk"))
    )
    estimated = total > NAMESPACE_EXACT_MAX
    if estimated:
        namespaces = _sampled_namespaces(knowledge_base, total)
    else:
        namespaces = [
            (row["namespace"], row["n"])
            for row in records.order_by()
            .values("namespace")
            .annotate(n=Count("pk"))
            .order_by("-n", "namespace")[:TOP_NAMESPACES]
        ]
    return {
        "total": total,
        "pending": unindexed.get(MemoryRecord.Status.PENDING, 0),
        "failed": unindexed.get(MemoryRecord.Status.FAILED, 0),
        "namespaces": namespaces,
        "namespaces_estimated": estimated,
    }


def _sampled_namespaces(knowledge_base: KnowledgeBase, total: int) -> list[tuple[str, int]]:
    """The largest namespaces of a big knowledge base, from ``TABLESAMPLE SYSTEM`` pages
    holding about ``NAMESPACE_SAMPLE`` of its records; counts scaled to the total."""
    table = MemoryRecord._meta.db_table
    percent = min(100.0, max(0.01, 100.0 * NAMESPACE_SAMPLE / total))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT namespace, count(*) FROM {table} TABLESAMPLE SYSTEM (%s) REPEATABLE (7)"
            " WHERE knowledge_base_id = %s GROUP BY namespace ORDER BY 2 DESC, 1 LIMIT %s",
            [percent, knowledge_base.pk, TOP_NAMESPACES],
        )
        rows = cursor.fetchall()
    scale = 100.0 / percent
    return [(namespace, round(count * scale)) for namespace, count in rows]


def export_lines(knowledge_base: KnowledgeBase) -> Iterator[str]:
    """A knowledge base as JSON Lines, oldest first, streamed 500 rows at a time: the
    items an import of ``format="jsonl"`` takes back (``imports.parse``'s inverse). Empty
    fields are left out."""
    records = MemoryRecord.unscoped.filter(knowledge_base=knowledge_base).order_by(
        "created_at", "pk"
    )
    for record in records.iterator(chunk_size=500):
        row = {name: getattr(record, name) for name in (*STORED_FIELDS, "namespace")}
        # When it occurred, even unset (its creation): an import of the file is new
        # records, and they keep the time of what they say.
        row["occurred_at"] = record.occurred_or_created
        for name in ("expires_at", "occurred_at"):
            if row[name] is not None:
                row[name] = row[name].isoformat()
        row = {name: value for name, value in row.items() if value not in (None, [], {})}
        yield json.dumps(row, ensure_ascii=False) + "\n"
