"""The indexes memoryhub builds on the records table at run time (domains' own HNSW and
full-text indexes, metadata keys' indexes): finding them by name, building and dropping
them, ``CONCURRENTLY`` outside a transaction."""

from __future__ import annotations

import re
from typing import Any

from django.db import connection
from psycopg import sql

from ..models import MemoryRecord


def named(pattern: re.Pattern[str]) -> dict[str, bool]:
    """Every index of the records table whose name matches ``pattern``, and whether it
    is valid (a failed ``CONCURRENTLY`` build leaves an invalid one)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c"
            " ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass",
            [MemoryRecord._meta.db_table],
        )
        return {name: bool(valid) for name, valid in cursor.fetchall() if pattern.match(name)}


def is_valid(name: str) -> bool:
    """Whether the index ``name`` exists and is valid."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid AND i.indisvalid"
            " WHERE c.relname = %s",
            [name],
        )
        return cursor.fetchone() is not None


def build(statement: Any, *, concurrently: bool) -> None:
    """Run a ``CREATE INDEX`` (a psycopg ``sql.Composable``)."""
    with connection.cursor() as cursor:
        if not concurrently:
            # CREATE INDEX refuses to run while deferred FK checks are pending in the
            # transaction; checking them now is what COMMIT would do anyway.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(statement.as_string(cursor.connection))


def drop(name: str, *, concurrently: bool) -> None:
    statement = sql.SQL("DROP INDEX {concurrently} IF EXISTS {name}").format(
        concurrently=sql.SQL("CONCURRENTLY" if concurrently else ""), name=sql.Identifier(name)
    )
    with connection.cursor() as cursor:
        cursor.execute(statement.as_string(cursor.connection))
