"""Indexes of the metadata keys queries filter on: a vector query filtered on an indexed
key to a small part of a domain is scanned exactly (recall 1.0) through the key's index,
where the HNSW graph loses neighbours to the filter; every door keeps the tenancy: two
orgs with the same metadata, each query answers its own org's records."""

from __future__ import annotations

import json
import os
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from pgvector import Vector

from memoryhub.embedders import HashingEmbedder
from memoryhub.services import filter_indexes, query, vector_indexes, write
from memoryhub.services.query import QueryRequest
from tests.cluster import ONE_SERVERS_PLAN, single_node
from tests.services.test_time_aware import errors_of

pytestmark = pytest.mark.django_db

#: Exact scans up to 4 rows, 20 on an indexed key; 12 gold records: between the two.
SETTINGS = {"EXACT_SCAN_THRESHOLD": 4, "TENANT_INDEX_MIN_RECORDS": 0}
KEY = "tier"


def load(committed, scope, org: str, key: str = KEY) -> None:
    items = [
        {"content": f"{org} refund note {n}.", "metadata": {key: "gold" if n % 3 == 0 else "tin"}}
        for n in range(36)
    ]
    committed(write.write, scope, items)


def fresh(scope, where, **kwargs) -> query.QueryResult:
    query.clear_plans()
    from django.core.cache import cache

    cache.clear()
    return query.query(scope, query="refund note 7", k=5, mode="vector", where=where, **kwargs)


class _Undo(Exception):
    pass


def index_condition(scope, where, index: str) -> str:
    """The condition ``index`` answers in the plan of the exact scan of ``where`` ("" if
    the plan does not use it), with the records' other btree indexes dropped for the
    moment (in a savepoint rolled back after): whether a key's index answers the filter,
    not which of several near-equal indexes a tiny table's costs favour."""
    plan = query.plan_for(scope, QueryRequest.build(query="x", k=5, mode="vector", where=where))
    assert plan.vector is not None
    vector = Vector(HashingEmbedder().embed_query("refund note 7")).to_text()
    lines: list[str] = []
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.relname, k.conname FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
                " LEFT JOIN pg_constraint k ON k.conindid = i.indexrelid"
                " WHERE i.indrelid = 'memoryhub_memoryrecord'::regclass"
                " AND a.amname = 'btree' AND NOT i.indisprimary AND c.relname NOT LIKE %s",
                [filter_indexes.INDEX_PREFIX + "%"],
            )
            for other, constraint in cursor.fetchall():
                if constraint:
                    cursor.execute(
                        f'ALTER TABLE memoryhub_memoryrecord DROP CONSTRAINT "{constraint}"'
                    )
                else:
                    cursor.execute(f'DROP INDEX "{other}"')
            cursor.execute("ANALYZE memoryhub_memoryrecord")
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + plan.vector.sql, plan.vector.bind({query.VECTOR: vector}))
            lines = [row[0] for row in cursor.fetchall()]
            raise _Undo
    except _Undo:
        pass
    scans = [n for n, line in enumerate(lines) if f" {index} " in line]
    conditions = [lines[n + 1].strip() for n in scans if n + 1 < len(lines)]
    return "\n".join(c for c in conditions if c.startswith("Index Cond:"))


@single_node(ONE_SERVERS_PLAN)
def test_a_vector_query_filtered_on_an_indexed_key_is_scanned_exactly(
    tenant, other_tenant, committed, settings
):
    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [KEY]}
    load(committed, tenant.scope, "Acme")
    load(committed, other_tenant.scope, "Globex")
    gold = {KEY: "gold"}
    # Declared, not built yet: the HNSW graph (12 rows are more than 4).
    assert fresh(tenant.scope, gold).strategy == "hnsw"
    out = StringIO()
    call_command("memoryhub_ensure_indexes", stdout=out)
    assert f"Metadata key {KEY!r}: index built." in out.getvalue()
    assert filter_indexes.indexed_keys() == {KEY}
    name = filter_indexes.index_name(KEY)
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        result = fresh(scope, gold)
        assert result.strategy == "exact"
        assert len(result.items) == 5
        assert all(
            item.content.startswith(org) and item.metadata[KEY] == "gold" for item in result.items
        )
        # The same answer as an exact scan of every row gives.
        settings.MEMORYHUB = {**SETTINGS, "EXACT_SCAN_THRESHOLD": 1000}
        assert [item.id for item in fresh(scope, gold).items] == [i.id for i in result.items]
        settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [KEY]}
    # The key's index finds the rows (in an $and too).
    assert "metadata ->" in index_condition(
        tenant.scope, {"$and": [gold, {"n": {"$exists": False}}]}, name
    )
    assert fresh(tenant.scope, {KEY: {"$in": ["gold"]}}).strategy == "exact"
    # Not every matching record holds the key under $or, $ne or $exists, a null is
    # matched by its type and a string comparison by the key's text: the graph.
    for where in (
        {"$or": [gold, {"x": 1}]},
        {KEY: {"$ne": "gold"}},
        {KEY: {"$in": ["gold", None]}},
        {KEY: {"$gte": "gold"}},
    ):
        assert fresh(tenant.scope, where).strategy == "hnsw", where
    # More rows than five times the threshold: the graph again.
    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [KEY], "EXACT_SCAN_THRESHOLD": 2}
    assert fresh(tenant.scope, gold).strategy == "hnsw"


