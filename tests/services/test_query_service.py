"""The query service: modes, filters, plans, dedupe, cache and tenant isolation."""

from __future__ import annotations

import random
from datetime import timedelta

import numpy as np
import pytest
from django.db import connection, transaction
from django.utils import timezone

from memoryhub import cache, policy
from memoryhub.embedders import HashingEmbedder
from memoryhub.embedders.base import DEFAULT_HYBRID_VECTOR_WEIGHT
from memoryhub.exceptions import UnknownSource, ValidationFailed
from memoryhub.models import MemoryRecord, Observation
from memoryhub.scope import Scope, tenant_scope
from memoryhub.services import knowledge_bases, query, vector_indexes, write
from memoryhub.services.query import QueryRequest, execution, fusion, plans, render_grounding
from tests.cluster import ONE_MESSAGE, ONE_SERVERS_PLAN, single_node
from tests.factories import DomainFactory, OrgFactory

pytestmark = pytest.mark.django_db

HANDBOOK = [
    "Refunds are issued to the original payment method within 5 business days.",
    "Orders over $500 need a manager's approval before they ship.",
    "Store credit never expires.",
    "Deploys freeze on Fridays.",
]


@pytest.fixture
def handbook(tenant, committed):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    committed(
        write.write,
        tenant.scope,
        [{"content": text, "metadata": {"n": i}} for i, text in enumerate(HANDBOOK)],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_each_mode_finds_the_relevant_record_first(tenant, handbook, mode):
    result = query.query(tenant.scope, query="how long do refunds take", k=3, mode=mode)
    assert result.items[0].content == HANDBOOK[0]
    assert result.items[0].source == "handbook"
    scores = [item.score for item in result.items]
    assert scores == sorted(scores, reverse=True)


def test_vector_scores_are_cosine_similarities(tenant, handbook):
    [item] = query.query(tenant.scope, query=HANDBOOK[2], k=1, mode="vector").items
    assert item.content == HANDBOOK[2]
    assert item.score == pytest.approx(1.0, abs=1e-5)
    embedder = HashingEmbedder()
    others = query.query(tenant.scope, query="store credit", k=4, mode="vector").items
    for other in others:
        expected = float(
            np.dot(embedder.embed_query("store credit"), embedder.embed_query(other.content))
        )
        assert other.score == pytest.approx(expected, abs=1e-5)


def test_hybrid_scores_are_fused_in_zero_to_one_and_explained(tenant, handbook):
    result = query.query(tenant.scope, query="refunds", k=4, explain=True)
    top = result.items[0]
    assert top.content == HANDBOOK[0]
    assert all(0.0 <= item.score <= 1.0 for item in result.items)
    legs = result.legs[top.id]
    assert legs["vector"]["rank"] == 1 and legs["keyword"]["rank"] == 1
    assert legs["keyword"]["score"] > 0
    # Every item is explained; one the keyword leg did not find says so.
    assert set(result.legs) == {item.id for item in result.items}
    assert any(result.legs[item.id]["keyword"] is None for item in result.items)
    assert query.query(tenant.scope, query="refunds", k=4).legs == {}


def test_a_weak_leg_cannot_push_a_strong_legs_hits_out():
    # The keyword leg is sure of a and b; the vector leg misses them and ranks the
    # keyword leg's weak matches first. Equal-weight RRF put those weak matches first.
    keyword = [("a", 0.9), ("b", 0.8)] + [(f"k{n}", 0.05 - n / 1000) for n in range(30)]
    vector = [(f"k{n}", 0.31 - n / 1000) for n in range(10)]
    vector += [(f"v{n}", 0.2 - n / 1000) for n in range(30)]
    for weight in (HashingEmbedder.hybrid_vector_weight, DEFAULT_HYBRID_VECTOR_WEIGHT):
        assert [pk for pk, _ in fusion.fuse(vector, keyword, weight)[:2]] == ["a", "b"]
    rrf = [pk for pk, _ in fusion.weighted_rrf(vector, keyword, 1, 1)]
    assert rrf.index("a") > 5


def test_a_lone_leg_keeps_its_order():
    ranking = [("a", 0.9), ("b", 0.5), ("c", 0.1)]
    assert [pk for pk, _ in fusion.fuse(ranking, [], 0.3)] == ["a", "b", "c"]
    assert [pk for pk, _ in fusion.fuse([], ranking, 0.7)] == ["a", "b", "c"]


def test_a_leg_that_filled_its_depth_with_one_score_gives_its_weight_away():
    # Every candidate of the keyword leg ties (its only matching word is a name all of
    # a speaker's turns hold): an arbitrary 40 of them, not a ranking.
    keyword = [(f"k{n}", 0.2) for n in range(40)]
    vector = [("answer", 0.7)] + [(f"k{n}", 0.5 - n / 100) for n in range(39)]
    assert fusion.fuse(vector, keyword, 0.4, depth=40)[0][0] == "answer"
    assert fusion.fuse(vector, keyword, 0.4, depth=40) == fusion.fuse(vector, [], 0.4)
    # Without the depth, or with fewer ties than the depth (every match was found), the
    # leg's candidates count: the ties then say "holds the word", which is information.
    assert fusion.fuse(vector, keyword, 0.4)[0][0] == "k0"
    assert fusion.fuse(vector, keyword[:12], 0.4, depth=40)[0][0] == "k0"
    # Alone, the sample is all there is.
    assert {pk for pk, _ in fusion.fuse([], keyword, 0.4, depth=40)} == {pk for pk, _ in keyword}


def test_the_query_service_ignores_a_keyword_leg_of_equal_matches(tenant, other_tenant, committed):
    # 45 records hold the question's one known word once (equal ranks); the answer holds
    # none of its words, only word pieces the vectors see.
    filler = [f"plover {n} seen at the lake by the ferry while walking dogs" for n in range(45)]
    answer = "guitaristas"
    written = {
        scope: committed(write.write, scope, [{"content": text} for text in [*filler, answer]])
        for scope in (tenant.scope, other_tenant.scope)
    }
    question = "which plover guitarist"
    found = query.query(tenant.scope, query=question, k=10, explain=True)
    vector = query.query(tenant.scope, query=question, k=10, mode="vector")
    keyword = query.query(tenant.scope, query=question, k=10, mode="keyword")
    assert len({item.score for item in keyword.items}) == 1
    assert answer not in [item.content for item in keyword.items]
    assert vector.items[0].content == answer
    assert found.items[0].content == answer
    others = {str(record.id) for record in written[other_tenant.scope].records}
    assert not others & {str(item.id) for item in found.items}


def test_a_domains_hybrid_weight_decides_and_stays_in_its_domain(tenant, other_tenant, committed):
    # Short texts close to the query (vector) and long ones repeating its words (keyword).
    texts = ["Refund code3.", "Refund code3 today.", "Refund code3, please."]
    texts += [f"{'refund code3 ' * (n + 4)} and then words about shipping {n}" for n in range(3)]
    for scope in (tenant.scope, other_tenant.scope):
        committed(write.write, scope, [{"content": text} for text in texts])
    asked = {"query": "refund code3", "k": 6}
    tops = {
        leg: query.query(tenant.scope, mode=leg, **asked).items[0].id
        for leg in ("vector", "keyword")
    }
    assert tops["vector"] != tops["keyword"]
    other_before = [i.id for i in query.query(other_tenant.scope, **asked).items]
    for weight, leg in ((1.0, "vector"), (0.0, "keyword")):
        tenant.domain.hybrid_vector_weight = weight
        committed(tenant.domain.save)
        # The saved weight applies at once (no stale cached result or plan): hybrid
        # follows that leg alone.
        result = query.query(tenant.scope, explain=True, **asked)
        assert result.items[0].id == tops[leg]
        scores = [result.legs[item.id][leg]["score"] for item in result.items]
        assert scores == sorted(scores, reverse=True)
    assert [i.id for i in query.query(other_tenant.scope, **asked).items] == other_before


def test_hybrid_weight_setting_and_embedder_default(tenant, settings):
    from memoryhub.services.query.plans import hybrid_weight

    assert hybrid_weight(tenant.scope) == HashingEmbedder.hybrid_vector_weight
    settings.MEMORYHUB = {**settings.MEMORYHUB, "HYBRID_VECTOR_WEIGHT": 0.8}
    assert hybrid_weight(tenant.scope) == 0.8
    tenant.domain.hybrid_vector_weight = 0.1
    tenant.domain.save()
    assert hybrid_weight(tenant.scope) == 0.1


def test_items_carry_record_fields(tenant, committed):
    committed(
        write.write,
        tenant.scope,
        [
            {
                "content": "Alice prefers EUR.",
                "key": "currency",
                "namespace": "user:alice",
                "kind": "semantic",
                "tags": ["pref"],
                "metadata": {"channel": "chat"},
            }
        ],
    )
    [item] = query.query(tenant.scope, query="currency EUR", namespaces=["user:alice"]).items
    assert (item.key, item.kind, item.namespace, item.tags) == (
        "currency",
        "semantic",
        "user:alice",
        ("pref",),
    )
    assert item.metadata == {"channel": "chat"}
    assert item.created_at is not None
    assert item.to_dict()["id"] == item.id


def test_keyword_mode_finds_records_before_they_are_embedded(tenant):
    write.write(tenant.scope, [{"content": "The staging database is rebuilt nightly."}])
    with tenant_scope(tenant.scope):
        assert MemoryRecord.objects.get().status == "pending"  # no commit: not indexed
    assert query.query(tenant.scope, query="staging database", mode="vector").items == []
    [item] = query.query(tenant.scope, query="staging database", mode="keyword").items
    assert item.content.startswith("The staging database")
    [hybrid] = query.query(tenant.scope, query="staging database").items
    assert hybrid.content == item.content


def test_expired_records_never_return(tenant, committed):
    committed(
        write.write,
        tenant.scope,
        [{"content": "Temporary code 1234", "ttl_seconds": 60}, {"content": "Permanent code 5678"}],
    )
    MemoryRecord.unscoped.filter(content__startswith="Temporary").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    for mode in ("vector", "keyword", "hybrid"):
        contents = [i.content for i in query.query(tenant.scope, query="code", mode=mode).items]
        assert contents == ["Permanent code 5678"], mode


def test_filters_namespaces_kinds_tags_sources_and_where(tenant, committed):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "notes")
    committed(
        write.write,
        tenant.scope,
        [
            {"content": "alpha shared", "tags": ["x"], "metadata": {"tier": "public"}},
            {"content": "alpha alice", "namespace": "user:alice", "kind": "episodic"},
            {"content": "alpha internal", "tags": ["x", "y"], "metadata": {"tier": "internal"}},
        ],
    )
    committed(write.write, tenant.scope, [{"content": "alpha note"}], sources=["notes"])

    def contents(**filters):
        return sorted(
            i.content for i in query.query(tenant.scope, query="alpha", k=10, **filters).items
        )

    assert contents() == ["alpha internal", "alpha note", "alpha shared"]
    assert contents(namespaces=["user:alice"]) == ["alpha alice"]
    assert contents(namespaces=["", "user:alice"], kinds=["episodic"]) == ["alpha alice"]
    assert contents(tags=["x", "y"]) == ["alpha internal"]
    assert contents(sources=["notes"]) == ["alpha note"]
    assert contents(where={"tier": "public"}) == ["alpha shared"]
    assert contents(where={"tier": {"$ne": "public"}}, sources=["memory"]) == ["alpha internal"]


