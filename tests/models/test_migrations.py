"""Migrations that rewrite what is stored, run both ways on a database holding records."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from memoryhub.models import WordStatistics
from memoryhub.services import vector_indexes, write
from tests.cluster import BACKWARDS, single_node

pytestmark = [pytest.mark.django_db(transaction=True), single_node(BACKWARDS)]

BEFORE = [("memoryhub", "0015_word_statistics")]


def migrate(targets: list[tuple[str, str]] | None) -> None:
    """Migrate the test database to ``targets`` (None: every app's latest migration, as
    the rest of the session needs it)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets or executor.loader.graph.leaf_nodes())


def search_vector_state(record_id: int) -> tuple[bool, int, bool]:
    """Whether the record matches "intenum", the column's statistics target and whether
    the shared full-text index is there."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT search_vector @@ to_tsquery('english', 'intenum')"
            " FROM memoryhub_memoryrecord WHERE id = %s",
            [record_id],
        )
        (matches,) = cursor.fetchone()
        cursor.execute(
            "SELECT a.attstattarget FROM pg_attribute a"
            " WHERE a.attrelid = 'memoryhub_memoryrecord'::regclass"
            " AND a.attname = 'search_vector'"
        )
        (target,) = cursor.fetchone()
        cursor.execute("SELECT to_regclass('memoryhub_record_fts_idx') IS NOT NULL")
        (indexed,) = cursor.fetchone()
    return matches, target, indexed


def test_the_dotted_names_migration_rewrites_stored_vectors_both_ways(tenant, settings):
    settings.MEMORYHUB = {"KEYWORD_STATISTICS_MIN_RECORDS": 2}
    result = write.write(
        tenant.scope,
        [{"content": "Flags subclass enum.IntEnum."}, {"content": "Plain words only."}],
    )
    vector_indexes.ensure_tenant_indexes()
    assert WordStatistics.unscoped.filter(domain_id=tenant.scope.domain_id).exists()
    record = result.record_ids[0]
    assert search_vector_state(record) == (True, 0, True)
    try:
        migrate(BEFORE)
        # The old vectors: the dotted name is one lexeme; still no planner statistics.
        assert search_vector_state(record) == (False, 0, True)
    finally:
        migrate(None)
    assert search_vector_state(record) == (True, 0, True)
    # The counts were of the old vectors: gone, for the sweeper to take again.
    assert not WordStatistics.unscoped.exists()
