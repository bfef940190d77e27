"""The bulk path: large writes copied in, vectors stored in bulk outside the shared HNSW
index, searched exactly until a domain's own index is built again over them.

Recall is the contract: a record written and indexed through the bulk path is found by
vector, keyword and hybrid queries as soon as its batch is stored, by its own org only,
in every plan (exact, the shared index, a domain's own index) and after each maintenance
step; a failure midway leaves nothing behind.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.core.cache import cache
from django.db import connection, transaction

from memoryhub import policy
from memoryhub.embedders import HashingEmbedder
from memoryhub.models import MemoryRecord, Observation
from memoryhub.scope import Scope, tenant_scope
from memoryhub.services import indexing, query, vector_indexes, write
from memoryhub.services.query import plans
from memoryhub.services.store import bulk
from tests.cluster import OWN_INDEX_SIZES, single_node

pytestmark = pytest.mark.django_db

MODEL = HashingEmbedder().name
TOPICS = ["refunds", "shipping", "invoices", "passwords", "holidays", "laptops", "parking"]


def handbook(org: str) -> list[dict]:
    """One passage per topic, each naming the org (what a leak would show)."""
    return [
        {"content": f"{org} policy on {topic}: ask the {topic} desk, form {n}.", "tags": [topic]}
        for n, topic in enumerate(TOPICS)
    ]


def stored(scope: Scope) -> list[MemoryRecord]:
    with tenant_scope(scope):
        return list(MemoryRecord.objects.order_by("created_at"))


def found(scope: Scope, text: str, mode: str) -> query.QueryResult:
    """A query planned and answered afresh (settings change between calls here)."""
    cache.clear()
    query.clear_plans()
    return query.query(scope, query=text, k=3, mode=mode)


def assert_found_by_its_org_only(scope: Scope, org: str, *, strategy: str) -> None:
    for mode in ("vector", "keyword", "hybrid"):
        result = found(scope, "policy on parking desk", mode)
        assert result.items, mode
        assert result.items[0].content == f"{org} policy on parking: ask the parking desk, form 6."
        assert all(item.content.startswith(org) for item in result.items), mode
        if mode != "keyword":
            assert result.strategy.removeprefix("hybrid+") == strategy, mode


def hold_maintenance(monkeypatch: pytest.MonkeyPatch, asked: list[str] | None = None) -> None:
    """No tenant index maintenance runs (each request is noted in ``asked``); indexing
    is sent as usual."""
    send = indexing.send

    def held(task: str, *args: Any, **kwargs: Any) -> bool:
        if task != "tenant_indexes":
            return send(task, *args, **kwargs)
        if asked is not None:
            asked.append(task)
        return True

    monkeypatch.setattr(indexing, "send", held)


def test_a_bulk_write_stores_the_rows_a_row_by_row_write_stores(tenant, other_tenant, settings):
    items = [
        {
            "content": f"Fact {n}.",
            "key": f"k{n}" if n % 2 else None,
            "kind": ["episodic", "semantic", "procedural"][n % 3],
            "namespace": "user:alice" if n % 3 else "",
            "tags": ["a", f"t{n}"],
            "metadata": {"n": n, "nested": {"ok": True}},
            "ttl_seconds": 3600 if n == 4 else None,
        }
        for n in range(6)
    ]
    items = [{key: value for key, value in item.items() if value is not None} for item in items]
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 6}
    write.write(
        tenant.scope, items, principal=policy.AgentPrincipal(label="bulk"), consolidate=True
    )
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 7}
    write.write(
        other_tenant.scope, items, principal=policy.AgentPrincipal(label="bulk"), consolidate=True
    )

    def rows(scope: Scope) -> list[dict]:
        varying = {"id", "org_id", "domain_id", "knowledge_base_id", "created_at", "updated_at"}
        with tenant_scope(scope):
            values = MemoryRecord.objects.order_by("created_at").values()
        return [
            {
                **{key: value for key, value in row.items() if key not in varying},
                "expires_at": row["expires_at"] is not None,
            }
            for row in values
        ]

    assert rows(tenant.scope) == rows(other_tenant.scope)
    assert [record.consolidation for record in stored(tenant.scope)][:1] == ["pending"]
    # Each batch's order survives in newest-first lists (distinct, increasing times).
    created = [record.created_at for record in stored(tenant.scope)]
    assert created == sorted(created) and len(set(created)) == 6


def test_bulk_indexed_records_are_found_by_every_mode_at_once_and_by_their_org_only(
    tenant, other_tenant, committed, settings
):
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5}
    committed(write.write, tenant.scope, handbook("Acme"))
    committed(write.write, other_tenant.scope, handbook("Globex"))
    records = stored(tenant.scope)
    assert {record.status for record in records} == {"indexed"}
    # Small domains: searched exactly, so their vectors go into no HNSW index at all.
    assert all(record.vector_batch is not None for record in records)
    assert_found_by_its_org_only(tenant.scope, "Acme", strategy="exact")
    assert_found_by_its_org_only(other_tenant.scope, "Globex", strategy="exact")
    # The same records through the HNSW plan: the shared index holds none of them, the
    # exact scan of the delta finds them.
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5, "EXACT_SCAN_THRESHOLD": 0}
    assert_found_by_its_org_only(tenant.scope, "Acme", strategy="hnsw+delta")
    assert_found_by_its_org_only(other_tenant.scope, "Globex", strategy="hnsw+delta")


def test_a_plan_compiled_before_a_bulk_store_finds_what_it_stored(
    tenant, committed, settings, monkeypatch
):
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 1, "EXACT_SCAN_THRESHOLD": 0}
    committed(write.write, tenant.scope, [{"content": "Acme keeps the parking rules."}])
    vector_indexes.ensure_tenant_indexes()
    first = query.query(tenant.scope, query="parking", k=3, mode="vector")
    assert first.strategy == "hnsw-tenant" and len(first.items) == 1
    # A bulk store the maintenance task has not caught up with yet.
    hold_maintenance(monkeypatch)
    settings.MEMORYHUB = {
        "TENANT_INDEX_MIN_RECORDS": 1,
        "EXACT_SCAN_THRESHOLD": 0,
        "BULK_MIN_RECORDS": 5,
    }
    committed(write.write, tenant.scope, handbook("Acme"))
    again = query.query(tenant.scope, query="policy on parking desk", k=3, mode="vector")
    assert again.strategy == "hnsw-tenant+delta"
    assert again.items[0].content == "Acme policy on parking: ask the parking desk, form 6."


def _explain(scope: Scope, text: str) -> str:
    from pgvector import Vector

    query.clear_plans()
    plan = query.plan_for(scope, query.QueryRequest.build(query=text, k=3, mode="vector"))
    assert plan.vector is not None
    params = plan.vector.bind({query.VECTOR: Vector(HashingEmbedder().embed_query(text)).to_text()})
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + plan.vector.sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@single_node(OWN_INDEX_SIZES)
def test_a_domains_own_index_is_built_again_over_its_delta_and_swapped_in(
    tenant, other_tenant, committed, settings
):
    mine = vector_indexes.tenant_index_name(MODEL, tenant.scope.org_id, tenant.scope.domain_id)
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 100, "TENANT_INDEX_MIN_RECORDS": 8}
    committed(write.write, tenant.scope, [{"content": f"Acme memo {n}."} for n in range(8)])
    committed(write.write, other_tenant.scope, handbook("Globex"))
    assert vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0)).created == [mine]
    own = vector_indexes.own_index(tenant.scope, MODEL)
    assert own is not None and not own.outdated

    # Bulk-stored after the build: into the domain's delta, not its index nor the shared one.
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5, "TENANT_INDEX_MIN_RECORDS": 8}
    committed(write.write, tenant.scope, handbook("Acme"))
    delta = [record for record in stored(tenant.scope) if record.vector_batch is not None]
    assert len(delta) == len(TOPICS) and all(r.vector_batch > own.covers for r in delta)
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 8, "EXACT_SCAN_THRESHOLD": 0}
    assert_found_by_its_org_only(tenant.scope, "Acme", strategy="hnsw-tenant+delta")

    # Not due yet (the delta is recent and within the rebuild bound), then settled.
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 8}
    assert vector_indexes.ensure_tenant_indexes().rebuilt == []
    assert vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0)).rebuilt == [mine]
    rebuilt = vector_indexes.own_index(tenant.scope, MODEL)
    assert rebuilt is not None and rebuilt.covers >= max(r.vector_batch for r in delta)
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 8, "EXACT_SCAN_THRESHOLD": 0}
    assert_found_by_its_org_only(tenant.scope, "Acme", strategy="hnsw-tenant")
    assert mine in _explain(tenant.scope, "policy on parking desk")
    # The other org's records, stored row by row: in the shared index.
    assert_found_by_its_org_only(other_tenant.scope, "Globex", strategy="hnsw")


@single_node(OWN_INDEX_SIZES)
def test_a_large_bulk_store_asks_for_its_domains_own_index(tenant, committed, settings):
    mine = vector_indexes.tenant_index_name(MODEL, tenant.scope.org_id, tenant.scope.domain_id)
    settings.MEMORYHUB = {
        "BULK_MIN_RECORDS": 5,
        "TENANT_INDEX_MIN_RECORDS": 5,
        "EXACT_SCAN_THRESHOLD": 2,
    }
    # On commit the indexing task stores the batch and sends the maintenance task
    # (eager here): the domain qualifies, its index is built over the batch.
    committed(write.write, tenant.scope, handbook("Acme"))
    assert vector_indexes.has_tenant_indexes()
    own = vector_indexes.own_index(tenant.scope, MODEL)
    assert own is not None
    assert all(record.vector_batch <= own.covers for record in stored(tenant.scope))
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 5, "EXACT_SCAN_THRESHOLD": 0}
    assert_found_by_its_org_only(tenant.scope, "Acme", strategy="hnsw-tenant")
    assert mine in _explain(tenant.scope, "policy on parking desk")


def test_a_delta_of_a_domain_without_its_own_index_is_folded_into_the_shared_index(
    tenant, other_tenant, committed, settings
):
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5}
    committed(write.write, tenant.scope, handbook("Acme"))
    committed(write.write, other_tenant.scope, handbook("Globex"))
    # Small (within EXACT_SCAN_THRESHOLD): left out of every index.
    assert vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0)).folded == {}
    # Too large for the exact scan, and no own index: the shared index takes them in.
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 0, "EXACT_SCAN_THRESHOLD": 3}
    folded = vector_indexes.ensure_tenant_indexes().folded
    scopes = (tenant.scope, other_tenant.scope)
    assert folded == {f"{s.org_id}/{s.domain_id}": len(TOPICS) for s in scopes}
    assert all(record.vector_batch is None for record in stored(tenant.scope))
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 0, "EXACT_SCAN_THRESHOLD": 0}
    assert_found_by_its_org_only(tenant.scope, "Acme", strategy="hnsw")
    assert_found_by_its_org_only(other_tenant.scope, "Globex", strategy="hnsw")


def test_placement_of_a_bulk_store(tenant, other_tenant, settings):
    write.write(tenant.scope, handbook("Acme"))  # pending: placement counts every record
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 100, "EXACT_SCAN_THRESHOLD": 10}
    small = vector_indexes.placement(tenant.scope, MODEL)
    assert small.batch is not None and not small.maintain
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 0, "EXACT_SCAN_THRESHOLD": 3}
    assert vector_indexes.placement(tenant.scope, MODEL) == vector_indexes.Placement(None)
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 5, "EXACT_SCAN_THRESHOLD": 3}
    large = vector_indexes.placement(tenant.scope, MODEL)
    assert large.batch is not None and large.batch > small.batch and large.maintain


def test_a_bulk_write_failing_midway_writes_nothing(tenant, committed, settings, monkeypatch):
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5}
    metadata = MemoryRecord._meta.get_field("metadata")
    streamed = []

    def failing(value, connection):
        streamed.append(value)
        if len(streamed) == 4:
            raise RuntimeError("the connection dropped")
        return value

    monkeypatch.setattr(metadata, "get_db_prep_save", failing)
    with pytest.raises(RuntimeError):
        committed(write.write, tenant.scope, handbook("Acme"))
    assert len(streamed) == 4  # three rows had gone into the COPY
    assert stored(tenant.scope) == []
    with tenant_scope(tenant.scope):
        assert not Observation.objects.exists()


class NaNEmbedder(HashingEmbedder):
    """Fine until the batch's last text: PostgreSQL refuses a NaN in a vector."""

    def embed_documents(self, texts):
        vectors = super().embed_documents(texts)
        vectors[-1] = [float("nan")] * len(vectors[-1])
        return vectors


