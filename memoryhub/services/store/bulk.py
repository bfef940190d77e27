"""Bulk storage: new records and their vectors written with PostgreSQL's binary COPY.

The write and indexing services decide everything about a batch (validation, tenancy,
dedupe, keys, history, where each vector goes); for a large batch only the storage step
differs. Instead of an ``INSERT`` compiled by the ORM (about half a millisecond of
Python per record) or an ``UPDATE`` whose vectors travel as text, a batch streams in
PostgreSQL's binary format: :func:`copy_records` inserts new records, and
:func:`store_vectors` copies vectors into a temporary table and stores them with one
``UPDATE … FROM``. Both run inside the caller's transaction: a failure midway leaves
nothing behind.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from django.db import connection, connections, transaction
from django.db.models import Field
from django.utils import timezone
from pgvector.psycopg.vector import VectorBinaryDumper
from psycopg import sql

from ...models import MemoryRecord

__all__ = ["copy_records", "store_vectors"]


def _raw(cursor: Any) -> Any:
    """The psycopg cursor under Django's wrapper (COPY is psycopg's, not the DB API's;
    its errors are translated to Django's by ``connection.wrap_database_errors``)."""
    return getattr(cursor, "cursor", cursor)


def _column_types(cursor: Any, table: str) -> dict[str, int]:
    """Each writable column's type oid (binary COPY sends values of exactly these types;
    ``vector``'s oid differs from database to database)."""
    cursor.execute(
        "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s::regclass"
        " AND attnum > 0 AND NOT attisdropped AND attgenerated = ''",
        [table],
    )
    return {name: oid for name, oid in cursor.fetchall()}


def _dump_vectors(cursor: Any, oid: int) -> None:
    """Numpy arrays go to this cursor's COPY as binary ``vector`` values (on the cursor
    only: the connection's other statements keep Django's text adaptation)."""
    dumper = type("VectorDumper", (VectorBinaryDumper,), {"oid": oid})
    _raw(cursor).adapters.register_dumper(np.ndarray, dumper)


def _vector(value: Any) -> Any:
    return None if value is None else np.asarray(value, dtype=np.float32)


#: Fields whose value, when it is a plain Python value (``_PLAIN``), is what the database
#: gets: preparing it (Django's ``get_db_prep_save``, a few calls per field) is skipped.
_AS_IS = {
    "AutoField",
    "BigAutoField",
    "BigIntegerField",
    "BooleanField",
    "CharField",
    "DateTimeField",
    "ForeignKey",
    "IntegerField",
    "PositiveBigIntegerField",
    "PositiveIntegerField",
    "PositiveSmallIntegerField",
    "SlugField",
    "SmallIntegerField",
    "TextField",
    "UUIDField",
}
_PLAIN = (str, int, bool, uuid.UUID)


def _plain(value: Any) -> bool:
    if type(value) in _PLAIN:
        return True
    if isinstance(value, datetime):
        return value.tzinfo is not None
    if type(value) is list:
        return all(type(item) in _PLAIN for item in value)
    return False


def _column_value(field: Field[Any, Any], db: Any) -> Callable[[MemoryRecord], Any]:
    """How one column's value is read from a record: what ``bulk_create`` would send
    (``pre_save``, then ``get_db_prep_save``), the preparation skipped where it would
    return the value unchanged."""
    if field.get_internal_type() == "VectorField":
        return lambda record: _vector(getattr(record, field.attname))
    attname = field.attname
    pre_save = type(field).pre_save is not Field.pre_save  # auto_now and the like
    as_is = field.get_internal_type() in _AS_IS or (
        field.get_internal_type() == "ArrayField" and field.base_field.get_internal_type() in _AS_IS  # type: ignore[attr-defined]
    )

    def value(record: MemoryRecord) -> Any:
        found = field.pre_save(record, True) if pre_save else getattr(record, attname)
        if found is None or (as_is and _plain(found)):
            return found
        return field.get_db_prep_save(found, db)

    return value


def copy_records(records: Sequence[MemoryRecord]) -> None:
    """Insert ``records`` (new, unsaved) with one binary COPY: the rows ``bulk_create``
    would insert (each field's ``pre_save`` and database preparation), nothing else, and
    the records are marked saved as ``bulk_create`` marks them."""
    if not records:
        return
    meta = MemoryRecord._meta
    db = connections[connection.alias]  # not the proxy: it is asked once per value
    fields: list[Field[Any, Any]] = [
        field for field in meta.concrete_fields if not getattr(field, "generated", False)
    ]
    columns = [str(field.column) for field in fields]
    values = [_column_value(field, db) for field in fields]
    with connection.cursor() as cursor:
        types = _column_types(cursor, meta.db_table)
        for column, field in zip(columns, fields, strict=True):
            if field.get_internal_type() == "VectorField":
                _dump_vectors(cursor, types[column])
        statement = sql.SQL("COPY {table} ({columns}) FROM STDIN WITH (FORMAT BINARY)").format(
            table=sql.Identifier(meta.db_table),
            columns=sql.SQL(", ").join([sql.Identifier(column) for column in columns]),
        )
        with connection.wrap_database_errors, _raw(cursor).copy(statement) as copy:
            copy.set_types([types[column] for column in columns])
            for record in records:
                copy.write_row([value(record) for value in values])
    for record in records:
        record._state.adding = False
        record._state.db = connection.alias


def store_vectors(
    ids: Sequence[Any],
    vectors: Iterable[Sequence[float]],
    model_name: str,
    batches: Sequence[int | None],
    *,
    org_id: int,
) -> None:
    """Store each record's vector, its model and ``indexed`` status, and the bulk batch
    that stored it (``MemoryRecord.vector_batch``; None: row by row), with one binary
    COPY into a temporary table and one ``UPDATE … FROM``. The records are org
    ``org_id``'s."""
    table = MemoryRecord._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMPORARY TABLE memoryhub_vectors_in"
            " (id uuid, embedding vector, vector_batch bigint) ON COMMIT DROP"
        )
        cursor.execute("SELECT 'vector'::regtype::oid")
        (vector_oid,) = cursor.fetchone()
        _dump_vectors(cursor, vector_oid)
        with (
            connection.wrap_database_errors,
            _raw(cursor).copy(
                "COPY memoryhub_vectors_in (id, embedding, vector_batch)"
                " FROM STDIN WITH (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["uuid", vector_oid, "int8"])
            for pk, vector, batch in zip(ids, vectors, batches, strict=True):
                record_id = pk if isinstance(pk, uuid.UUID) else uuid.UUID(str(pk))
                copy.write_row((record_id, np.asarray(vector, dtype=np.float32), batch))
        cursor.execute(
            f"""
            UPDATE {table} AS record
               SET embedding = batch.embedding,
                   embedding_model = %s,
                   status = %s,
                   last_error = '',
                   indexed_at = %s,
                   vector_batch = batch.vector_batch
              FROM memoryhub_vectors_in AS batch
             WHERE record.org_id = %s AND record.id = batch.id
            """,
            [model_name, MemoryRecord.Status.INDEXED, timezone.now(), org_id],
        )
        cursor.execute("DROP TABLE memoryhub_vectors_in")