def test_min_score_cuts_in_the_modes_scale(tenant, handbook):
    assert len(query.query(tenant.scope, query="refunds", k=4, mode="vector").items) == 4
    high = query.query(tenant.scope, query="refunds", k=4, mode="vector", min_score=0.2).items
    assert [i.content for i in high] == [HANDBOOK[0]]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "x" * 4001}, "query"),
        ({"query": "ok", "k": 0}, "k"),
        ({"query": "ok", "k": 101}, "k"),
        ({"query": "ok", "k": "5"}, "k"),
        ({"query": "ok", "mode": "fuzzy"}, "mode"),
        ({"query": "ok", "min_score": 2}, "min_score"),
        ({"query": "ok", "namespaces": "user:a"}, "namespaces"),
        ({"query": "ok", "kinds": ["dream"]}, "kinds[0]"),
        ({"query": "ok", "where": {"a": {"$bad": 1}}}, "where.a.$bad"),
        ({"query": "ok", "colour": "red"}, "colour"),
    ],
)
def test_invalid_requests_name_the_field(tenant, raw, field):
    with pytest.raises(ValidationFailed) as raised:
        query.query(tenant.scope, **raw)
    assert field in raised.value.errors


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (7, "must be a string."),
        ("user:\x00", "must not contain NUL characters."),
        ("n" * 256, "must be at most 255 characters."),
    ],
)
def test_a_bad_filter_value_is_named_with_what_is_wrong(tenant, value, message):
    with pytest.raises(ValidationFailed) as raised:
        query.query(tenant.scope, query="ok", namespaces=["", value])
    assert raised.value.errors == {"namespaces[1]": [message]}