def test_a_bulk_store_failing_midway_stores_no_vector(tenant, settings):
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5}
    result = write.write(tenant.scope, handbook("Acme"))
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5, "EMBEDDER": "tests.services.test_bulk.NaNEmbedder"}
    from django.db import DataError

    with pytest.raises(DataError):
        indexing.index_records(result.record_ids)
    records = stored(tenant.scope)
    assert {(r.status, r.embedding, r.vector_batch) for r in records} == {("pending", None, None)}
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5}
    assert sorted(indexing.index_records(result.record_ids).indexed) == sorted(result.record_ids)


def test_an_agents_turn_goes_into_its_domains_own_index_only(
    tenant, other_tenant, committed, settings
):
    # The shared index never serves a domain with its own index: a small write's vector
    # goes into the domain's own index only, never into both graphs.
    # Own indexes from 2 records (a domain of one is scanned exactly): Acme gets one.
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 3, "EXACT_SCAN_THRESHOLD": 1}
    committed(write.write, tenant.scope, [{"content": f"Acme memo {n}."} for n in range(3)])
    committed(write.write, other_tenant.scope, [{"content": "Globex memo."}])
    vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0))
    assert vector_indexes.own_index(tenant.scope, MODEL) is not None
    assert vector_indexes.own_index(other_tenant.scope, MODEL) is None
    for scope, org in ((tenant.scope, "Acme"), (other_tenant.scope, "Globex")):
        committed(write.write, scope, [{"content": f"{org} keeps the parking rules."}])
    turns = {
        record.content: record.vector_batch
        for scope in (tenant.scope, other_tenant.scope)
        for record in stored(scope)
        if "parking" in record.content
    }
    assert turns == {
        "Acme keeps the parking rules.": vector_indexes.OWN_INDEX_ONLY,
        "Globex keeps the parking rules.": None,
    }
    mine = found(tenant.scope, "parking rules", "vector")
    assert mine.strategy == "hnsw-tenant"
    assert mine.items[0].content == "Acme keeps the parking rules."
    theirs = found(other_tenant.scope, "parking rules", "vector")
    assert theirs.items[0].content == "Globex keeps the parking rules."
    assert all(item.content.startswith("Globex") for item in theirs.items)


