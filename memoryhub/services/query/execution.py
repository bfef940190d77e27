"""Running the legs: one round trip when possible, the rows of the candidates, items."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from django.db import connection, transaction
from psycopg import ClientCursor

from ...items import MemoryItem, Turns
from ...models import (
    LIVE_SQL,
    OCCURRED_SQL,
    SESSION_SQL,
    TURN_SQL,
    KnowledgeBase,
    MemoryRecord,
)
from ...scope import Scope
from ..distribution import is_citus
from ..store.cluster import local_settings
from .plans import ROW_FIELDS, Leg, Slot

_SET = "SELECT " + ", ".join(["set_config(%s, %s, true)"] * 4)


def _binds_client_side() -> bool:
    """Django's psycopg 3 default; with ``server_side_binding`` one message cannot hold
    several statements."""
    connection.ensure_connection()
    return isinstance(connection.connection, psycopg.Connection) and (
        connection.connection.cursor_factory is not None
        and issubclass(connection.connection.cursor_factory, ClientCursor)
    )


def _settings_statements(settings: list[tuple[str, Any]]) -> tuple[list[str], list[Any]]:
    """The statements that set ``settings`` for the rest of the transaction, and their
    parameters. On a Citus cluster, those that reach the workers too
    (:func:`~..store.cluster.local_settings`)."""
    if not settings:
        return [], []
    if not is_citus(connection):
        return [_SET], [v for pair in settings for v in pair]
    return local_settings(connection, settings), []


def _configure(cursor: Any, settings: list[tuple[str, Any]]) -> None:
    """Set ``settings`` for the rest of the transaction (:func:`_settings_statements`),
    in one round trip."""
    statements, params = _settings_statements(settings)
    if len(statements) > 1 and _binds_client_side():
        statements = [";\n".join(statements)]
    for statement in statements:
        cursor.execute(statement, params or None)


def _reset_value(cursor: Any, name: str) -> str:
    cursor.execute("SELECT reset_val FROM pg_settings WHERE name = %s", [name])
    row = cursor.fetchone()
    return str(row[0]) if row else ""


def run(
    legs: Sequence[Leg | None], values: dict[Slot, Any], settings: dict[str, str]
) -> tuple[list[list[tuple[Any, float]]], dict[Any, dict[str, Any]]]:
    """Each leg's ``(id, score)`` list, best first, and the candidates' rows by id, from
    one round trip when possible; ``values`` fill the legs' slots.

    The statements (and the transaction-local ``settings``) go to PostgreSQL as one
    message when the connection binds parameters client-side (Django's default) and no
    transaction is open: one implicit transaction, so the settings end with it. Inside a
    transaction they are sent one by one and the settings restored afterwards.
    """
    # A leg whose slot has no value (a query without words) is not sent.
    runnable = [leg if leg and values.get(leg.slot) is not None else None for leg in legs]
    compiled = [(leg.sql, leg.bind(values)) for leg in runnable if leg is not None]
    assert len(settings) in (0, 4)
    results: list[list[tuple[Any, Any]]] = []
    if not compiled:
        pass
    elif (
        connection.get_autocommit()
        and not connection.in_atomic_block
        and _binds_client_side()
        # On a Citus cluster, settings go to the workers as SET LOCAL commands, which a
        # one-message implicit transaction does not carry to them.
        and not (settings and is_citus(connection))
    ):
        results = _in_one_message(compiled, settings)
    else:
        results = _in_a_transaction(compiled, settings)
    found = iter(results)
    ranked: list[list[tuple[Any, float]]] = []
    rows: dict[Any, dict[str, Any]] = {}
    for leg in runnable:
        if leg is None:
            ranked.append([])
            continue
        leg_rows = next(found)
        ranked.append([(row[0], leg.to_score(float(row[1]))) for row in leg_rows])
        rows.update((row[0], _row(row[0], row[2:])) for row in leg_rows)
    return ranked, rows


def _in_one_message(
    compiled: list[tuple[str, list[Any]]], settings: dict[str, str]
) -> list[list[tuple[Any, Any]]]:
    """One message, one implicit transaction: the settings end with it."""
    setting, params = _settings_statements(list(settings.items()))
    statements = [*setting, *(sql for sql, _ in compiled)]
    params += [p for _, leg_params in compiled for p in leg_params]
    results = []
    with connection.cursor() as cursor:
        cursor.execute(";\n".join(statements), params)
        for _ in setting:
            cursor.nextset()
        for index in range(len(compiled)):
            if index:
                cursor.nextset()
            results.append(cursor.fetchall())
    return results


def _in_a_transaction(
    compiled: list[tuple[str, list[Any]]], settings: dict[str, str]
) -> list[list[tuple[Any, Any]]]:
    """A transaction of its own: its COMMIT ends the settings. Inside the caller's, they
    are restored after (SET LOCAL ends with the outermost transaction, not with a
    savepoint)."""
    names = list(settings)
    outermost = connection.get_autocommit() and not connection.in_atomic_block
    results = []
    with transaction.atomic(), connection.cursor() as cursor:
        saved: list[Any] = []  # the caller's values, restored after (none: outermost)
        if names and not outermost:
            # missing_ok: hnsw.* exist only once pgvector is loaded in the session.
            cursor.execute("SELECT " + ", ".join(["current_setting(%s, true)"] * len(names)), names)
            saved = list(cursor.fetchone())
        if names:
            _configure(cursor, list(settings.items()))
        for sql, leg_params in compiled:
            cursor.execute(sql, leg_params)
            results.append(cursor.fetchall())
        # Only on success: after an error the transaction is aborted anyway, and a
        # restore would hide the error.
        restore = [
            (name, value if value is not None else _reset_value(cursor, name))
            for name, value in zip(names if saved else [], saved, strict=True)
        ]
        if restore:
            _configure(cursor, restore)
    return results


def _row(pk: Any, values: Sequence[Any]) -> dict[str, Any]:
    """A record's item fields from a plain cursor row (``ROW_FIELDS`` order)."""
    row = dict(zip(ROW_FIELDS, values, strict=True))
    row["id"] = pk
    row["metadata"] = _json(row["metadata"])
    return row


def fetch(scope: Scope, ids: list[Any]) -> dict[Any, dict[str, Any]]:
    """The rows of a cached ranking's records, read again (erased or expired ones are
    gone).

    One primary-key lookup on every cache hit, so plain SQL: the ORM's compilation
    costs more than the statement. The tenant is
    in the WHERE clause, as the scoped manager would put it.
    """
    if not ids:
        return {}
    records, knowledge_bases = MemoryRecord._meta.db_table, KnowledgeBase._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT r.id, r.content, kb.name, r.metadata, r.key, r.kind, r.namespace, r.tags,"
            f" r.created_at, r.derived_from, {OCCURRED_SQL.format(table='r')},"
            " r.valid_from, r.valid_until, r.superseded_by"
            f" FROM {records} r JOIN {knowledge_bases} kb"
            " ON kb.id = r.knowledge_base_id AND kb.org_id = r.org_id"
            " WHERE r.org_id = %s AND r.domain_id = %s AND r.id = ANY(%s)"
            f" AND {LIVE_SQL.format(table='r')}",
            [scope.org_id, scope.domain_id, list(ids)],
        )
        rows = cursor.fetchall()
    return {row[0]: _row(row[0], row[1:]) for row in rows}


