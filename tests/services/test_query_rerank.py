"""Reranking in the query service, against a real local ``/rerank`` server with scripted
scores: the reranker reorders the best fused candidates and its scores come back; a
failing reranker leaves the fused order; only the querying tenant's candidates are sent."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from memoryhub import policy
from memoryhub.exceptions import ValidationFailed
from memoryhub.models import Observation
from memoryhub.scope import tenant_scope
from memoryhub.services import knowledge_bases, query, write
from tests.factories import key_client
from tests.rerank_api import FakeRerankAPI, serving

pytestmark = pytest.mark.django_db

NOTES = [
    "Refund policy: refunds go to the original payment method.",
    "Refund policy: refunds over $500 need a manager.",
    "Refund policy: store credit instead of a refund never expires.",
    "Refund policy for subscriptions: prorated to the day.",
    "Refund requests are answered within two business days.",
    "The refund policy does not cover gift cards.",
]
QUESTION = "what is the refund policy"


@pytest.fixture
def api(settings) -> Iterator[FakeRerankAPI]:
    """The site reranks with an HttpReranker pointed at a local scripted server."""
    with serving() as server:
        settings.MEMORYHUB = {
            **settings.MEMORYHUB,
            "CACHE_TTL": 60,
            "RERANKER": "memoryhub.rerankers.HttpReranker",
            "RERANKER_OPTIONS": {
                "base_url": server.url,
                "model": "rerank-test",
                "max_attempts": 2,
                "backoff": 0.01,
                "timeout": 2.0,
            },
        }
        yield server


@pytest.fixture
def notes(tenant, committed):
    committed(write.write, tenant.scope, [{"content": text} for text in NOTES])


def fused(scope, k=6):
    """The fused order (of every note, by default), as a query without reranking
    answers it."""
    return [item.content for item in query.query(scope, query=QUESTION, k=k, rerank=False).items]


def scores_reversing(order: list[str]) -> dict[str, float]:
    """Scripted scores that put the fused last first."""
    return {content: float(rank) for rank, content in enumerate(order)}


def test_the_reranker_reorders_the_fused_candidates_with_its_scores(tenant, notes, api):
    order = fused(tenant.scope)
    api.scores = scores_reversing(order)
    result = query.query(tenant.scope, query=QUESTION, k=3)
    assert result.reranked
    assert [item.content for item in result.items] == order[::-1][:3]
    assert [item.score for item in result.items] == [5.0, 4.0, 3.0]
    [request] = api.requests
    assert request == {
        "query": QUESTION,
        "documents": order,  # the fused candidates, best first
        "top_n": 3,
        "model": "rerank-test",
    }


def test_rerank_candidates_bounds_what_is_sent_and_k_cuts(tenant, notes, api, settings):
    settings.MEMORYHUB = {**settings.MEMORYHUB, "RERANK_CANDIDATES": 4}
    order = fused(tenant.scope)
    api.scores = scores_reversing(order)
    result = query.query(tenant.scope, query=QUESTION, k=2)
    [request] = api.requests
    assert request["documents"] == order[:4]
    assert request["top_n"] == 2
    assert [item.content for item in result.items] == [order[3], order[2]]


def test_candidates_are_at_least_k(tenant, notes, api, settings):
    settings.MEMORYHUB = {**settings.MEMORYHUB, "RERANK_CANDIDATES": 2}
    query.query(tenant.scope, query=QUESTION, k=5)
    assert len(api.requests[0]["documents"]) == 5


def test_a_500_then_success_is_retried_and_reranked(tenant, notes, api):
    order = fused(tenant.scope)
    api.scores = scores_reversing(order)
    api.script = [500]
    result = query.query(tenant.scope, query=QUESTION, k=2)
    assert result.reranked and [item.content for item in result.items] == order[::-1][:2]
    assert len(api.requests) == 2


def test_an_unreachable_reranker_leaves_the_fused_order(tenant, notes, api, caplog):
    expected = query.query(tenant.scope, query=QUESTION, k=3, rerank=False).items
    api.script = [503] * 10
    with caplog.at_level(logging.WARNING, logger="memoryhub.services.query.rerank"):
        result = query.query(tenant.scope, query=QUESTION, k=3)
    assert not result.reranked
    assert result.items == expected  # order and fused scores
    assert len(api.requests) == 2  # max_attempts
    [warning] = [r for r in caplog.records if r.name == "memoryhub.services.query.rerank"]
    assert "fused order" in warning.getMessage()
    assert QUESTION not in warning.getMessage()
    with tenant_scope(tenant.scope):
        [observed] = Observation.objects.filter(kind=Observation.Kind.RERANK_FAILED)
    assert observed.source == "cohere-rerank-test"
    assert observed.payload == {
        "reranker": "cohere-rerank-test",
        "outcome": "unavailable",
        "status": 503,
        "attempts": 2,
        "candidates": len(NOTES),
        "error": "RerankerError",
    }

    # Not cached: the next query asks again; an outage is observed once a minute.
    again = query.query(tenant.scope, query=QUESTION, k=3)
    assert not again.cached and not again.reranked
    assert len(api.requests) == 4
    with tenant_scope(tenant.scope):
        assert Observation.objects.filter(kind=Observation.Kind.RERANK_FAILED).count() == 1


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda body, answer: {"results": answer["results"][:1]}, id="missing"),
        pytest.param(
            lambda body, answer: {"results": [{"index": 99, "relevance_score": 1.0}]},
            id="out-of-range",
        ),
    ],
)
def test_a_malformed_answer_leaves_the_fused_order(tenant, notes, api, answer):
    expected = query.query(tenant.scope, query=QUESTION, k=2, rerank=False).items
    api.answer = answer
    result = query.query(tenant.scope, query=QUESTION, k=2)
    assert (result.reranked, result.items) == (False, expected)
    assert len(api.requests) == 1  # not retried
    with tenant_scope(tenant.scope):
        [observed] = Observation.objects.filter(kind=Observation.Kind.RERANK_FAILED)
    assert observed.payload["outcome"] == "malformed"


def test_a_reranker_that_raises_anything_leaves_the_fused_order(tenant, notes, settings):
    settings.MEMORYHUB = {
        **settings.MEMORYHUB,
        "RERANKER": "tests.services.test_query_rerank.Broken",
    }
    expected = query.query(tenant.scope, query=QUESTION, k=2, rerank=False).items
    result = query.query(tenant.scope, query=QUESTION, k=2)
    assert (result.reranked, result.items) == (False, expected)
    with tenant_scope(tenant.scope):
        [observed] = Observation.objects.filter(kind=Observation.Kind.RERANK_FAILED)
    assert (observed.payload["outcome"], observed.payload["error"]) == ("error", "KeyError")


class Broken:
    name = "broken"

    def rerank(self, query, documents, *, top_n):
        raise KeyError("bug")


def test_rerank_false_keeps_the_fused_order_and_sends_nothing(tenant, notes, api):
    result = query.query(tenant.scope, query=QUESTION, k=3, rerank=False)
    assert not result.reranked
    assert [item.content for item in result.items] == fused(tenant.scope, 3)
    assert api.requests == []


def test_off_by_default(tenant, notes):
    result = query.query(tenant.scope, query=QUESTION, k=3)
    assert not result.reranked
    assert [item.content for item in result.items] == fused(tenant.scope, 3)


def test_rerank_must_be_a_boolean(tenant):
    with pytest.raises(ValidationFailed) as raised:
        query.query(tenant.scope, query=QUESTION, rerank="no")
    assert "rerank" in raised.value.errors


def test_a_cached_answer_keeps_the_rerankers_order_without_asking_again(tenant, notes, api):
    api.scores = scores_reversing(fused(tenant.scope))
    first = query.query(tenant.scope, query=QUESTION, k=3)
    second = query.query(tenant.scope, query=QUESTION, k=3)
    assert (second.cached, second.reranked) == (True, True)
    assert second.items == first.items
    assert len(api.requests) == 1
    # rerank=false is another request: its own entry, the fused order.
    assert not query.query(tenant.scope, query=QUESTION, k=3, rerank=False).reranked


def test_duplicates_merge_before_reranking(tenant, notes, api, committed):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    committed(
        write.write,
        tenant.scope,
        [{"content": NOTES[4]}],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )
    api.scores = {NOTES[4]: 9.0}
    for _ in range(2):  # computed, then from the cache
        top = query.query(tenant.scope, query=QUESTION, k=1).items[0]
        assert (top.content, top.score, top.dedupe_count) == (NOTES[4], 9.0, 2)
    assert api.documents_sent().count(NOTES[4]) == 1


def test_only_the_querying_tenants_candidates_are_sent(tenant, other_tenant, api, committed):
    committed(write.write, tenant.scope, [{"content": f"acme {text}"} for text in NOTES])
    committed(write.write, other_tenant.scope, [{"content": f"globex {text}"} for text in NOTES])
    result = query.query(tenant.scope, query=QUESTION, k=3)
    assert result.reranked
    sent = api.documents_sent()
    assert len(sent) == len(NOTES)
    assert all(text.startswith("acme ") for text in sent)
    query.query(other_tenant.scope, query=QUESTION, k=3)
    assert all(text.startswith("globex ") for text in api.documents_sent()[len(sent) :])


# --- the API --------------------------------------------------------------------------


def test_the_api_says_whose_scores_the_items_carry(tenant, notes, api):
    client = key_client(tenant, can_read=True)
    order = fused(tenant.scope)
    api.scores = scores_reversing(order)
    url = "/api/v1/domains/support/query"
    body = client.post(url, {"query": QUESTION, "k": 2}, format="json").json()
    assert body["reranked"] is True
    assert [(i["content"], i["score"]) for i in body["items"]] == [(order[5], 5.0), (order[4], 4.0)]
    plain = client.post(url, {"query": QUESTION, "k": 2, "rerank": False}, format="json").json()
    assert plain["reranked"] is False
    assert [i["content"] for i in plain["items"]] == order[:2]
    refused = client.post(url, {"query": QUESTION, "rerank": "yes"}, format="json")
    assert refused.status_code == 400 and "rerank" in refused.json()["errors"]


def test_the_api_answers_in_the_fused_order_when_the_reranker_is_down(tenant, notes, api):
    client = key_client(tenant, can_read=True)
    api.script = [502] * 10
    response = client.post("/api/v1/domains/support/query", {"query": QUESTION}, format="json")
    assert response.status_code == 200
    assert response.json()["reranked"] is False
    assert [i["content"] for i in response.json()["items"]] == fused(tenant.scope, 5)


def test_the_playground_says_the_scores_are_the_rerankers(tenant, notes, api, client):
    from tests.factories import MembershipFactory

    client.force_login(MembershipFactory(org=tenant.org, user__is_staff=True).user)
    api.scores = {NOTES[0]: 0.75}
    page = client.get(
        "/admin/memoryhub/memoryrecord/playground/",
        {"domain": tenant.domain.pk, "query": QUESTION, "mode": "hybrid", "k": 2},
    ).content.decode()
    assert "reranked" in page
    assert "relevance score of the configured reranker" in page
    assert "0.75" in page