def test_a_key_leaving_the_setting_takes_its_index_with_it(tenant, committed, settings):
    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [KEY]}
    load(committed, tenant.scope, "Acme")
    assert vector_indexes.ensure_tenant_indexes().filter_keys_indexed == [KEY]
    assert vector_indexes.ensure_tenant_indexes().filter_keys_indexed == []  # there already
    settings.MEMORYHUB = SETTINGS
    changes = vector_indexes.ensure_tenant_indexes()
    assert changes.filter_indexes_dropped == [filter_indexes.index_name(KEY)]
    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [KEY]}
    assert filter_indexes.indexed_keys() == frozenset()
    assert fresh(tenant.scope, {KEY: "gold"}).strategy == "hnsw"


def test_an_index_left_invalid_is_built_again(tenant, committed, settings):
    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [KEY]}
    vector_indexes.ensure_tenant_indexes()
    with connection.cursor() as cursor:
        # What a failed CREATE INDEX CONCURRENTLY leaves.
        cursor.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass",
            [filter_indexes.index_name(KEY)],
        )
    assert filter_indexes.indexed_keys() == frozenset()
    changes = vector_indexes.ensure_tenant_indexes()
    assert changes.filter_indexes_dropped == [filter_indexes.index_name(KEY)]
    assert changes.filter_keys_indexed == [KEY]
    assert filter_indexes.indexed_keys() == {KEY}


@single_node(ONE_SERVERS_PLAN)
def test_a_range_on_an_indexed_number_is_found_by_its_index(
    tenant, other_tenant, committed, settings
):
    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": ["bucket"]}
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        committed(
            write.write,
            scope,
            [{"content": f"{org} note {n}.", "metadata": {"bucket": n % 10}} for n in range(60)],
        )
    vector_indexes.ensure_tenant_indexes()
    low = {"bucket": {"$lt": 2}}  # 12 of each org's 60
    result = fresh(tenant.scope, low)
    assert result.strategy == "exact" and len(result.items) == 5
    assert all(i.content.startswith("Acme") and i.metadata["bucket"] < 2 for i in result.items)
    assert "< '2'::jsonb" in index_condition(tenant.scope, low, filter_indexes.index_name("bucket"))


def test_a_value_too_large_for_its_index_is_refused_by_name(tenant, committed, settings):
    # A btree entry holds about 2.7 kB: the write gets a 400 naming the key, not a 500.
    from memoryhub.exceptions import ValidationFailed

    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [KEY]}
    with pytest.raises(ValidationFailed) as refused:
        committed(write.write, tenant.scope, [{"content": "x", "metadata": {KEY: "g" * 1200}}])
    assert "items[0].metadata.tier" in refused.value.errors
    # Any size under other keys, as before.
    committed(write.write, tenant.scope, [{"content": "x", "metadata": {"notes": "g" * 3000}}])


def test_the_api_refuses_a_value_too_large_for_its_index_with_a_400(tenant, settings):
    from memoryhub.models import MemoryRecord
    from tests.factories import key_client

    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [KEY]}
    client = key_client(tenant, can_read=True, can_write=True)
    body = {"items": [{"content": "ok"}, {"content": "x", "metadata": {KEY: "g" * 1200}}]}
    response = client.post("/api/v1/domains/support/records", body, format="json")
    assert response.status_code == 400
    assert "items[1].metadata.tier" in json.dumps(response.json())
    assert not MemoryRecord.unscoped.filter(domain_id=tenant.scope.domain_id).exists()


def test_a_failed_build_is_logged_and_not_retried_at_once(tenant, committed, settings, caplog):
    # Written before its key was listed: a value no btree entry can hold (incompressible).
    value = os.urandom(6000).hex()
    committed(write.write, tenant.scope, [{"content": "x", "metadata": {KEY: value}}])
    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [KEY, "other"]}
    with caplog.at_level("ERROR"):
        changes = vector_indexes.ensure_tenant_indexes()
    assert changes.filter_keys_indexed == ["other"]  # the other key's index is built
    assert "could not be built" in caplog.text
    assert filter_indexes.indexed_keys() == {"other"}
    assert vector_indexes.ensure_tenant_indexes().filter_keys_indexed == []  # not tried again yet


