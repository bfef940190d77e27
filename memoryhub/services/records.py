"""Reading records one by one: listing with filters, and fetching by id, within a scope."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Count, F, Func, QuerySet, TextField, Value
from django.utils import timezone

from .. import boundary
from ..exceptions import RecordNotFound, UnknownSource, ValidationFailed
from ..filters import compile_where
from ..items import MOMENT_FIELDS, STORED_FIELDS
from ..models import LIVE_SQL, KnowledgeBase, MemoryRecord, live_q
from ..scope import Scope, tenant_scope
from ..vocabulary import NamespaceListing

__all__ = [
    "LIST_FILTERS",
    "LIST_ORDERINGS",
    "InvisibleName",
    "NamespacePage",
    "export_lines",
    "get_record",
    "invisible_names",
    "knowledge_base_stats",
    "list_namespaces",
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


def list_records(  # noqa: C901
    scope: Scope,
    filters: Mapping[str, Any],
    *,
    ordering: str = "created",
    where: Mapping[str, Any] | None = None,
) -> QuerySet[MemoryRecord]:
    """Live records of the scope, newest first (``ordering``: by creation or by last
    update, :data:`LIST_ORDERINGS`), narrowed by ``filters`` and by ``where`` (a metadata
    filter in the where language of :mod:`memoryhub.filters`, as a query takes it).

    Filters are exact, except ``tag`` (the record has that tag) and ``key_prefix`` (its
    key starts with it; an empty prefix selects every record that has a key). ``key``
    and ``key_prefix`` select the current holder of each key: a superseded record keeps
    its key, and its successor's timeline shows it.

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
    condition = None
    if where is not None:
        try:
            condition = compile_where(where)
        except ValidationFailed as exc:
            for path, messages in exc.errors.items():
                errors.setdefault(path, []).extend(messages)
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
        records = records.filter(key=filters["key"], superseded_by__isnull=True)
    if "key_prefix" in filters:
        records = records.filter(key__startswith=filters["key_prefix"], superseded_by__isnull=True)
    if "source" in filters:
        records = records.filter(knowledge_base__name=filters["source"])
    if "status" in filters:
        records = records.filter(status=filters["status"])
    if condition is not None:
        records = records.filter(condition)
    return (
        records.select_related("knowledge_base")
        .defer("embedding", "search_vector")
        .order_by(*LIST_ORDERINGS[ordering])
    )


@dataclass(frozen=True)
class NamespacePage:
    """One page of :func:`list_namespaces`: its rows (``namespace``, and with a
    delimiter ``key_prefix``: the key directory) and the cursor of the next page (None:
    the listing is complete)."""

    rows: list[dict[str, str]] = field(default_factory=list)
    next: str | None = None


#: The least string greater than a string ``s``, in code point order, is ``s + SUCCESSOR``
#: (text cannot hold NUL, the only smaller character).
SUCCESSOR = "\x01"

_RECORDS = MemoryRecord._meta.db_table
_NAMESPACE = 'r.namespace COLLATE "C"'
_KEY = 'r.key COLLATE "C"'
_LIVE = LIVE_SQL.format(table="r")

#: Distinct namespaces from ``start`` on: each step is one seek of the path index to the
#: next namespace, while it starts with the prefix, at most ``limit`` steps.
_NAMESPACES_SQL = f"""
WITH RECURSIVE walk(namespace, step) AS (
    SELECT (SELECT {_NAMESPACE} FROM {_RECORDS} r
            WHERE r.org_id = %(org)s AND r.knowledge_base_id = %(kb)s
              AND {_NAMESPACE} >= %(start)s AND {_LIVE}
            ORDER BY {_NAMESPACE} LIMIT 1), 1
  UNION ALL
    SELECT (SELECT {_NAMESPACE} FROM {_RECORDS} r
            WHERE r.org_id = %(org)s AND r.knowledge_base_id = %(kb)s
              AND {_NAMESPACE} > w.namespace AND {_LIVE}
            ORDER BY {_NAMESPACE} LIMIT 1), w.step + 1
    FROM walk w
    WHERE w.step < %(limit)s AND starts_with(w.namespace, %(prefix)s)
)
SELECT namespace FROM walk WHERE namespace IS NOT NULL ORDER BY step
"""

#: The end of the range of keys that share the found key's directory (the key up to the
#: first delimiter after the key prefix, the delimiter replaced by its successor), or the
#: found key's successor when it has no directory. ``{key}``: the found key.
_BOUND_SQL = (
    "CASE WHEN strpos(substr({key}, %(skip)s), %(delimiter)s) > 0"
    " THEN left({key}, %(skip)s - 2 + strpos(substr({key}, %(skip)s), %(delimiter)s))"
    " || chr(ascii(%(delimiter)s) + 1)"
    " ELSE {key} || chr(1) END"
)

