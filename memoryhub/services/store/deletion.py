"""Deleting records, with what must go with them: every path that deletes records
(erasures, undoing an import, the expiry purge, consolidation's deletes) comes here."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast

from ...models import MemoryRecord, RecordVersion, adjacent_turn_sql
from ..dispatch import schedule_indexing
from .persistence import UNEMBEDDED

__all__ = ["delete_records", "detach_sources", "predecessors"]


def delete_records(records: QuerySet[MemoryRecord]) -> tuple[int, dict[int, int]]:
    """Delete ``records`` with what they superseded (a fact's earlier values, all the way
    back: a chain is erased whole), their versions, the admin log about them, and the
    consolidated facts they leave with no source (with what those superseded). Returns
    how many records went, and the records that went with them per knowledge base id
    (what they superseded and the facts left with no source).

    One org at a time, each statement naming it: on a cluster distributed by org, each
    goes to that org's shard group only (an erasure's selection is one org's; the expiry
    purge's may be several)."""
    orgs = sorted(set(records.order_by().values_list("org_id", flat=True).distinct()))
    deleted, counts = 0, dict[int, int]()
    for org_id in orgs:
        selected = records.filter(org_id=org_id)
        earlier = predecessors(selected, org_id)
        if earlier:
            _count(MemoryRecord.unscoped.filter(org_id=org_id, pk__in=earlier), counts)
            selected = MemoryRecord.unscoped.filter(org_id=org_id).filter(
                Q(pk__in=selected.order_by().values("pk")) | Q(pk__in=earlier)
            )
        orphans = detach_sources(selected, org_id=org_id)
        _scrub_admin_log(selected)
        following = _turns_holding(selected, org_id)
        deleted += _delete(selected, org_id) - len(earlier)
        _embed_again(following, org_id)
        if orphans:
            orphans += predecessors(MemoryRecord.unscoped.filter(pk__in=orphans), org_id)
            facts = MemoryRecord.unscoped.filter(org_id=org_id, pk__in=orphans)
            _count(facts, counts)
            _scrub_admin_log(facts)
            _delete(facts, org_id)
    return deleted, counts


def _turns_holding(records: QuerySet[MemoryRecord], org_id: int) -> list[str]:
    """The turns after ``records`` in their sessions whose vectors were embedded with
    them (``TURN_CONTEXT``), not among them: none at all, in one index probe, where no
    vector of the org holds a turn."""
    holding = MemoryRecord.unscoped.filter(org_id=org_id, context_embedded=True)
    if not holding.exists():
        return []
    selected, params = records.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            adjacent_turn_sql(MemoryRecord._meta.db_table, after=True, ids=f"IN ({selected})"),
            [org_id, *params],
        )
        after = {str(row[1]) for row in cursor.fetchall()}
    chosen = records.order_by().values("pk")
    return [
        str(pk)
        for pk in holding.filter(pk__in=list(after))
        .exclude(pk__in=chosen)
        .values_list("pk", flat=True)
    ]


def _embed_again(record_ids: list[str], org_id: int) -> None:
    """Drop the vectors of ``record_ids`` (they hold an erased turn) and have them
    embedded again once the erasure commits: until then, keyword search finds them."""
    if not record_ids:
        return
    MemoryRecord.unscoped.filter(org_id=org_id, pk__in=record_ids).update(
        **UNEMBEDDED, context_embedded=False
    )
    schedule_indexing(record_ids, org_id=org_id)


def _count(records: QuerySet[MemoryRecord], counts: dict[int, int]) -> None:
    for kb_id in records.values_list("knowledge_base_id", flat=True):
        counts[kb_id] = counts.get(kb_id, 0) + 1


def predecessors(records: QuerySet[MemoryRecord], org_id: int) -> list[str]:
    """The ids of every record that ``records`` (org ``org_id``'s) superseded,
    transitively, that are not among them: one indexed statement per link of the longest chain
    (``superseded_by`` is indexed where set), each naming the org."""
    found: set[str] = set()
    chosen: Any = records.order_by().values("pk")
    frontier: Any = chosen
    while True:
        earlier = {
            str(pk)
            for pk in MemoryRecord.unscoped.filter(
                org_id=org_id, superseded_by__isnull=False, superseded_by__in=frontier
            )
            .exclude(pk__in=chosen)
            .values_list("pk", flat=True)
        } - found
        if not earlier:
            return sorted(found)
        found |= earlier
        frontier = list(earlier)


def _delete(records: QuerySet[MemoryRecord], org_id: int) -> int:
    """Delete org ``org_id``'s ``records`` and their versions (the only rows that refer
    to a record); return how many records. Two statements, not Django's collector, whose
    lookups of the versions by record id alone would go to every shard."""
    selected, params = records.order_by().values("pk").query.sql_with_params()
    table, versions = MemoryRecord._meta.db_table, RecordVersion._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {versions} WHERE org_id = %s AND record_id IN ({selected})",
            [org_id, *params],
        )
        cursor.execute(
            f"DELETE FROM {table} WHERE org_id = %s AND id IN ({selected})", [org_id, *params]
        )
        return cursor.rowcount


def detach_sources(records: QuerySet[MemoryRecord], *, org_id: int) -> list[str]:
    """Before ``records`` (org ``org_id``'s) are deleted: remove them from the
    ``derived_from`` of the facts citing them (in the same domains) and return the ids
    of facts left with no source (the caller erases them too). Facts among ``records``
    themselves are left alone."""
    selected, params = records.order_by().values("pk").query.sql_with_params()
    table = MemoryRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH erased AS (SELECT coalesce(array_agg(pk), '{{}}') AS ids
                              FROM ({selected}) AS chosen(pk))
            UPDATE {table} AS fact
               SET derived_from = ARRAY(SELECT source FROM unnest(fact.derived_from) AS source
                                         WHERE source <> ALL(erased.ids))
              FROM erased
             WHERE fact.org_id = %s
               AND fact.derived_from <> '{{}}' AND fact.derived_from && erased.ids
               AND NOT (fact.id = ANY(erased.ids))
         RETURNING fact.id, cardinality(fact.derived_from)
            """,
            [*params, org_id],
        )
        return [str(pk) for pk, remaining in cursor.fetchall() if remaining == 0]


def _scrub_admin_log(records: QuerySet[MemoryRecord]) -> None:
    """Drop the admin's log entries about the erased records (their object_repr was the
    record's content before records stopped saying it)."""
    content_type = ContentType.objects.get_for_model(MemoryRecord)
    LogEntry.objects.filter(
        content_type=content_type,
        object_id__in=records.annotate(text_id=Cast("pk", TextField())).values("text_id"),
    ).delete()
