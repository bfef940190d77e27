"""The database cancelling a statement on purpose: a trigger raises a real SQLSTATE the
first ``times`` times a table is written (a sequence counts, outside any transaction),
so the code under test meets the very error PostgreSQL (or Citus) would raise."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.db import connection

DEADLOCK = ("40P01", "deadlock detected")
SHARD_GONE = ("XX000", "could not find valid entry for shard 102008")
#: What a server that shuts down or loses its connection answers (class 08, and 57P01).
CONNECTION_LOST = ("08006", "terminating connection")

Cancel = Callable[..., None]


@pytest.fixture
def cancel() -> Iterator[Cancel]:
    """``cancel(table, times, (sqlstate, message), on=...)``: the database cancels the
    first ``times`` statements that write a row of ``table`` (``on``: which writes)."""
    installed: list[str] = []

    def install(
        table: str, times: int, error: tuple[str, str], on: str = "INSERT OR UPDATE OR DELETE"
    ) -> None:
        sqlstate, message = error
        with connection.cursor() as cursor:
            cursor.execute("CREATE SEQUENCE memoryhub_test_cancels")
            cursor.execute(
                "CREATE FUNCTION memoryhub_test_cancel() RETURNS trigger LANGUAGE plpgsql AS $$"
                f" BEGIN IF nextval('memoryhub_test_cancels') <= {times} THEN"
                f" RAISE EXCEPTION '{message}' USING ERRCODE = '{sqlstate}'; END IF;"
                " RETURN COALESCE(NEW, OLD); END $$"
            )
            cursor.execute(
                f"CREATE TRIGGER memoryhub_test_cancel BEFORE {on}"
                f" ON {table} FOR EACH ROW EXECUTE FUNCTION memoryhub_test_cancel()"
            )
        installed.append(table)

    yield install
    with connection.cursor() as cursor:
        for table in installed:
            cursor.execute(f"DROP TRIGGER IF EXISTS memoryhub_test_cancel ON {table}")
        cursor.execute("DROP FUNCTION IF EXISTS memoryhub_test_cancel()")
        cursor.execute("DROP SEQUENCE IF EXISTS memoryhub_test_cancels")


def trigger_calls() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value, is_called FROM memoryhub_test_cancels")
        value, called = cursor.fetchone()
    return int(value) if called else 0