def _json(value: Any) -> Any:
    """A jsonb column read without the ORM (Django's psycopg setup returns it as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def to_item(row: dict[str, Any], score: float | None) -> MemoryItem:
    """The item of a candidate's row (:data:`ROW_FIELDS` and its id), with ``score``."""
    return MemoryItem(
        content=row["content"],
        source=row["knowledge_base__name"],
        score=score,
        metadata=row["metadata"],
        id=str(row["id"]),
        key=row["key"],
        kind=row["kind"],
        namespace=row["namespace"],
        tags=tuple(row["tags"]),
        created_at=row["created_at"],
        occurred_at=row["occurred"],
        derived_from=tuple(row["derived_from"] or ()),
        valid_from=row["valid_from"],
        valid_until=row["valid_until"],
        superseded_by=str(row["superseded_by"]) if row["superseded_by"] else None,
    )


def _turns_sql() -> str:
    """The statement behind :func:`turns`: per hit that names a session, up to ``%s``
    turns before it and ``%s`` after it, each side an index range scan of the turns index
    (knowledge base, namespace, session, occurred) that stops after those rows; ties of
    ``occurred`` are broken by id."""
    records, knowledge_bases = MemoryRecord._meta.db_table, KnowledgeBase._meta.db_table
    occurred = OCCURRED_SQL.format(table="n")
    turn = (
        "n.id, n.knowledge_base_id, n.content, n.metadata, n.key, n.kind, n.namespace,"
        f" n.tags, n.created_at, n.derived_from, {occurred} AS occurred,"
        f" n.valid_from, n.valid_until, n.superseded_by FROM {records} n"
        " WHERE n.org_id = %s AND n.domain_id = %s"
        " AND n.knowledge_base_id = h.knowledge_base_id AND n.namespace = h.namespace"
        f" AND {SESSION_SQL.format(table='n')} = h.session AND {TURN_SQL.format(table='n')}"
        f" AND {LIVE_SQL.format(table='n')}"
    )
    return (
        "WITH h AS ("
        f"SELECT r.id, r.org_id, r.knowledge_base_id, r.namespace,"
        f" {SESSION_SQL.format(table='r')}"
        f" AS session, {OCCURRED_SQL.format(table='r')} AS occurred FROM {records} r"
        " WHERE r.org_id = %s AND r.domain_id = %s AND r.id = ANY(%s::uuid[])"
        f" AND {TURN_SQL.format(table='r')})"
        " SELECT h.id, t.after, t.id, t.content, kb.name, t.metadata, t.key, t.kind,"
        " t.namespace, t.tags, t.created_at, t.derived_from, t.occurred,"
        " t.valid_from, t.valid_until, t.superseded_by FROM h"
        " CROSS JOIN LATERAL ("
        f"(SELECT false AS after, {turn} AND {occurred} <= h.occurred"
        f" AND ({occurred}, n.id) < (h.occurred, h.id)"
        f" ORDER BY {occurred} DESC, n.id DESC LIMIT %s)"
        " UNION ALL"
        f" (SELECT true AS after, {turn} AND {occurred} >= h.occurred"
        f" AND ({occurred}, n.id) > (h.occurred, h.id)"
        f" ORDER BY {occurred}, n.id LIMIT %s)"
        f") t JOIN {knowledge_bases} kb"
        " ON kb.id = t.knowledge_base_id AND kb.org_id = h.org_id"
        " ORDER BY h.id, t.after, t.occurred, t.id"
    )


def turns(scope: Scope, ids: Sequence[str], count: int) -> dict[str, Turns]:
    """The conversation around each of the records ``ids``: up to ``count`` turns before
    and after each (same tenant, knowledge base, namespace and session; live), oldest
    first, as items without a score. One statement for every hit; a record that names no
    session has none."""
    if not ids or count <= 0:
        return {}
    side: list[Any] = [scope.org_id, scope.domain_id, count]
    with connection.cursor() as cursor:
        cursor.execute(_turns_sql(), [scope.org_id, scope.domain_id, list(ids), *side, *side])
        rows = cursor.fetchall()
    found: dict[str, tuple[list[MemoryItem], list[MemoryItem]]] = {}
    for hit, after, pk, *values in rows:
        sides = found.setdefault(str(hit), ([], []))
        sides[1 if after else 0].append(to_item(_row(pk, values), None))
    return {hit: Turns(tuple(before), tuple(after)) for hit, (before, after) in found.items()}