def test_store_vectors_writes_what_it_was_given(tenant):
    result = write.write(tenant.scope, [{"content": "one"}, {"content": "two"}])
    ids = result.record_ids
    vectors = np.eye(2, 384, dtype=np.float32)
    with transaction.atomic():
        bulk.store_vectors(ids, vectors, "test-model", [7, None], org_id=tenant.org.pk)
    by_id = {str(record.pk): record for record in stored(tenant.scope)}
    assert [by_id[pk].vector_batch for pk in ids] == [7, None]
    assert all(by_id[pk].embedding_model == "test-model" for pk in ids)
    assert np.allclose(by_id[ids[0]].embedding, vectors[0])
    assert {by_id[pk].status for pk in ids} == {"indexed"}


def test_a_shared_index_built_before_bulk_stores_is_built_again_without_them(tenant, settings):
    name = vector_indexes.vector_index_name(MODEL)
    with connection.cursor() as cursor:
        cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute(
            f'CREATE INDEX "{name}" ON memoryhub_memoryrecord USING hnsw'
            " ((embedding::vector(384)) vector_cosine_ops)"
            f" WHERE embedding_model = '{MODEL}'"
        )
    vector_indexes.ensure_tenant_indexes()
    assert "vector_batch IS NULL" in (vector_indexes.shared._predicate(name) or "")
    assert vector_indexes.shared._predicate(name + vector_indexes.NEXT_SUFFIX) is None