def test_unknown_source_is_an_error(tenant, other_tenant, handbook):
    knowledge_bases.ensure_knowledge_base(other_tenant.scope, "secrets")
    with pytest.raises(UnknownSource):
        query.query(tenant.scope, query="x", sources=["secrets"])


def test_duplicates_across_sources_merge_with_stamps_and_one_observation(tenant, committed):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "faq")
    text = "Store credit never expires."
    committed(write.write, tenant.scope, [{"content": text}])
    committed(
        write.write, tenant.scope, [{"content": "  Store credit never expires.\n"}], sources=["faq"]
    )
    items = query.query(tenant.scope, query="store credit", k=5).items
    [merged] = [i for i in items if i.content.strip() == text]
    assert merged.dedupe_count == 2
    assert sorted(merged.dedupe_sources) == ["faq", "memory"]
    assert len(items) == 1
    with tenant_scope(tenant.scope):
        [observation] = Observation.objects.filter(kind="query.deduplicated")
    assert observation.count == 1
    assert observation.payload["sources"] == ["faq", "memory"]


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_duplicates_that_merge_away_never_leave_a_query_short_of_k(tenant, committed, mode):
    # Ten keyed copies of one greeting rank first for the query; they merge into one
    # item, and the k distinct answers behind them still come back.
    greetings = [{"content": "Ana: hey, how are you?", "key": f"g{n}"} for n in range(10)]
    answers = [
        {"content": f"Ana: how are the {pet}s?", "key": f"a{n}"}
        for n, pet in enumerate(["cat", "dog", "bird", "fish", "frog"])
    ]
    committed(write.write, tenant.scope, greetings + answers)
    items = query.query(tenant.scope, query="Ana: hey, how are you?", k=5, mode=mode).items
    assert len(items) == 5
    assert items[0].dedupe_count == 10


def test_render_grounding_is_the_seed_block_and_none_when_empty(tenant, handbook):
    items = query.query(tenant.scope, query="refunds", k=1).items
    assert render_grounding(items) == (
        "Relevant context:\n[handbook] Refunds are issued to the original payment method "
        "within 5 business days."
    )
    assert render_grounding([]) is None
    assert render_grounding(items, format=lambda xs: "") is None
    custom = render_grounding(items, format=lambda xs: "\n".join(f"- {i.content}" for i in xs))
    assert custom.startswith("Relevant context:\n- Refunds")


# --- cache ------------------------------------------------------------------------------


