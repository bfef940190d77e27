"""Erased rows gone from the disk too: a VACUUM of the tables erasures delete from,
scheduled after each erasure, and the planner's statistics (which hold sample values)
cleared when a table is left empty."""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from django.contrib.admin.models import LogEntry
from django.core.cache import caches
from django.db import connection

from ...conf import memoryhub_settings
from ...models import (
    ImportChunk,
    ImportJob,
    MemoryRecord,
    RecordVersion,
)
from ..dispatch import send
from ..distribution import distributed_tables, is_citus
from ..store.cluster import on_each_shard

logger = logging.getLogger(__name__)


#: The tables an erasure deletes from or rewrites, vacuumed and analysed after it.
VACUUM_KEY = "memoryhub:vacuum-scheduled"


ERASED_TABLES = (MemoryRecord, RecordVersion, ImportJob, ImportChunk)


def schedule_vacuum() -> None:
    """After an erasure commits: vacuum and analyse the erased tables within
    ``VACUUM_AFTER_ERASURE`` seconds, so neither dead tuples nor planner samples of
    erased rows outlive it. One run per interval covers every erasure in it."""
    delay = memoryhub_settings.VACUUM_AFTER_ERASURE
    if delay is None:
        return
    if not current_app.conf.task_always_eager:  # eager: it runs now, nothing to merge
        try:
            if not caches[memoryhub_settings.CACHE_ALIAS].add(VACUUM_KEY, 1, timeout=delay + 60):
                return  # a run is already due, and will cover this erasure too
        except Exception as exc:  # the erasure is committed: never fail it
            logger.warning("could not schedule the vacuum after an erasure: %s", exc)
    send(
        "vacuum_erased",
        what="the vacuum after an erasure",
        left="left to autovacuum",
        countdown=delay,
    )


def vacuum_erased_tables() -> list[str]:
    """``VACUUM (ANALYZE)`` the tables erasures touch, and the admin log (it may have
    held a record's content), on the default database; returns the tables vacuumed.

    The scheduling key goes first, so an erasure during the run schedules another. A
    table the database user may not vacuum (PostgreSQL only warns and skips it) is
    logged as an error and left out of the result.
    """
    caches[memoryhub_settings.CACHE_ALIAS].delete(VACUUM_KEY)
    if connection.in_atomic_block:
        # VACUUM cannot run in a transaction (an eager task inside one, in tests).
        logger.warning("vacuum after erasure skipped: inside a transaction")
        return []
    tables = [model._meta.db_table for model in (*ERASED_TABLES, LogEntry)]
    existing = set(connection.introspection.table_names())
    done = []
    with connection.cursor() as cursor:
        for table in tables:
            if table not in existing:
                continue
            cursor.execute(
                "SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class"
                " WHERE oid = %s::regclass",
                [table],
            )
            (owner,) = cursor.fetchone()
            if not owner:
                logger.error("cannot vacuum %s after an erasure: not its owner", table)
                continue
            cursor.execute(f"VACUUM (ANALYZE) {connection.ops.quote_name(table)}")
            _clear_stats_if_empty(cursor, table)
            done.append(table)
    return done


#: On a worker, for shard ``%1$s``: clear its statistics when it is empty.
_CLEAR_SHARD_STATS = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM %1$s) THEN 0 ELSE (
    SELECT count(pg_clear_attribute_stats(s.schemaname::text, s.tablename::text,
                                          s.attname::text, s.inherited))
      FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename
     WHERE c.oid = '%1$s'::regclass AND s.schemaname = current_schema()) END
"""


def _clear_stats_if_empty(cursor: Any, table: str) -> None:
    """ANALYZE of a table left empty keeps its old statistics (PostgreSQL only replaces
    them from a sample of rows): an erasure that emptied it would leave erased values in
    ``pg_stats``. PostgreSQL 18 can clear them (``pg_clear_attribute_stats``, the table
    owner may); on older servers the stale values stay until rows come back and are
    analysed, and an error is logged.

    On a Citus cluster a distributed table's statistics are its shards', on the workers:
    each shard the erasure emptied has its statistics cleared there."""
    if is_citus(connection) and table in distributed_tables(connection):
        for success, result in on_each_shard(cursor, table, _CLEAR_SHARD_STATS):
            if not success:
                logger.error("clearing the statistics of a shard of %s failed: %s", table, result)
        return
    cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {connection.ops.quote_name(table)})")
    if cursor.fetchone()[0]:
        return
    cursor.execute("SELECT to_regprocedure('pg_clear_attribute_stats(text,text,text,boolean)')")
    if cursor.fetchone()[0] is None:
        cursor.execute(
            "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND tablename = %s",
            [table],
        )
        if cursor.fetchone()[0]:
            logger.error("%s is empty after an erasure, and keeps old statistics", table)
        return
    cursor.execute(
        "SELECT pg_clear_attribute_stats(schemaname::text, tablename::text, attname::text,"
        " inherited) FROM pg_stats WHERE schemaname = current_schema() AND tablename = %s",
        [table],
    )
