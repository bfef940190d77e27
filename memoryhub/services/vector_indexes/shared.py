"""The shared HNSW index of each embedding model: its name and expression, its creation,
and its upgrade to a predicate that leaves out the vectors stored in bulk."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from psycopg import sql

from ...models import MemoryRecord
from .. import record_indexes

#: HNSW build parameters of the indexes built here (domains' own indexes, and the
#: shared index when it is built again). ``ef_construction`` is twice pgvector's 64: a
#: better-connected graph answers known-item questions with clearly higher recall
#: against exact search, the more so the larger the domain, for a longer build.
HNSW_M = 16


HNSW_EF_CONSTRUCTION = 128


#: The sequence numbering bulk stores of vectors (``MemoryRecord.vector_batch``).
#: The suffix of an index being built to replace the one of the name before it.
NEXT_SUFFIX = "_next"

VECTOR_BATCH_SEQUENCE = "memoryhub_vector_batch"


def model_digest(model_name: str) -> str:
    """Eight hex digits naming ``model_name`` in index names."""
    return hashlib.sha1(model_name.encode("utf-8")).hexdigest()[:8]


def vector_index_name(model_name: str) -> str:
    """A stable, valid index name for ``model_name`` (at most 63 bytes)."""
    slug = "".join(ch if ch.isalnum() else "_" for ch in model_name.lower())[:30]
    return f"memoryhub_hnsw_{slug}_{model_digest(model_name)}"


def vector_expression(dimensions: int) -> str:
    """The indexed expression; queries must use exactly this to use the index."""
    return f"(embedding::vector({int(dimensions)}))"


def ensure_vector_index(
    model_name: str, dimensions: int, *, concurrently: bool | None = None
) -> tuple[str, bool]:
    """Create the HNSW expression index of one embedding model if it is missing.

    It holds the model's vectors stored row by row (bulk-stored ones are searched
    elsewhere). Returns ``(index name, created)``. ``CONCURRENTLY`` is used outside a
    transaction (production), plain ``CREATE INDEX`` inside one (tests, migrations).
    """
    name = vector_index_name(model_name)
    return name, create_hnsw_index(name, model_name, dimensions, concurrently=concurrently)


def create_hnsw_index(
    name: str,
    model_name: str,
    dimensions: int,
    *,
    tenant: tuple[int, int] | None = None,
    covers: int = 0,
    concurrently: bool | None = None,
) -> bool:
    """``CREATE INDEX`` of the model's HNSW index, unless one of that name exists;
    whether it was created.

    The shared index holds the vectors stored row by row; a ``tenant``'s (org, domain)
    holds its domain's, and those of its bulk stores up to number ``covers``.
    """
    if concurrently is None:
        concurrently = not connection.in_atomic_block
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_class WHERE relname = %s AND relkind = 'i'", [name])
        if cursor.fetchone() is not None:
            return False
        predicate = sql.SQL("embedding_model = {model}").format(model=sql.Literal(model_name))
        if tenant is None:
            predicate = sql.SQL("{} AND vector_batch IS NULL").format(predicate)
        else:
            predicate = sql.SQL(
                "{} AND org_id = {} AND domain_id = {}"
                " AND (vector_batch IS NULL OR vector_batch <= {})"
            ).format(
                predicate,
                sql.Literal(int(tenant[0])),
                sql.Literal(int(tenant[1])),
                sql.Literal(int(covers)),
            )
        statement = sql.SQL(
            "CREATE INDEX {concurrently} IF NOT EXISTS {name} ON {table} "
            "USING hnsw ({expression} vector_cosine_ops) "
            "WITH (m = {m}, ef_construction = {ef}) WHERE {predicate}"
        ).format(
            concurrently=sql.SQL("CONCURRENTLY" if concurrently else ""),
            name=sql.Identifier(name),
            table=sql.Identifier(MemoryRecord._meta.db_table),
            expression=sql.SQL(vector_expression(dimensions)),
            m=sql.Literal(HNSW_M),
            ef=sql.Literal(HNSW_EF_CONSTRUCTION),
            predicate=predicate,
        )
    record_indexes.build(statement, concurrently=concurrently)
    return True


@contextmanager
def connection_cursor() -> Iterator[object]:
    with connection.cursor() as cursor:
        yield cursor


def swap_index(successor: str, name: str, *, concurrently: bool) -> None:
    record_indexes.drop(name, concurrently=concurrently)
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("ALTER INDEX {} RENAME TO {}")
            .format(sql.Identifier(successor), sql.Identifier(name))
            .as_string(cursor.connection)
        )


def upgrade_shared_index(model_name: str, dimensions: int, *, concurrently: bool) -> None:
    """A shared index built before bulk stores existed holds their vectors too (each
    inserted row by row): build it again without them, then swap it in."""
    name = vector_index_name(model_name)
    successor = name + NEXT_SUFFIX
    predicate = _predicate(name)
    if predicate is None and _predicate(successor) is not None:
        swap_index(successor, name, concurrently=concurrently)  # a crash between drop and rename
        return
    if predicate is None or "vector_batch" in predicate:
        return
    record_indexes.drop(successor, concurrently=concurrently)  # a crashed upgrade's leftover
    create_hnsw_index(successor, model_name, dimensions, concurrently=concurrently)
    swap_index(successor, name, concurrently=concurrently)


def _predicate(name: str) -> str | None:
    with connection_cursor() as cursor:
        cursor.execute(  # type: ignore[attr-defined]
            "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
            [name],
        )
        row = cursor.fetchone()  # type: ignore[attr-defined]
    return None if row is None else str(row[0] or "")


@contextmanager
def no_statement_timeout(session: bool) -> Iterator[None]:
    """Index builds take minutes on a large domain: a role's ``statement_timeout`` would
    leave an invalid index behind, dropped and rebuilt at every run."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SET statement_timeout = 0" if session else "SET LOCAL statement_timeout = 0"
        )
    try:
        yield
    finally:
        if session:
            with connection.cursor() as cursor:
                cursor.execute("RESET statement_timeout")