#: Distinct (namespace, key directory) pairs of keyed records from ``(start, start_key)``
#: on: each step one seek of the path index past the previous directory.
_DIRECTORIES_SQL = f"""
WITH RECURSIVE walk(namespace, key, step) AS (
    SELECT f.namespace, f.key, 1 FROM (
        SELECT {_NAMESPACE} AS namespace, {_KEY} AS key FROM {_RECORDS} r
        WHERE r.org_id = %(org)s AND r.knowledge_base_id = %(kb)s
          AND ({_NAMESPACE}, {_KEY}) >= (%(start)s, %(start_key)s)
          AND r.key IS NOT NULL AND {_LIVE}
        ORDER BY {_NAMESPACE}, {_KEY} LIMIT 1) f
  UNION ALL
    SELECT f.namespace, f.key, w.step + 1 FROM walk w CROSS JOIN LATERAL (
        SELECT {_NAMESPACE} AS namespace, {_KEY} AS key FROM {_RECORDS} r
        WHERE r.org_id = %(org)s AND r.knowledge_base_id = %(kb)s
          AND ({_NAMESPACE}, {_KEY}) >= (w.namespace, {_BOUND_SQL.format(key="w.key")})
          AND r.key IS NOT NULL AND {_LIVE}
        ORDER BY {_NAMESPACE}, {_KEY} LIMIT 1) f
    WHERE w.step < %(limit)s AND starts_with(w.namespace, %(prefix)s)
      AND (%(exact)s::text IS NULL OR w.namespace = %(exact)s::text)
      AND starts_with(w.key, %(key_prefix)s)
)
SELECT namespace, key FROM walk ORDER BY step
"""