def test_cache_answers_repeat_queries_and_any_write_invalidates(tenant, handbook, committed):
    first = query.query(tenant.scope, query="refunds", k=2)
    again = query.query(tenant.scope, query="refunds", k=2)
    assert not first.cached
    assert again.cached
    assert again.items == first.items
    reordered = QueryRequest.build(query="refunds", k=2, namespaces=[""], sources=None)
    assert query.query(tenant.scope, reordered).cached
    committed(write.write, tenant.scope, [{"content": "Refunds for gift cards are not possible."}])
    fresh = query.query(tenant.scope, query="refunds", k=2)
    assert not fresh.cached
    assert "gift cards" in " ".join(i.content for i in fresh.items)


def test_a_cached_answer_from_while_a_record_was_pending_is_not_served_once_it_is_indexed(
    tenant, other_tenant, committed
):
    from memoryhub.services import indexing

    written = []
    for scope in (tenant.scope, other_tenant.scope):
        # Written in this transaction, its indexing not run: pending.
        written.append(write.write(scope, [{"content": "Refunds take five days."}]).records[0])
    # The vector leg finds only indexed records.
    assert query.query(tenant.scope, query="refunds five days", mode="vector").items == []
    assert query.query(tenant.scope, query="refunds five days", mode="vector").cached
    committed(indexing.index_records, [written[0].id])
    fresh = query.query(tenant.scope, query="refunds five days", mode="vector")
    assert not fresh.cached
    assert [item.id for item in fresh.items] == [written[0].id]
    # The other org's record is still pending, and never answers this org.
    assert query.query(other_tenant.scope, query="refunds five days", mode="vector").items == []


def test_a_tenants_cache_entry_never_answers_another_tenant(tenant, other_tenant, committed):
    committed(write.write, tenant.scope, [{"content": "Acme secret formula"}])
    assert query.query(tenant.scope, query="secret formula").items
    other = query.query(other_tenant.scope, query="secret formula")
    assert not other.cached
    assert other.items == []
    assert cache.query_key(tenant.scope, {"q": 1}) != cache.query_key(other_tenant.scope, {"q": 1})


def test_tenant_isolation_of_the_service(tenant, other_tenant, committed):
    committed(write.write, tenant.scope, [{"content": "acme refunds policy"}])
    committed(write.write, other_tenant.scope, [{"content": "globex refunds policy"}])
    for mode in ("vector", "keyword", "hybrid"):
        mine = [
            i.content for i in query.query(tenant.scope, query="refunds policy", mode=mode).items
        ]
        assert mine == ["acme refunds policy"], mode