def _own_index_with_memos(tenant, committed, settings, memos: int) -> str:
    """``tenant``'s domain with ``memos`` records stored row by row and its own index."""
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 1000, "TENANT_INDEX_MIN_RECORDS": memos}
    committed(write.write, tenant.scope, [{"content": f"Acme memo {n}."} for n in range(memos)])
    mine = vector_indexes.tenant_index_name(MODEL, tenant.scope.org_id, tenant.scope.domain_id)
    assert vector_indexes.ensure_tenant_indexes().created == [mine]
    return mine


@single_node(OWN_INDEX_SIZES)
def test_past_its_most_a_delta_takes_no_more_and_vectors_go_into_the_own_index_only(
    tenant, committed, settings, monkeypatch
):
    _own_index_with_memos(tenant, committed, settings, 8)
    asked: list[str] = []
    hold_maintenance(monkeypatch, asked)
    settings.MEMORYHUB = {
        "BULK_MIN_RECORDS": 5,
        "TENANT_INDEX_MIN_RECORDS": 8,
        "EXACT_SCAN_THRESHOLD": 2,
        "BULK_DELTA_MAX": 10,
    }
    # The index covers 8: rebuilt past a delta of 8, which may grow to 16 (twice that)
    # while the rebuild runs (no maintenance runs here), not only to BULK_DELTA_MAX.
    for org in ("Initech", "Hooli", "Globex", "Acme"):
        committed(write.write, tenant.scope, handbook(org))
    batches = [record.vector_batch for record in stored(tenant.scope)]
    assert batches[:8] == [None] * 8  # row by row, before
    own = vector_indexes.own_index(tenant.scope, MODEL)
    assert own is not None
    assert all(batch > own.covers for batch in batches[8:29])  # the delta: 21 >= 16
    assert batches[29:] == [vector_indexes.OWN_INDEX_ONLY] * len(TOPICS)
    # Asked for by each write that found the delta past 8 (the third and the fourth).
    assert asked == ["tenant_indexes"] * 2
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 8, "EXACT_SCAN_THRESHOLD": 0}
    result = found(tenant.scope, "Acme policy on parking desk", "vector")
    assert result.strategy == "hnsw-tenant+delta"
    assert result.items[0].content == "Acme policy on parking: ask the parking desk, form 6."


