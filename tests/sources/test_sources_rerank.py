"""The server's reranker in the async contract: ``ItemReranker`` makes a
``DocumentReranker`` (here ``HttpReranker`` against a real local server) the ``reranker=``
of a ``CompositeMemory``, with the same instance the query service uses."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from memoryhub.conf import memoryhub_settings
from memoryhub.items import MemoryItem
from memoryhub.rerankers import HttpReranker, RerankerError
from memoryhub.scope import Scope
from memoryhub.sources import CompositeMemory, ItemReranker, MemoryContext, Reranker
from tests.fakes import FakeMemory
from tests.rerank_api import FakeRerankAPI, serving


@pytest.fixture
def api() -> Iterator[FakeRerankAPI]:
    with serving() as server:
        yield server


def fact(content: str, score: float, id: str | None = None) -> MemoryItem:
    return MemoryItem(content=content, source="x", score=score, id=id)


def memory(reranker: object) -> CompositeMemory:
    return CompositeMemory(
        [
            FakeMemory("notes", [fact("tea at four", 0.9), fact("shared fact", 0.5, "f1")]),
            FakeMemory("wiki", [fact("shared fact", 0.4, "f1"), fact("coffee at nine", 0.1)]),
        ],
        reranker=reranker,
    )


def context() -> MemoryContext:
    return MemoryContext(Scope(org_id=1, domain_id=1), persist=False)


def test_a_composite_reranks_its_merged_items_with_the_http_reranker(api):
    api.scores = {"coffee at nine": 0.8, "shared fact": 0.6, "tea at four": 0.1}
    reranker = ItemReranker(HttpReranker(base_url=api.url, model="m"))
    assert isinstance(reranker, Reranker)
    items = asyncio.run(memory(reranker).query("when is coffee", k=2, ctx=context()))
    assert [(i.content, i.source, i.score) for i in items] == [
        ("coffee at nine", "wiki", 0.8),
        ("shared fact", "notes", 0.6),
    ]
    assert items[1].dedupe_count == 2  # the stamps survive the rerank
    [request] = api.requests
    # Merged first: the reranker sees each fact once, and is asked for k.
    assert sorted(request["documents"]) == ["coffee at nine", "shared fact", "tea at four"]
    assert (request["query"], request["top_n"]) == ("when is coffee", 2)


def test_a_failing_reranker_falls_back_to_score_order(api, caplog):
    api.script = [503] * 10
    reranker = ItemReranker(HttpReranker(base_url=api.url, max_attempts=2, backoff=0.01))
    with caplog.at_level(logging.WARNING, logger="memoryhub.sources.compositions"):
        items = asyncio.run(memory(reranker).query("q", k=2, ctx=context()))
    assert [(i.content, i.score) for i in items] == [("tea at four", 0.9), ("shared fact", 0.5)]
    assert "falling back" in caplog.text
    strict = ItemReranker(reranker.reranker, fallback=None)
    with pytest.raises(RerankerError):
        asyncio.run(memory(strict).query("q", k=2, ctx=context()))


def test_from_settings_shares_the_query_services_instance(settings, api):
    with pytest.raises(ValueError, match="RERANKER"):
        ItemReranker.from_settings()
    settings.MEMORYHUB = {
        **settings.MEMORYHUB,
        "RERANKER": "memoryhub.rerankers.HttpReranker",
        "RERANKER_OPTIONS": {"base_url": api.url, "model": "m"},
    }
    adapter = ItemReranker.from_settings()
    assert adapter.reranker is memoryhub_settings.reranker()
    api.scores = {"tea at four": 1.0}
    items = asyncio.run(memory(adapter).query("tea", k=1, ctx=context()))
    assert [(i.content, i.score) for i in items] == [("tea at four", 1.0)]