def test_compiled_plans_are_reused_per_shape_and_rebuilt_after_a_write(
    tenant, other_tenant, handbook, committed, monkeypatch
):
    from django.test.utils import CaptureQueriesContext

    query.clear_plans()
    first = query.query(tenant.scope, query="refunds", k=1, mode="hybrid")
    assert len(plans._PLANS) == 1
    # Same shape, other words: the compiled plan is reused (no count, no KB lookup), and
    # the slots carry this query's vector and words, not the first one's.
    reads = []
    real_generation = cache.generation
    monkeypatch.setattr(
        cache, "generation", lambda scope: reads.append(1) or real_generation(scope)
    )
    with CaptureQueriesContext(connection) as statements:
        second = query.query(tenant.scope, query="manager approval orders", k=1, mode="hybrid")
    monkeypatch.undo()
    assert reads == [1]  # one cache read of the generation for the key and the plan
    assert len(plans._PLANS) == 1
    sent = [q["sql"] for q in statements if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert len(sent) == 2 and all("ORDER BY" in sql for sql in sent)  # the two legs only
    assert first.items[0].content == HANDBOOK[0]
    assert second.items[0].content == HANDBOOK[1]
    # Another shape (k, mode, filters) or another tenant gets its own plan.
    query.query(tenant.scope, query="refunds", k=2, mode="hybrid")
    assert query.query(other_tenant.scope, query="refunds", k=1, mode="hybrid").items == []
    assert len(plans._PLANS) == 3

    # Expiry is the server's now, when the statement runs: a reused plan does not keep an
    # expired record (the update bypasses the service, so nothing is invalidated).
    MemoryRecord.unscoped.filter(content=HANDBOOK[0]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    later = query.query(tenant.scope, query="refunds policy", k=1, mode="hybrid")
    assert HANDBOOK[0] not in [item.content for item in later.items]
    assert len(plans._PLANS) == 3

    # A write moves the domain's generation on: the next query compiles afresh.
    committed(write.write, tenant.scope, [{"content": "Refunds for gift cards are not possible."}])
    fresh = query.query(tenant.scope, query="refunds gift cards", k=1, mode="hybrid")
    assert len(plans._PLANS) == 4
    assert fresh.items[0].content.startswith("Refunds for gift cards")


def test_a_query_without_words_sends_no_keyword_leg_through_a_reused_plan(tenant, handbook):
    words = query.query(tenant.scope, query="refunds", k=2, mode="keyword")
    assert words.items[0].content == HANDBOOK[0]
    assert len(plans._PLANS) == 1
    assert query.query(tenant.scope, query="?!", k=2, mode="keyword").items == []
    assert len(plans._PLANS) == 1


# --- plans: exact scan for small scopes, HNSW with iterative scan for large ones -------------


def test_large_scope_uses_the_hnsw_index(tenant, handbook, settings):
    settings.MEMORYHUB = {"EXACT_SCAN_THRESHOLD": 0}
    result = query.query(tenant.scope, query="refunds", k=2, mode="vector")
    assert result.strategy == "hnsw"
    assert result.items[0].content == HANDBOOK[0]
    embedder = HashingEmbedder()
    from django.db.models.functions import Cast
    from pgvector.django import CosineDistance, VectorField

    with tenant_scope(tenant.scope):
        # The shared index holds the vectors stored row by row (vector_batch null).
        ranked = (
            MemoryRecord.objects.filter(
                embedding_model=embedder.name, status="indexed", vector_batch__isnull=True
            )
            .alias(
                distance=CosineDistance(
                    Cast("embedding", VectorField(dimensions=384)), embedder.embed_query("refunds")
                )
            )
            .order_by("distance")[:2]
        )
        with transaction.atomic(), connection.cursor() as cursor:
            # Four rows: make the planner show whether the index *can* serve this ORDER BY.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
            plan = ranked.explain()
    assert "memoryhub_hnsw_hashing_384" in plan
    small = query.query(tenant.scope, query="refundz", k=2, mode="vector")
    assert small.strategy == "hnsw"
    settings.MEMORYHUB = {}
    assert query.query(tenant.scope, query="refundy", k=2, mode="vector").strategy == "exact"


def _explain_vector_leg(scope: Scope, text: str) -> str:
    """The plan PostgreSQL picks for the service's own vector statement."""
    from pgvector import Vector

    plan = query.plan_for(scope, QueryRequest.build(query=text, k=2, mode="vector"))
    assert plan.vector is not None
    params = plan.vector.bind({query.VECTOR: Vector(HashingEmbedder().embed_query(text)).to_text()})
    with transaction.atomic(), connection.cursor() as cursor:
        # A handful of rows: make the planner show which index it would use at scale.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + plan.vector.sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@single_node(ONE_SERVERS_PLAN)
def test_a_large_domain_gets_its_own_hnsw_index_and_only_its_queries_use_it(
    tenant, other_tenant, handbook, committed, settings
):

    def maintain(min_records: int) -> vector_indexes.TenantIndexChanges:
        # EXACT_SCAN_THRESHOLD 100 while maintaining: the share rule stays out of it.
        settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": min_records, "EXACT_SCAN_THRESHOLD": 100}
        changes = vector_indexes.ensure_tenant_indexes()
        settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": min_records, "EXACT_SCAN_THRESHOLD": 0}
        return changes

    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 4, "EXACT_SCAN_THRESHOLD": 0}
    committed(write.write, other_tenant.scope, [{"content": "Globex refunds take a month."}])
    model = HashingEmbedder().name
    mine = vector_indexes.tenant_index_name(model, tenant.scope.org_id, tenant.scope.domain_id)
    assert query.query(tenant.scope, query="refunds", k=2, mode="vector").strategy == "hnsw"

    assert maintain(4).created == [mine]  # four records: the other tenant's one is not enough
    assert maintain(4).created == []  # already there
    assert mine in _explain_vector_leg(tenant.scope, "refunds")
    assert mine not in _explain_vector_leg(other_tenant.scope, "refunds")
    assert "memoryhub_hnsw_hashing" in _explain_vector_leg(other_tenant.scope, "refunds")

    # Building it moved the domain's generation on: the next query plans with it.
    result = query.query(tenant.scope, query="refunds", k=2, mode="vector")
    assert result.strategy == "hnsw-tenant"
    assert result.items[0].content == HANDBOOK[0]
    assert all(item.content in HANDBOOK for item in result.items)
    other = query.query(other_tenant.scope, query="refunds", k=2, mode="vector")
    assert other.strategy == "hnsw"
    assert [item.content for item in other.items] == ["Globex refunds take a month."]

    # A domain under half the minimum loses it (hysteresis: at half it keeps it).
    assert maintain(8).dropped == []
    assert maintain(10).dropped == [mine]
    assert mine not in _explain_vector_leg(tenant.scope, "refunds")
    assert query.query(tenant.scope, query="refunds", k=2, mode="vector").strategy == "hnsw"


def test_a_domain_with_a_large_share_of_a_small_table_gets_its_own_index(
    tenant, other_tenant, handbook, committed, settings
):

    committed(write.write, other_tenant.scope, [{"content": "Globex refunds take a month."}])
    model = HashingEmbedder().name
    mine = vector_indexes.tenant_index_name(model, tenant.scope.org_id, tenant.scope.domain_id)
    # 4 of 5 records, more than EXACT_SCAN_THRESHOLD: far from the minimum, but its share
    # makes a filtered search of the shared index costly. The other tenant's one record
    # is scanned exactly: no index.
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 100, "EXACT_SCAN_THRESHOLD": 2}
    assert vector_indexes.ensure_tenant_indexes().created == [mine]
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 100, "EXACT_SCAN_THRESHOLD": 4}
    assert vector_indexes.ensure_tenant_indexes().dropped == []  # 4 >= half of 5: kept