@single_node(OWN_INDEX_SIZES)
def test_a_load_into_a_domain_with_its_own_index_rebuilds_it_in_bulk_as_it_doubles(
    tenant, other_tenant, committed, settings
):
    # A load larger than BULK_DELTA_MAX: the index is built again each time the delta
    # outgrows it, and no vector goes into it row by row (which runs at a fraction of
    # the bulk rate).
    mine = _own_index_with_memos(tenant, committed, settings, 8)
    settings.MEMORYHUB = {
        "BULK_MIN_RECORDS": 5,
        "TENANT_INDEX_MIN_RECORDS": 8,
        "EXACT_SCAN_THRESHOLD": 2,
        "BULK_DELTA_MAX": 10,
    }
    rebuilt = []
    for org in ("Initech", "Hooli", "Globex", "Umbrella", "Acme"):
        committed(write.write, tenant.scope, handbook(org))
        rebuilt.append(vector_indexes.own_index(tenant.scope, MODEL).covered)
    committed(write.write, other_tenant.scope, handbook("Globex"))
    batches = [record.vector_batch for record in stored(tenant.scope)]
    assert vector_indexes.OWN_INDEX_ONLY not in batches
    # Rebuilt (eagerly here) after the write that found the delta (14) past what the
    # index covered (8): over 29 records, in one build, where 21 went in row by row.
    assert rebuilt == [8, 8, 29, 29, 29]
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 8, "EXACT_SCAN_THRESHOLD": 0}
    result = found(tenant.scope, "Acme policy on parking desk", "vector")
    assert result.strategy == "hnsw-tenant+delta"
    assert "policy on parking" in result.items[0].content
    assert not any(item.content.startswith("Globex") for item in result.items)
    assert mine in _explain(tenant.scope, "policy on parking desk")


def test_a_domain_outgrowing_the_exact_scan_takes_its_delta_into_the_shared_index_at_once(
    tenant, other_tenant, committed, settings, monkeypatch
):
    # No index of its own: the batch that takes the domain past the exact scan folds the
    # delta it gathered while small into the shared index, in the indexing worker (not
    # left for one maintenance run after the load, which many such domains would swamp).
    hold_maintenance(monkeypatch)
    settings.MEMORYHUB = {
        "BULK_MIN_RECORDS": 5,
        "TENANT_INDEX_MIN_RECORDS": 0,
        "EXACT_SCAN_THRESHOLD": 10,
    }
    committed(write.write, tenant.scope, handbook("Acme"))
    committed(write.write, other_tenant.scope, handbook("Globex"))
    assert all(record.vector_batch is not None for record in stored(tenant.scope))
    committed(write.write, tenant.scope, handbook("Initech"))  # 14 > 10
    assert [record.vector_batch for record in stored(tenant.scope)] == [None] * 14
    # Another org's small domain keeps its delta.
    assert all(record.vector_batch is not None for record in stored(other_tenant.scope))
    mine = found(tenant.scope, "Acme policy on parking desk", "vector")
    assert mine.strategy == "hnsw"
    assert "policy on parking" in mine.items[0].content
    assert all(item.content.startswith(("Acme", "Initech")) for item in mine.items)
    assert_found_by_its_org_only(other_tenant.scope, "Globex", strategy="exact")