def test_an_index_whose_values_reached_the_statistics_is_built_again(tenant, committed, settings):
    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [KEY]}
    load(committed, tenant.scope, "Acme")
    vector_indexes.ensure_tenant_indexes()
    name = filter_indexes.index_name(KEY)
    with connection.cursor() as cursor:
        # A build interrupted before its statistics target was set, then an ANALYZE.
        cursor.execute(f"ALTER INDEX {name} ALTER COLUMN 2 SET STATISTICS -1")
        cursor.execute("ANALYZE memoryhub_memoryrecord")
    changes = vector_indexes.ensure_tenant_indexes()
    assert (changes.filter_indexes_dropped, changes.filter_keys_indexed) == ([name], [KEY])
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stats WHERE tablename = %s", [name])
        assert cursor.fetchone()[0] == 0
    assert vector_indexes.ensure_tenant_indexes().filter_indexes_dropped == []


def test_an_index_not_named_as_ours_is_left_alone(tenant, settings):
    settings.MEMORYHUB = SETTINGS
    with connection.cursor() as cursor:
        cursor.execute("CREATE INDEX memoryhub_metadata_host ON memoryhub_memoryrecord (kind)")
    assert vector_indexes.ensure_tenant_indexes().filter_indexes_dropped == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('memoryhub_metadata_host') IS NOT NULL")
        assert cursor.fetchone()[0]


@single_node(ONE_SERVERS_PLAN)
@pytest.mark.parametrize("key", ["it's", 'a "quoted" key', "7", "x); DROP TABLE y; --"])
def test_any_key_is_indexed_and_found_by_its_index(tenant, other_tenant, committed, settings, key):
    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": [key]}
    load(committed, tenant.scope, "Acme", key)
    load(committed, other_tenant.scope, "Globex", key)
    assert vector_indexes.ensure_tenant_indexes().filter_keys_indexed == [key]
    result = fresh(tenant.scope, {key: "gold"})
    assert result.strategy == "exact" and len(result.items) == 5
    assert all(item.content.startswith("Acme") for item in result.items)
    assert "metadata ->" in index_condition(
        tenant.scope, {key: "gold"}, filter_indexes.index_name(key)
    )


def test_no_planner_statistics_hold_the_indexed_values(tenant, committed, settings):
    # Metadata may hold personal data: no statistics of it (migration 0005), and none of
    # its index's expression either, which ANALYZE would otherwise sample.
    settings.MEMORYHUB = {**SETTINGS, "INDEXED_METADATA_KEYS": ["owner"]}
    committed(
        write.write,
        tenant.scope,
        [{"content": f"Note {n}.", "metadata": {"owner": "zoltan.kovacs"}} for n in range(15)],
    )
    vector_indexes.ensure_tenant_indexes()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryhub_memoryrecord")
        cursor.execute(
            "SELECT concat(most_common_vals::text, histogram_bounds::text) FROM pg_stats"
            " WHERE tablename = %s",
            [filter_indexes.index_name("owner")],
        )
        sampled = [row[0] for row in cursor.fetchall()]
    assert not any("zoltan" in value for value in sampled)
    assert fresh(tenant.scope, {"owner": "zoltan.kovacs"}).strategy == "exact"


def test_the_keys_a_filter_narrows_on():
    where = {
        "a": 1,
        "$and": [{"b": {"$gt": 1}}, {"c": {"$ne": 2}}, {"$and": [{"f": {"$in": [1]}}]}],
        "$or": [{"d": 1}],
        "e": None,
        "g": {"$exists": True},
    }
    assert set(filter_indexes.conjunction_keys(where)) == {"a", "b", "f"}


@pytest.mark.parametrize(
    "value", ["tier", [""], [7], ["k"] * 17, ["x" * 201], {"tier": 1}, None, ["a\x00"], ["$and"]]
)
def test_a_bad_indexed_keys_setting_is_a_system_check_error(settings, value):
    [(check, message)] = errors_of(settings, INDEXED_METADATA_KEYS=value)
    assert check == "memoryhub.E018"
    assert "INDEXED_METADATA_KEYS" in message


def test_good_indexed_keys_pass_the_checks(settings):
    assert errors_of(settings, INDEXED_METADATA_KEYS=["tier", "price"]) == []
    assert errors_of(settings, INDEXED_METADATA_KEYS=()) == []
