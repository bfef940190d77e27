"""The HTTP reranker against a real local server (Cohere and TEI shapes, retries,
failures, malformed answers), the ranking check every reranker's answer passes, and the
system checks on the reranker settings."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest
from django.core.checks import run_checks

from memoryhub.rerankers import DocumentReranker, HttpReranker, RerankerError, checked_ranking
from tests.rerank_api import FakeRerankAPI, serving

DOCUMENTS = ["refunds take five days", "deploys freeze on fridays", "store credit never expires"]


@pytest.fixture
def api() -> Iterator[FakeRerankAPI]:
    with serving() as server:
        server.scores = {DOCUMENTS[0]: 0.2, DOCUMENTS[1]: 0.9, DOCUMENTS[2]: 0.5}
        yield server


def make(server: FakeRerankAPI, **options: object) -> HttpReranker:
    defaults: dict = {"base_url": server.url, "model": "rerank-small", "api_key": "sk-test"}
    defaults.update(backoff=0.01, timeout=2.0)
    defaults.update(options)
    return HttpReranker(**defaults)


def test_cohere_shape_sends_model_query_documents_and_top_n(api):
    reranker = make(api)
    assert isinstance(reranker, DocumentReranker)
    assert reranker.rerank("what is frozen", DOCUMENTS, top_n=2) == [(1, 0.9), (2, 0.5)]
    assert api.requests == [
        {"query": "what is frozen", "documents": DOCUMENTS, "top_n": 2, "model": "rerank-small"}
    ]
    assert api.headers_seen[0]["Authorization"] == "Bearer sk-test"
    assert reranker.name == "cohere-rerank-small"
    assert "sk-test" not in repr(reranker)


def test_extra_body_is_merged_into_every_request(api):
    make(api, extra_body={"return_documents": False}).rerank("q", DOCUMENTS, top_n=1)
    assert api.requests[0]["return_documents"] is False


def test_tei_shape_posts_texts_and_keeps_the_best_top_n(api):
    reranker = make(api, base_url=api.root, api="tei", model="")
    assert reranker.rerank("q", DOCUMENTS, top_n=2) == [(1, 0.9), (2, 0.5)]
    assert api.requests == [{"query": "q", "texts": DOCUMENTS}]
    assert reranker.name == "tei-default"


def test_no_documents_sends_no_request(api):
    assert make(api).rerank("q", [], top_n=3) == []
    assert api.requests == []


def test_a_500_then_success_is_retried(api):
    api.script = [500, 429]
    assert make(api).rerank("q", DOCUMENTS, top_n=1) == [(1, 0.9)]
    assert len(api.requests) == 3


def test_persistent_5xx_gives_up_after_max_attempts(api):
    api.script = [503] * 5
    with pytest.raises(RerankerError) as raised:
        make(api, max_attempts=3).rerank("q", DOCUMENTS, top_n=1)
    assert (raised.value.outcome, raised.value.status, raised.value.attempts) == (
        "unavailable",
        503,
        3,
    )
    assert len(api.requests) == 3


def test_a_client_error_is_not_retried(api):
    api.script = [400]
    with pytest.raises(RerankerError) as raised:
        make(api).rerank("q", DOCUMENTS, top_n=1)
    assert (raised.value.outcome, raised.value.status) == ("refused", 400)
    assert len(api.requests) == 1
    assert "nope" not in str(raised.value)  # the body may echo a document: never kept


def test_a_timeout_is_retried_then_reported(api):
    api.delay = 0.5
    with pytest.raises(RerankerError) as raised:
        make(api, timeout=0.1, max_attempts=2).rerank("q", DOCUMENTS, top_n=1)
    assert (raised.value.outcome, raised.value.attempts) == ("timeout", 2)


def test_a_retry_after_longer_than_max_sleep_gives_up_at_once(api):
    api.script, api.retry_after = [429], "30"
    slept: list[float] = []
    with pytest.raises(RerankerError) as raised:
        make(api, max_sleep=1.0, sleep=slept.append).rerank("q", DOCUMENTS, top_n=1)
    assert (raised.value.outcome, raised.value.attempts, slept) == ("rate_limited", 1, [])


def test_the_deadline_bounds_the_retries(api):
    api.script = [503] * 10
    now = [0.0]  # a clock that only the sleeps move: the answers take no time

    def sleep(delay: float) -> None:
        now[0] += delay

    reranker = make(
        api,
        max_attempts=10,
        backoff=0.3,
        max_sleep=5.0,
        deadline=1.0,
        sleep=sleep,
        clock=lambda: now[0],
    )
    with pytest.raises(RerankerError) as raised:
        reranker.rerank("q", DOCUMENTS, top_n=1)
    # Sleeps of 0.3 and 0.6 s fit in the second; the next (1.2 s) would not.
    assert now[0] == pytest.approx(0.9)
    assert len(api.requests) == raised.value.attempts == 3
    assert "a retry would wait 1.2s" in str(raised.value)


def test_a_sleep_that_overruns_the_deadline_ends_in_a_timeout_not_a_crash(api):
    """A sleep may end later than asked (a busy host): the next attempt would have no
    time left, so none is made."""
    api.script = [503] * 10
    reranker = make(
        api,
        max_attempts=10,
        backoff=0.1,
        max_sleep=5.0,
        deadline=0.5,
        sleep=lambda delay: time.sleep(delay + 0.5),
    )
    with pytest.raises(RerankerError) as raised:
        reranker.rerank("q", DOCUMENTS, top_n=1)
    assert (raised.value.outcome, raised.value.attempts, len(api.requests)) == ("timeout", 1, 1)


def test_connection_refused_is_unavailable():
    with serving() as server:
        url = server.url
    with pytest.raises(RerankerError) as raised:
        HttpReranker(base_url=url, max_attempts=2, backoff=0.01).rerank("q", DOCUMENTS, top_n=1)
    assert (raised.value.outcome, raised.value.attempts) == ("unavailable", 2)


MALFORMED = {
    "missing indexes": lambda body, answer: {"results": answer["results"][:1]},
    "index out of range": lambda body, answer: {
        "results": [{"index": 7, "relevance_score": 1.0}, *answer["results"][1:]]
    },
    "index named twice": lambda body, answer: {
        "results": [answer["results"][0], answer["results"][0]]
    },
    "score not a number": lambda body, answer: {
        "results": [{"index": 0, "relevance_score": "high"}, {"index": 1, "relevance_score": 1}]
    },
    "no results": lambda body, answer: {"data": answer["results"]},
    "not json": lambda body, answer: b"<html>",
}


@pytest.mark.parametrize("kind", MALFORMED)
def test_a_malformed_answer_is_refused_without_a_retry(api, kind):
    api.answer = MALFORMED[kind]
    with pytest.raises(RerankerError) as raised:
        make(api).rerank("q", DOCUMENTS, top_n=2)
    assert raised.value.outcome == "malformed"
    assert len(api.requests) == 1


def test_checked_ranking_sorts_cuts_and_refuses_what_is_not_a_ranking():
    assert checked_ranking([(0, 0.1), (2, 0.7), (1, 0.7)], 3, 2) == [(2, 0.7), (1, 0.7)]
    assert checked_ranking([(0, 1)], 1, 5) == [(0, 1.0)]  # fewer documents than top_n
    for bad in (
        "01",
        [(0,)],
        [(True, 1.0), (1, 0.5)],
        [(-1, 1.0), (1, 0.5)],
        [(0, math.nan), (1, 0.5)],
        [(0, math.inf), (1, 0.5)],
        [(0, None), (1, 0.5)],
        [(0, 1.0)],
    ):
        with pytest.raises(RerankerError):
            checked_ranking(bad, 3, 2)


def test_options_are_checked():
    with pytest.raises(ValueError, match="api"):
        HttpReranker(base_url="http://x", api="voyage")
    with pytest.raises(ValueError, match="base_url"):
        HttpReranker(base_url="")
    with pytest.raises(ValueError, match="top_n"):
        HttpReranker(base_url="http://x").rerank("q", DOCUMENTS, top_n=0)


# --- settings --------------------------------------------------------------------------


def ids(settings, **options) -> set[str]:
    settings.MEMORYHUB = {**settings.MEMORYHUB, **options}
    return {message.id for message in run_checks(tags=["memoryhub"])}


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"RERANKER": "memoryhub.rerankers.Nope"}, "memoryhub.E014"),
        (
            {"RERANKER": "memoryhub.rerankers.HttpReranker", "RERANKER_OPTIONS": {}},
            "memoryhub.E026",
        ),
        (
            {"RERANKER": "memoryhub.rerankers.HttpReranker", "RERANKER_OPTIONS": []},
            "memoryhub.E025",
        ),
        ({"RERANKER": "memoryhub.embedders.HashingEmbedder"}, "memoryhub.E027"),
        ({"RERANKER": 5}, "memoryhub.E024"),
    ],
)
def test_a_reranker_that_cannot_serve_is_a_startup_error(settings, options, problem):
    assert problem in ids(settings, **options)


def test_a_configured_http_reranker_passes_the_checks(settings):
    options = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    found = ids(settings, RERANKER="memoryhub.rerankers.HttpReranker", RERANKER_OPTIONS=options)
    assert (
        not {
            "memoryhub.E014",
            "memoryhub.E024",
            "memoryhub.E025",
            "memoryhub.E026",
            "memoryhub.E027",
            "memoryhub.E002",
        }
        & found
    )


@pytest.mark.parametrize("candidates", [0, 1001, "50", True])
def test_rerank_candidates_is_bounded(settings, candidates):
    assert "memoryhub.E002" in ids(settings, RERANK_CANDIDATES=candidates)