def test_a_fold_waits_for_another_fold_of_the_same_domain_and_a_worker_leaves_it(
    tenant, other_tenant, committed, settings
):
    from django.db import OperationalError

    from tests.programs import second_connection

    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5, "TENANT_INDEX_MIN_RECORDS": 0}
    committed(write.write, tenant.scope, handbook("Acme"))
    committed(write.write, other_tenant.scope, handbook("Globex"))
    with second_connection() as other:
        other.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)",
            [vector_indexes.FOLD_LOCK_CLASS, tenant.scope.domain_id],
        )
        with transaction.atomic():
            assert vector_indexes.fold_delta(tenant.scope, MODEL) == 0  # the other one folds
            assert vector_indexes.fold_delta(other_tenant.scope, MODEL) == len(TOPICS)
            transaction.set_rollback(True)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '200ms'")
            with pytest.raises(OperationalError, match="lock timeout"):
                vector_indexes.maintenance._fold(
                    (tenant.scope.org_id, tenant.scope.domain_id), MODEL
                )
        other.rollback()
    assert vector_indexes.maintenance._fold(
        (tenant.scope.org_id, tenant.scope.domain_id), MODEL
    ) == len(TOPICS)


@single_node(OWN_INDEX_SIZES)
def test_a_settled_delta_small_beside_its_index_is_inserted_into_it_row_by_row(
    tenant, committed, settings
):
    mine = _own_index_with_memos(tenant, committed, settings, 60)
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5, "TENANT_INDEX_MIN_RECORDS": 60}
    committed(write.write, tenant.scope, handbook("Acme"))  # 7: less than 60 / 6
    changes = vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0))
    assert changes.rebuilt == []
    assert changes.folded == {f"{tenant.scope.org_id}/{tenant.scope.domain_id}": len(TOPICS)}
    batches = {record.vector_batch for record in stored(tenant.scope)}
    assert batches == {None, vector_indexes.OWN_INDEX_ONLY}
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 60, "EXACT_SCAN_THRESHOLD": 0}
    assert_found_by_its_org_only(tenant.scope, "Acme", strategy="hnsw-tenant")
    assert mine in _explain(tenant.scope, "policy on parking desk")


def test_a_bulk_re_embed_is_searchable_with_the_new_model_at_once(
    tenant, other_tenant, committed, settings
):
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5}
    committed(write.write, tenant.scope, handbook("Acme"))
    committed(write.write, other_tenant.scope, handbook("Globex"))
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5, "EMBEDDER_OPTIONS": {"dimensions": 64}}
    with tenant_scope(tenant.scope):
        scheduled = committed(indexing.reembed, MemoryRecord.objects.all())
    assert scheduled == len(TOPICS)
    records = stored(tenant.scope)
    assert {record.embedding_model for record in records} == {"hashing-64-c35"}
    assert all(record.vector_batch is not None for record in records)
    assert_found_by_its_org_only(tenant.scope, "Acme", strategy="exact")
    settings.MEMORYHUB = {"EMBEDDER_OPTIONS": {"dimensions": 64}, "EXACT_SCAN_THRESHOLD": 0}
    assert_found_by_its_org_only(tenant.scope, "Acme", strategy="hnsw+delta")


def test_ensure_indexes_after_a_bulk_load_settles_it_at_once(tenant, committed, settings):
    from io import StringIO

    from django.core.management import call_command

    mine = vector_indexes.tenant_index_name(MODEL, tenant.scope.org_id, tenant.scope.domain_id)
    settings.MEMORYHUB = {
        "BULK_MIN_RECORDS": 5,
        "TENANT_INDEX_MIN_RECORDS": 5,
        "EXACT_SCAN_THRESHOLD": 2,
    }
    committed(write.write, tenant.scope, handbook("Acme"))  # its own index, built over it
    committed(write.write, tenant.scope, handbook("Initech"))  # its delta
    assert vector_indexes.own_index(tenant.scope, MODEL) is not None
    out = StringIO()
    call_command("memoryhub_ensure_indexes", stdout=out)
    assert f"Tenant HNSW index {mine}: rebuilt." in out.getvalue()
    own = vector_indexes.own_index(tenant.scope, MODEL)
    assert own is not None
    assert all(record.vector_batch <= own.covers for record in stored(tenant.scope))