def test_tenant_index_maintenance_never_touches_a_shared_index_and_runs_once_at_a_time(
    tenant, handbook, settings
):
    from tests.programs import second_connection

    # Another process maintaining them: this run does nothing and says so.
    with second_connection(autocommit=True) as other:
        # (First: inside the test's transaction a run holds the lock until its end.)
        other.execute("SELECT pg_advisory_lock(hashtext('memoryhub tenant indexes'))")
        busy = vector_indexes.ensure_tenant_indexes(min_records=4)
    assert busy.busy and busy.created == []

    # A model whose shared index name starts like a tenant index's once did.
    model = "text-embedding-3-small"
    shared, _ = vector_indexes.ensure_vector_index(model, 384)
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 0}
    assert vector_indexes.ensure_tenant_indexes(model, 384).dropped == []
    assert not vector_indexes.has_tenant_indexes()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_class WHERE relname = %s", [shared])
        assert cursor.fetchone() == (1,)

    assert vector_indexes.ensure_tenant_indexes(min_records=4).created


@single_node(ONE_SERVERS_PLAN)
def test_the_sweeper_builds_tenant_indexes_and_disabling_drops_them(
    tenant, handbook, committed, settings
):
    from memoryhub import tasks

    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 4, "EXACT_SCAN_THRESHOLD": 0}
    mine = vector_indexes.tenant_index_name(
        HashingEmbedder().name, tenant.scope.org_id, tenant.scope.domain_id
    )
    committed(tasks.sweep)
    assert vector_indexes.has_tenant_indexes()
    assert mine in _explain_vector_leg(tenant.scope, "refunds")
    settings.MEMORYHUB = {"TENANT_INDEX_MIN_RECORDS": 0}
    committed(tasks.sweep)
    assert not vector_indexes.has_tenant_indexes()


def _insert_corpus(
    total: int, tenants: list[Scope], weights: list[float]
) -> dict[Scope, list[str]]:
    """Bulk-insert indexed records with hashing vectors, skewed over ``tenants``."""
    embedder = HashingEmbedder()
    rng = random.Random(7)
    words = [
        "refund",
        "order",
        "ship",
        "credit",
        "deploy",
        "invoice",
        "alpha",
        "beta",
        "gamma",
        "delta",
        "lambda",
        "sigma",
    ]
    kbs = {scope: knowledge_bases.ensure_knowledge_base(scope, "memory") for scope in tenants}
    chosen = rng.choices(tenants, weights=weights, k=total)
    texts = [" ".join(rng.choices(words, k=6)) + f" #{n}" for n in range(total)]
    vectors = embedder.embed_documents(texts)
    now = timezone.now()
    rows = [
        MemoryRecord(
            org_id=scope.org_id,
            domain_id=scope.domain_id,
            knowledge_base=kbs[scope],
            content=text,
            content_hash=str(n),
            embedding=vector,
            embedding_model=embedder.name,
            status="indexed",
            indexed_at=now,
        )
        for n, (scope, text, vector) in enumerate(zip(chosen, texts, vectors, strict=True))
    ]
    # Load first, build the HNSW index after (much faster than 20,000 index inserts).
    # DDL is transactional: the test's rollback restores the original index.
    from memoryhub.services.vector_indexes import ensure_vector_index, vector_index_name

    with connection.cursor() as cursor:
        cursor.execute(f'DROP INDEX "{vector_index_name(embedder.name)}"')
    MemoryRecord.unscoped.bulk_create(rows, batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
    ensure_vector_index(embedder.name, embedder.dimensions)
    by_scope: dict[Scope, list[str]] = {}
    for scope, text in zip(chosen, texts, strict=True):
        by_scope.setdefault(scope, []).append(text)
    return by_scope


def test_filtered_hnsw_recall_for_a_one_percent_tenant(settings):
    """20,000 records over 100 tenants; the 1% tenant still gets k=10 at recall >= 0.95."""
    orgs = [OrgFactory(slug=f"t{n}") for n in range(100)]
    tenants = [Scope.for_domain(DomainFactory(org=org, slug="d")) for org in orgs]
    weights = [30.0] + [1.0] * 10 + [70.0 / 89] * 89
    corpus = _insert_corpus(20_000, tenants, weights)
    small = min(
        (s for s in tenants if len(corpus.get(s, [])) >= 150),
        key=lambda s: abs(len(corpus[s]) - 200),
    )
    assert 150 <= len(corpus[small]) <= 260
    settings.MEMORYHUB = {"EXACT_SCAN_THRESHOLD": 0, "CACHE_TTL": 0}
    embedder = HashingEmbedder()
    with tenant_scope(small):
        ids, vectors = zip(*MemoryRecord.objects.values_list("id", "embedding"), strict=True)
    matrix = np.array(vectors)
    recalls = []
    for question in [
        "refund order",
        "deploy invoice gamma",
        "credit sigma",
        "alpha beta",
        "ship lambda",
    ]:
        result = query.query(small, query=question, k=10, mode="vector")
        assert result.strategy == "hnsw"
        assert len(result.items) == 10
        exact = np.argsort(-(matrix @ np.array(embedder.embed_query(question))))[:10]
        truth = {str(ids[i]) for i in exact}
        recalls.append(len(truth & {i.id for i in result.items}) / 10)
    assert np.mean(recalls) >= 0.95, recalls


def _session_settings() -> tuple[str, ...]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('enable_sort'), current_setting('hnsw.ef_search'),"
            " current_setting('hnsw.iterative_scan')"
        )
        return tuple(cursor.fetchone())


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_hnsw_settings_end_with_the_query_inside_a_transaction(tenant, handbook, settings, mode):
    settings.MEMORYHUB = {"EXACT_SCAN_THRESHOLD": 0}
    before = _session_settings()
    assert connection.in_atomic_block  # the test's own transaction stays open
    result = query.query(tenant.scope, query="refunds", k=2, mode=mode)
    assert result.strategy.endswith("hnsw")
    assert result.items[0].content == HANDBOOK[0]
    assert _session_settings() == before  # enable_sort=off did not outlive the query