def _encode_cursor(position: list[str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode()


def _decode_cursor(cursor: str, size: int) -> list[str] | None:
    try:
        position = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (binascii.Error, ValueError, UnicodeError):
        return None
    if (
        not isinstance(position, list)
        or len(position) != size
        or not all(boundary.text_problem(part) is None for part in position)
    ):
        return None
    return position


def list_namespaces(scope: Scope, raw: Mapping[str, Any]) -> NamespacePage:
    """A page of the namespaces of one knowledge base's live records (``source``,
    default ``memory``), in code point order: those starting with ``prefix``, or only
    ``namespace``.

    With a ``delimiter`` the rows are its keyed records' distinct (namespace, key
    directory) pairs instead: a key's directory is the key up to and including the first
    delimiter after ``key_prefix`` (the keys of another prefix are not listed); a key
    without one is passed over.

    Whatever the volume, a page costs at most ``limit`` seeks of the path index (one per
    row, or per key passed over), never a scan: a page can hold fewer rows than
    ``limit`` and still have a next. Arguments are raw (query parameters);
    :class:`ValidationFailed` names each bad one, :class:`UnknownSource` an unknown
    knowledge base.
    """
    asked = NamespaceListing.parse(dict(raw.items()))
    source, limit, delimiter = asked.source, asked.limit, asked.delimiter
    namespace = asked.namespace
    prefix = (asked.prefix or "") if namespace is None else namespace
    key_prefix = asked.key_prefix or ""
    position = None
    if asked.cursor is not None:
        position = _decode_cursor(asked.cursor, 1 if delimiter is None else 2)
        if position is None:
            raise ValidationFailed({"cursor": ["is not a cursor of this listing."]})
    with tenant_scope(scope):
        knowledge_base = KnowledgeBase.objects.filter(name=source).values_list("pk", flat=True)
        kb = knowledge_base.first()
    if kb is None:
        raise UnknownSource(source)
    params: dict[str, Any] = {
        "org": scope.org_id,
        "kb": kb,
        "limit": limit,
        "prefix": prefix,
        "exact": namespace,
    }
    if delimiter is None:
        return _namespaces_page(params, position, prefix, namespace)
    start, start_key = (prefix, key_prefix) if position is None else position
    params.update(
        start=start,
        start_key=start_key,
        delimiter=delimiter,
        key_prefix=key_prefix,
        skip=len(key_prefix) + 1,
    )
    return _directories_page(params, prefix, namespace, key_prefix, delimiter)


def _namespaces_page(
    params: dict[str, Any], position: list[str] | None, prefix: str, namespace: str | None
) -> NamespacePage:
    """:func:`list_namespaces` without a delimiter: one row per namespace."""
    limit = params["limit"]
    params["start"] = prefix if position is None else position[0] + SUCCESSOR
    if namespace is not None:
        params["limit"] = 1  # the namespace itself, or nothing
    with connection.cursor() as cursor:
        cursor.execute(_NAMESPACES_SQL, params)
        found = [row[0] for row in cursor.fetchall()]
    names = [name for name in found if name.startswith(prefix)]
    if namespace is not None:
        names = [name for name in names if name == namespace]
    more = len(found) == limit and len(names) == limit and namespace is None
    rows = [{"namespace": name} for name in names]
    return NamespacePage(rows, _encode_cursor([names[-1]]) if more else None)


def _directories_page(
    params: dict[str, Any], prefix: str, namespace: str | None, key_prefix: str, delimiter: str
) -> NamespacePage:
    """:func:`list_namespaces` with a delimiter: one row per (namespace, key directory)."""
    with connection.cursor() as cursor:
        cursor.execute(_DIRECTORIES_SQL, params)
        found_pairs = cursor.fetchall()
    rows = []
    ended = len(found_pairs) < params["limit"]
    for name, key in found_pairs:
        if (
            not name.startswith(prefix)
            or not key.startswith(key_prefix)
            or (namespace is not None and name != namespace)
        ):
            ended = True
            break
        at = key.find(delimiter, len(key_prefix))
        if at >= 0:
            rows.append({"namespace": name, "key_prefix": key[: at + 1]})
    following = None
    if not ended and found_pairs:
        name, key = found_pairs[-1]
        at = key.find(delimiter, len(key_prefix))
        bound = key[:at] + chr(ord(delimiter) + 1) if at >= 0 else key + SUCCESSOR
        following = _encode_cursor([name, bound])
    return NamespacePage(rows, following)


def get_record(scope: Scope, record_id: Any, *, live: bool = True) -> MemoryRecord:
    """The scope's record with this id; :class:`RecordNotFound` otherwise (bad ids too).
    ``live=False`` finds an expired record too (the state an update just saved)."""
    try:
        pk = uuid.UUID(str(record_id))
    except ValueError:
        raise RecordNotFound(record_id) from None
    with tenant_scope(scope):
        records = MemoryRecord.objects.live() if live else MemoryRecord.objects.all()
        record = (
            records.select_related("knowledge_base").defer("search_vector").filter(pk=pk).first()
        )
    if record is None:
        raise RecordNotFound(record_id)
    return record


def summarize_sources(scope: Scope) -> list[dict[str, Any]]:
    """The scope's knowledge bases with their policies and live record counts."""
    now = timezone.now()
    live = live_q("records__", now)
    with tenant_scope(scope):
        # Grouped by the columns shown, not by the knowledge base's id alone: the
        # table's primary key is (id, org_id), so an id does not determine the rest.
        rows = (
            KnowledgeBase.objects.values(
                "name", "description", "read_only", "on_write", "refused_writes"
            )
            .annotate(record_count=Count("records", filter=live))
            .order_by("name")
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
        for name in MOMENT_FIELDS:
            if row[name] is not None:
                row[name] = row[name].isoformat()
        row = {name: value for name, value in row.items() if value not in (None, [], {})}
        yield json.dumps(row, ensure_ascii=False) + "\n"


# --- names no door takes any more ---------------------------------------------------------

#: Text with a character outside printable ASCII: the only text that may hold a control
#: or invisible format character, found by PostgreSQL before Python looks closer.
_NOT_PLAIN = r"[^\x20-\x7E]"


@dataclass(frozen=True)
class InvisibleName:
    """A namespace, key or tag stored before the doors refused control and invisible
    format characters, and how many records hold it."""

    org: str
    domain: str
    field: str
    value: str
    records: int


def invisible_names() -> Iterator[InvisibleName]:
    """Every stored namespace, key and tag (and knowledge base name) holding a control
    or invisible format character (``boundary.has_invisible``), across orgs (an
    operator's maintenance read, streamed)."""
    records = MemoryRecord.unscoped.order_by()
    for column in ("namespace", "key"):
        rows = (
            records.filter(**{f"{column}__regex": _NOT_PLAIN})
            .values_list("org__slug", "domain__slug", column)
            .annotate(n=Count("pk"))
            .iterator()
        )
        for org, domain, value, n in rows:
            if boundary.has_invisible(value):
                yield InvisibleName(org, domain, column, value, n)
    tagged: dict[tuple[str, str, str], int] = {}
    rows = (
        records.annotate(
            joined=Func(F("tags"), Value(" "), function="array_to_string", output_field=TextField())
        )
        .filter(joined__regex=_NOT_PLAIN)
        .values_list("org__slug", "domain__slug", "tags")
        .iterator()
    )
    for org, domain, tags in rows:
        for tag in set(tags):
            if boundary.has_invisible(tag):
                tagged[(org, domain, tag)] = tagged.get((org, domain, tag), 0) + 1
    for (org, domain, tag), n in tagged.items():
        yield InvisibleName(org, domain, "tags", tag, n)
    for org, domain, name, n in (
        KnowledgeBase.unscoped.filter(name__regex=_NOT_PLAIN)
        .values_list("org__slug", "domain__slug", "name")
        .annotate(n=Count("records"))
    ):
        if boundary.has_invisible(name):
            yield InvisibleName(org, domain, "knowledge base", name, n)