def test_an_own_index_kept_below_the_bound_still_takes_its_delta_in(tenant, committed, settings):
    mine = _own_index_with_memos(tenant, committed, settings, 8)
    # The bound moved up (a larger table): the domain is no longer wanted, but kept
    # (at least half the bound), and its bulk stores still go into its delta.
    settings.MEMORYHUB = {"BULK_MIN_RECORDS": 5, "TENANT_INDEX_MIN_RECORDS": 20}
    committed(write.write, tenant.scope, handbook("Acme"))
    changes = vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0))
    assert (changes.dropped, changes.rebuilt) == ([], [mine])
    own = vector_indexes.own_index(tenant.scope, MODEL)
    assert own is not None
    assert all(r.vector_batch is None or r.vector_batch <= own.covers for r in stored(tenant.scope))


@single_node(OWN_INDEX_SIZES)
def test_a_vector_query_searches_a_domains_own_index_harder_than_a_hybrid_leg(
    tenant, other_tenant, committed, settings
):
    # A vector query's answer is the vector leg: its own index is searched with an
    # ef_search of at least 100 (plans.MIN_EF_SEARCH_VECTOR: more recall than its share
    # would give); a hybrid query's vector leg keeps pgvector's 40 as least.
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 8, "EXACT_SCAN_THRESHOLD": 1}
    committed(write.write, tenant.scope, [{"content": f"Acme memo {n}."} for n in range(8)])
    committed(
        write.write, other_tenant.scope, [{"content": f"Globex memo {n}."} for n in range(40)]
    )
    vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0))
    query.clear_plans()
    ef = {
        mode: query.plan_for(tenant.scope, query.QueryRequest.build(query="x", k=3, mode=mode))
        for mode in ("vector", "hybrid")
    }
    assert ef["vector"].strategy == "hnsw-tenant"
    assert ef["vector"].settings["hnsw.ef_search"] == "100"
    assert ef["hybrid"].settings["hnsw.ef_search"] == "40"
    settings.MEMORYHUB = {**settings.MEMORYHUB, "HNSW_EF_SEARCH": 50}  # never above it
    query.clear_plans()
    plan = query.plan_for(tenant.scope, query.QueryRequest.build(query="x", k=3, mode="vector"))
    assert plan.settings["hnsw.ef_search"] == "50"


@single_node(OWN_INDEX_SIZES)
def test_a_vector_query_searches_a_large_own_index_harder_still(
    tenant, other_tenant, committed, settings, monkeypatch
):
    # Recall at a fixed ef_search falls as the graph grows: past LARGE_OWN_INDEX_RECORDS
    # a vector query takes at least 200. Only the domain whose own index is that large:
    # the other org's stays at 100.
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 8, "EXACT_SCAN_THRESHOLD": 1}
    committed(write.write, tenant.scope, [{"content": f"Acme memo {n}."} for n in range(30)])
    committed(
        write.write, other_tenant.scope, [{"content": f"Globex memo {n}."} for n in range(10)]
    )
    vector_indexes.ensure_tenant_indexes(settle_after=timedelta(0))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryhub_memoryrecord")
    monkeypatch.setattr(plans, "LARGE_OWN_INDEX_RECORDS", 20)
    query.clear_plans()

    def ef(scope: Any, mode: str) -> str:
        plan = query.plan_for(scope, query.QueryRequest.build(query="x", k=3, mode=mode))
        assert plan.strategy.endswith("hnsw-tenant")
        return plan.settings["hnsw.ef_search"]

    assert ef(tenant.scope, "vector") == "200"
    assert ef(other_tenant.scope, "vector") == "100"
    # A hybrid query's vector leg too (with its share's ef_search, a large tenant answers
    # hybrid questions worse than vector ones): at least 100 there, pgvector's 40
    # elsewhere. With ef_search 120 their shares give 90 and 30.
    settings.MEMORYHUB = {**settings.MEMORYHUB, "HNSW_EF_SEARCH": 120}
    query.clear_plans()
    assert ef(tenant.scope, "hybrid") == "100"
    assert ef(other_tenant.scope, "hybrid") == "40"