@single_node(ONE_MESSAGE)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_outside_a_transaction_a_query_is_one_round_trip_and_leaves_no_settings(
    tenant, settings, mode
):
    from django.test.utils import CaptureQueriesContext

    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    write.write(tenant.scope, [{"content": text} for text in HANDBOOK], sources=["handbook"])
    settings.MEMORYHUB = {"EXACT_SCAN_THRESHOLD": 0, "CACHE_TTL": 0}
    before = _session_settings()
    in_transaction = None
    with transaction.atomic():
        in_transaction = query.query(tenant.scope, query="refunds payment", k=3, mode=mode)
    with CaptureQueriesContext(connection) as statements:
        result = query.query(tenant.scope, query="refunds payment", k=3, mode=mode)
    assert [item.id for item in result.items] == [item.id for item in in_transaction.items]
    assert [item.score for item in result.items] == pytest.approx(
        [item.score for item in in_transaction.items]
    )
    assert result.items[0].content == HANDBOOK[0]
    searches = [q["sql"] for q in statements.captured_queries if "ORDER BY" in q["sql"]]
    # Candidates (and the HNSW settings) in one message, then the final rows.
    assert len(searches) == 1, searches
    assert ("set_config" in searches[0]) == (mode != "keyword")
    assert not any(q["sql"] in ("BEGIN", "COMMIT") for q in statements.captured_queries)
    assert _session_settings() == before


def test_the_final_row_fetch_is_bound_to_the_tenant(tenant, other_tenant, committed):
    mine = committed(write.write, tenant.scope, [{"content": "mine", "metadata": {"a": [1]}}])
    theirs = committed(write.write, other_tenant.scope, [{"content": "theirs"}])
    ids = [*mine.record_ids, *theirs.record_ids]
    rows = execution.fetch(tenant.scope, ids)
    assert [row["content"] for row in rows.values()] == ["mine"]
    assert next(iter(rows.values()))["metadata"] == {"a": [1]}  # decoded, as the ORM would
    assert [row["content"] for row in execution.fetch(other_tenant.scope, ids).values()] == [
        "theirs"
    ]


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
@pytest.mark.parametrize(
    ("empty", "control"),
    [
        ({"kinds": []}, {"kinds": ["semantic"]}),
        ({"where": {"n": {"$in": []}}}, {"where": {"n": {"$in": [0]}}}),
        ({"sources": []}, {"sources": ["handbook"]}),
    ],
    ids=["kinds", "where", "sources"],
)
def test_a_filter_that_matches_nothing_answers_nothing(tenant, handbook, mode, empty, control):
    """An empty list is a filter that matches nothing, not "no filter"; the same filter
    with the matching value finds the refunds record, so the empty answer is the filter's."""
    assert query.query(tenant.scope, query="refunds", k=3, mode=mode, **empty).items == []
    found = query.query(tenant.scope, query="refunds", k=3, mode=mode, **control).items
    assert [item.content for item in found][:1] == [HANDBOOK[0]]


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_an_empty_tag_list_is_no_tag_filter(tenant, handbook, mode):
    result = query.query(tenant.scope, query="refunds", k=3, mode=mode, tags=[])
    unfiltered = query.query(tenant.scope, query="refunds", k=3, mode=mode)
    assert result.items[0].content == HANDBOOK[0]
    assert [item.id for item in result.items] == [item.id for item in unfiltered.items]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_a_filter_that_matches_nothing_answers_nothing_outside_a_transaction(tenant, mode):
    write.write(tenant.scope, [{"content": text} for text in HANDBOOK])
    for filters in ({"kinds": []}, {"where": {"x": {"$in": []}}}):
        assert query.query(tenant.scope, query="refunds", mode=mode, **filters).items == []


@pytest.mark.django_db(transaction=True)
def test_hnsw_inside_a_transaction_on_a_fresh_connection(tenant, settings):
    write.write(tenant.scope, [{"content": text} for text in HANDBOOK])
    settings.MEMORYHUB = {"EXACT_SCAN_THRESHOLD": 0, "CACHE_TTL": 0}
    connection.close()  # hnsw.* are unknown until pgvector is loaded in the session
    with transaction.atomic():
        result = query.query(tenant.scope, query="refunds", k=2, mode="vector")
        assert result.strategy == "hnsw" and result.items[0].content == HANDBOOK[0]
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('enable_sort')")
            assert cursor.fetchone()[0] == "on"


