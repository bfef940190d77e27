"""On a Citus cluster: the tables are where memoryhub needs them, and a tenant's
statements (write, indexing, query in every mode, history, listing, forget) each go to
the one worker holding its shard group.

Two guards: the session runs with ``citus.multi_task_query_log_level = error``, so any
statement Citus would send to several shards fails the test; and the plan of each query
statement is read (``EXPLAIN``) for ``Task Count: 1``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryhub import policy
from memoryhub.models import MemoryRecord
from memoryhub.services import distribution, forget, history, query, records, write
from memoryhub.services.forget import ForgetRequest

pytestmark = pytest.mark.django_db


@pytest.fixture
def single_shard() -> Iterator[None]:
    """Any statement sent to more than one shard is an error while the test runs."""
    with connection.cursor() as cursor:
        cursor.execute("SET citus.multi_task_query_log_level = 'error'")
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET citus.multi_task_query_log_level")


def test_every_table_is_where_memoryhub_needs_it() -> None:
    assert distribution.layout_problems(connection) == []
    places = distribution.layout(connection)
    groups = {places[model._meta.db_table].group for model in distribution.DISTRIBUTED}
    assert len(groups) == 1
    assert {places[model._meta.db_table].column for model in distribution.DISTRIBUTED} == {"org_id"}


def test_the_orgs_are_spread_over_both_workers(tenant, other_tenant) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT nodeport) FROM pg_dist_shard_placement p"
            " JOIN pg_dist_shard s USING (shardid) WHERE s.logicalrelid = %s::regclass",
            ["memoryhub_memoryrecord"],
        )
        assert cursor.fetchone()[0] == 2


def write_some(tenant, committed, count: int = 3, **extra) -> list[str]:
    items = [
        {
            "content": f"note {n} about the launch plan",
            "metadata": {"session": "s1", "n": n},
            "occurred_at": f"2026-03-0{n % 9 + 1}T10:00:00Z",
            **extra,
        }
        for n in range(count)
    ]
    result = committed(write.write, tenant.scope, items, principal=policy.AGENT)
    return [record.id for record in result.records]


@pytest.mark.parametrize("count", [3, 60], ids=["row-by-row", "bulk-copy"])
def test_a_tenants_write_and_indexing_stay_on_one_shard(
    tenant, committed, single_shard, count
) -> None:
    ids = write_some(tenant, committed, count)
    statuses = set(
        MemoryRecord.unscoped.filter(org_id=tenant.org.pk, pk__in=ids).values_list(
            "status", flat=True
        )
    )
    assert statuses == {"indexed"}


def test_a_keyed_upsert_with_history_stays_on_one_shard(tenant, committed, single_shard) -> None:
    for content in ("prefers tea", "prefers coffee"):
        result = committed(
            write.write, tenant.scope, [{"content": content, "key": "drink", "kind": "semantic"}]
        )
    [written] = result.records
    assert records.get_record(tenant.scope, written.id).content == "prefers coffee"
    chain = history.history(tenant.scope, written.id)
    assert [version["content"] for version in chain["versions"]] == [
        "prefers coffee",
        "prefers tea",
    ]


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_a_tenants_query_stays_on_one_shard(tenant, committed, single_shard, mode) -> None:
    write_some(tenant, committed, 5)
    result = query.query(
        tenant.scope,
        query="launch plan",
        mode=mode,
        k=3,
        where={"session": "s1"},
        occurred_after="2026-03-01T00:00:00Z",
        context_turns=1,
    )
    assert result.items


def test_a_tenants_forget_stays_on_one_shard(tenant, committed, single_shard) -> None:
    write_some(tenant, committed, 3, namespace="user:alice")
    result = committed(forget.forget, tenant.scope, ForgetRequest(namespace="user:alice"))
    assert result.deleted == 3


def test_each_query_statement_is_planned_for_one_task(tenant, committed) -> None:
    write_some(tenant, committed, 5)
    with CaptureQueriesContext(connection) as captured:
        query.query(tenant.scope, query="launch plan", mode="hybrid", k=3, context_turns=1)
    statements = [
        entry["sql"]
        for entry in captured.captured_queries
        if "memoryhub_memoryrecord" in entry["sql"]
        and entry["sql"].lstrip().upper().startswith(("SELECT", "WITH"))
    ]
    assert statements
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(f"EXPLAIN {statement}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            counts = re.findall(r"Task Count: (\d+)", plan)
            assert counts and set(counts) == {"1"}, plan


def test_the_system_check_is_quiet_on_a_distributed_cluster() -> None:
    from memoryhub.checks import check_database

    assert [message.id for message in check_database(databases=["default"])] == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_outside_a_transaction_every_mode_answers(tenant, mode) -> None:
    """As a web process asks (autocommit, no transaction open): the path the tests inside
    a transaction never take."""
    write.write(tenant.scope, [{"content": f"launch plan note {n}"} for n in range(5)])
    result = query.query(tenant.scope, query="launch plan", mode=mode, k=3)
    assert len(result.items) == 3


@pytest.mark.django_db(transaction=True)
def test_a_domains_own_index_is_sized_from_its_shard(tenant, other_tenant, settings) -> None:
    """The coordinator's catalog counts no rows on a cluster: the own index's rows come
    from its org's shard, the table's from every shard (what the ef_search share and the
    insert-or-rebuild choice read)."""
    from memoryhub.conf import memoryhub_settings
    from memoryhub.services import vector_indexes

    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 1000, "TENANT_INDEX_MIN_RECORDS": 30}
    write.write(tenant.scope, [{"content": f"Acme memo {n}."} for n in range(30)])
    write.write(other_tenant.scope, [{"content": f"Globex memo {n}."} for n in range(30)])
    model = memoryhub_settings.embedder().name
    mine = vector_indexes.tenant_index_name(model, tenant.scope.org_id, tenant.scope.domain_id)
    assert mine in vector_indexes.ensure_tenant_indexes().created
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryhub_memoryrecord")
    vector_indexes.own.shard_sizes.clear()
    own = vector_indexes.own_index(tenant.scope, model)
    assert own is not None
    assert own.covered == 30
    assert own.share == pytest.approx(0.5, abs=0.05)