@pytest.mark.django_db(transaction=True)
def test_hnsw_settings_hold_with_server_side_binding_and_never_leak(tenant, settings):
    from django.db.backends.postgresql.base import ServerBindingCursor

    write.write(tenant.scope, [{"content": text} for text in HANDBOOK])
    settings.MEMORYHUB = {"EXACT_SCAN_THRESHOLD": 0, "CACHE_TTL": 0}
    client_side = query.query(tenant.scope, query="refunds", k=4, mode="hybrid")
    connection.ensure_connection()
    saved = connection.connection.cursor_factory
    connection.connection.cursor_factory = ServerBindingCursor
    try:
        server_side = query.query(tenant.scope, query="refunds", k=4, mode="hybrid")
    finally:
        connection.connection.cursor_factory = saved
    assert [i.id for i in server_side.items] == [i.id for i in client_side.items]
    assert _session_settings()[0] == "on"
    # Autocommit off (a transaction Django does not manage): nothing may outlive the query.
    transaction.set_autocommit(False)
    try:
        query.query(tenant.scope, query="refunds payment", k=4, mode="vector")
        assert _session_settings()[0] == "on"
    finally:
        transaction.rollback()
        transaction.set_autocommit(True)


def test_a_repeated_question_is_embedded_once(tenant, handbook, monkeypatch):
    from memoryhub.conf import memoryhub_settings

    embedder = memoryhub_settings.embedder()
    asked: list[str] = []
    original = embedder.embed_query
    monkeypatch.setattr(embedder, "embed_query", lambda text: asked.append(text) or original(text))
    for k in (1, 2, 3):  # three requests (no result cache hit: k differs), one embedding
        query.query(tenant.scope, query="a question asked again", k=k)
    query.query(tenant.scope, query="another question", k=1)
    assert asked == ["a question asked again", "another question"]


def test_keyword_leg_ranks_both_words_first_and_finds_any_word(tenant, committed):
    # Fifty records hold both words of the query, one holds only one of them (three
    # times): the records with both rank first; a query whose words never meet in one
    # record still finds every record holding either.
    both = [{"content": f"Invoice {n} lists the refund."} for n in range(50)]
    committed(write.write, tenant.scope, [*both, {"content": "A refund, refund, refund note."}])
    top = query.query(tenant.scope, query="invoice refund", k=5, mode="keyword").items
    assert len(top) == 5 and all("Invoice" in item.content for item in top)
    alone = query.query(tenant.scope, query="refund zebra", k=5, mode="keyword").items
    assert alone[0].content == "A refund, refund, refund note."  # the any-word half
    assert len(alone) == 5


@pytest.mark.parametrize(
    "text", ["O'Brien's refund", "refund \\ back\\slash", "'quoted' & refund | !x", "a:b c:d"]
)
def test_keyword_leg_quotes_what_the_query_holds(tenant, committed, text):
    committed(write.write, tenant.scope, [{"content": f"{text} {text}"}, {"content": "refund"}])
    for mode in ("keyword", "hybrid"):
        assert query.query(tenant.scope, query=text, k=2, mode=mode).items


def test_keyword_leg_finds_the_words_of_dotted_names(tenant, other_tenant, committed):
    # PostgreSQL's parser reads "enum.IntEnum" as one host name whose only lexeme is
    # "enum.intenum", so a question asking for "IntEnum" would never match it. The parts
    # are words of the record too.
    texts = [
        "Flags subclass enum.IntEnum since 3.11.",
        "Run the suite from a script with pytest.main(['-x']).",
        "Paths like /usr/local/lib/site-packages hold the wheels.",
        "Nothing dotted here at all.",
        # A URL (whose "https://" the parser drops), an e-mail address and tags, which
        # it drops too: found by their words.
        "See https://docs.example.org/guide.html#refunds for the rules.",
        "Special tokens such as '<unk>' and '<cls>' map to ids; write to bob@example.com.",
    ]
    committed(write.write, tenant.scope, [{"content": text} for text in texts])
    committed(write.write, other_tenant.scope, [{"content": "Globex uses enum.IntEnum too."}])
    for question, expected in (
        ("IntEnum", texts[0]),
        ("enum", texts[0]),
        ("enum.IntEnum", texts[0]),
        ("pytest main", texts[1]),
        ("site packages", texts[2]),
        ("https guide", texts[4]),
        ("unk", texts[5]),
        ("cls tokens", texts[5]),
        ("bob", texts[5]),
    ):
        items = query.query(tenant.scope, query=question, k=6, mode="keyword").items
        assert items[0].content == expected, question
        assert all(not item.content.startswith("Globex") for item in items)


def test_a_question_asked_again_is_embedded_once_per_model(tenant, handbook, committed):
    from memoryhub.embedders import HashingEmbedder
    from memoryhub.services.query import _query_vector

    class Counting(HashingEmbedder):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name
            self.embedded: list[str] = []

        def embed_query(self, text: str) -> list[float]:
            self.embedded.append(text)
            return super().embed_query(text)

    first, second = Counting("counting-a"), Counting("counting-b")
    assert _query_vector(first, "refunds") == _query_vector(first, "refunds")
    assert first.embedded == ["refunds"]
    _query_vector(second, "refunds")
    _query_vector(first, "returns")
    assert (first.embedded, second.embedded) == (["refunds", "returns"], ["refunds"])
    query.clear_query_vectors()
    _query_vector(first, "refunds")
    assert first.embedded == ["refunds", "returns", "refunds"]
