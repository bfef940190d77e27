"""Querying memory: vector, keyword and hybrid search with tenant and metadata filters.

Scores are comparable within a mode:

* ``vector``: cosine similarity in [-1, 1] between the query's and the record's
  embeddings (the configured model only; records still pending are not found);
* ``keyword``: PostgreSQL full-text rank, ``ts_rank`` normalised to [0, 1)
  (``rank / (rank + 1)``), over the generated ``search_vector`` (finds pending records);
* ``hybrid`` (default): each leg's scores normalised over its candidates and combined
  with the vector leg's weight (:func:`fusion.fuse`), in [0, 1]. ``explain=True`` returns
  each item's rank and score in each leg (``QueryResult.legs``).

With a reranker configured (``MEMORYHUB["RERANKER"]``), the best
``RERANK_CANDIDATES`` fused items (deduplicated, at least k) are reordered by it and the
best k kept, each with the reranker's score (``QueryResult.reranked``); ``min_score``
still applies to the mode's scores, before reranking. A failing reranker leaves the
fused order (see :mod:`.rerank`). ``rerank=False`` opts a query out.

Vector search picks its plan from the size of the filtered scope: up to
``MEMORYHUB["EXACT_SCAN_THRESHOLD"]`` candidate rows it scans them exactly (btree on the tenant
columns, then a sort: recall 1.0), above it it uses the model's HNSW index with pgvector
iterative scans so a selective filter still yields k rows.

Time: ``occurred_after``/``occurred_before`` filter every leg like the other filters (so
k rows still come back); a recency half-life (``RECENCY_HALF_LIFE``, or the query's
``recency_half_life``) multiplies each candidate's score by ``0.5 ** (age / half-life)``
before the top k are taken (and a reranker's scores, which then rank);
``context_turns`` adds each hit's neighbouring turns of its session (one statement for
all hits, after the ranking, never cached).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

from cachetools import LRUCache, cached
from django.utils import timezone
from pgvector import Vector

from ... import cache, metrics, observe, tracing
from ...conf import memoryhub_settings
from ...items import MemoryItem, Turns, dedupe_items, grounding_lines, sort_by_score
from ...models import Observation
from ...scope import Scope
from . import budget, execution, rerank
from .fusion import RRF_K, boost_conversation, boost_recent, fuse, merge_models, union
from .plans import VECTOR, WORDS, Slot, clear_plans, keyword_words, plan_for
from .request import Legs, QueryRequest, QueryResult

__all__ = [
    "RRF_K",
    "VECTOR",
    "QueryRequest",
    "QueryResult",
    "clear_plans",
    "clear_query_vectors",
    "merge_models",
    "query",
    "render_grounding",
]


#: Query vectors by (model, text), in this process: an agent asks the same question
#: again, and a real model's embedding of it costs more than the search itself.
#: Bounded, least recently used out.
VECTORS_KEPT = 1024
_VECTORS: LRUCache[tuple[str, str], str] = LRUCache(maxsize=VECTORS_KEPT)
_VECTORS_LOCK = threading.Lock()


def clear_query_vectors() -> None:
    """Forget the query vectors this process keeps (after a change of embedder whose
    name stays the same, such as the hashing embedder with other weights)."""
    with _VECTORS_LOCK:
        _VECTORS.clear()


@cached(_VECTORS, key=lambda embedder, text: (embedder.name, text), lock=_VECTORS_LOCK)
def _query_vector(embedder: Any, text: str) -> str:
    """``text``'s query vector under ``embedder``, as pgvector text."""
    return Vector(embedder.embed_query(text)).to_text()


def conversation_weights() -> tuple[float, float, float, float]:
    """The weights :func:`fusion.boost_conversation` ranks conversation turns with:
    session, speaker, statement and length (settings ``*_BOOST``)."""
    return (
        memoryhub_settings.SESSION_BOOST,
        memoryhub_settings.SPEAKER_BOOST,
        memoryhub_settings.STATEMENT_BOOST,
        memoryhub_settings.LENGTH_BOOST,
    )


def _rank(  # noqa: C901
    scope: Scope, request: QueryRequest, gen: int | None, candidates: int
) -> tuple[list[tuple[Any, float]], str, dict[Any, dict[str, Any]], dict[str, Legs]]:
    """The ``(id, score)`` pairs for ``request``, best first, the strategy used, the
    candidates' rows, and where each candidate stood in each leg (:data:`Legs`);
    ``candidates`` is how many items the caller needs (k, or what the reranker sees)."""
    plan = plan_for(scope, request, gen, candidates)
    values: dict[Slot, Any] = {WORDS: keyword_words(request.query)}
    if plan.vector is not None:
        values[VECTOR] = _query_vector(memoryhub_settings.embedder(), request.query)
    for name, leg in plan.previous:
        embedder = memoryhub_settings.embedder_for(name)
        assert embedder is not None  # the plan was built with it
        values[leg.slot] = _query_vector(embedder, request.query)
    legs = [plan.vector, plan.keyword, plan.delta, *(leg for _, leg in plan.previous)]
    (vector, keyword, delta, *rest), rows = execution.run(legs, values, plan.settings)
    if plan.every_keyword is not None and len(keyword) < request.k:
        # The rarest words' records were too few: those holding any word join them (the
        # same ranking; the records holding any word are not all ranked, so the first
        # leg's may not be among them).
        (every,), more = execution.run([plan.every_keyword], values, {})
        keyword = union(keyword, every)
        rows.update(more)
    # A model's HNSW search and the exact scan of its delta rank parts of one scope.
    vector = union(vector, delta)
    by_model: dict[str, list[tuple[Any, float]]] = {}
    for (name, _), ranking in zip(plan.previous, rest, strict=True):
        by_model[name] = union(by_model.get(name, []), ranking)
    previous = list(by_model.values())
    if previous:
        vector = merge_models([vector, *previous])
    if request.mode == "vector":
        ranked = vector
    elif request.mode == "keyword":
        ranked = keyword
    else:
        ranked = fuse(vector, keyword, plan.vector_weight, plan.depth)
    if request.min_score is not None:
        ranked = [(pk, score) for pk, score in ranked if score >= request.min_score]
    if request.mode == "hybrid":
        ranked = boost_conversation(
            ranked,
            rows,
            request.query,
            *conversation_weights(),
        )
    half_life = request.half_life()
    if half_life is not None:
        occurred = {pk: row["occurred"] for pk, row in rows.items()}
        ranked = boost_recent(ranked, occurred, half_life, timezone.now())
    standing: dict[str, Legs] = {}
    if request.explain:
        for name, ranking in (("vector", vector), ("keyword", keyword)):
            for rank, (pk, score) in enumerate(ranking, start=1):
                standing.setdefault(str(pk), {"vector": None, "keyword": None})[name] = {
                    "rank": rank,
                    "score": round(score, 6),
                }
    # Every candidate: duplicates that merge away must not leave the answer short of k
    # (:func:`_items` converts only as many as it needs).
    return ranked, plan.strategy, rows, standing


def _items(
    scope: Scope,
    ranked: list[tuple[Any, float]],
    rows: dict[Any, dict[str, Any]] | None = None,
    *,
    limit: int,
    observed: bool,
) -> list[MemoryItem]:
    """The best ``limit`` ranked records as items, duplicates merged; ``observed``
    records the merge.

    ``rows`` are the candidates' rows when the ranking was just computed; a cached
    ranking reads them again (a record erased since is simply not there).
    """
    # Twice the limit first (room for duplicates that merge away), more only while
    # duplicates leave fewer: converting every candidate costs more than the statement.
    taken = limit * 2
    while True:
        head = ranked[:taken]
        found = rows if rows is not None else execution.fetch(scope, [pk for pk, _ in head])
        items = [execution.to_item(found[pk], score) for pk, score in head if pk in found]
        merged, collapsed = dedupe_items(items, "id")
        if len(merged) >= limit or taken >= len(ranked):
            break
        taken *= 2
    if collapsed and observed:
        stamped = [item for item in merged if item.dedupe_count]
        observe.record_in_scope(
            Observation.Kind.QUERY_DEDUPLICATED,
            scope,
            count=collapsed,
            payload={
                "n": collapsed,
                "sources": sorted({s for item in stamped for s in item.dedupe_sources or ()}),
            },
        )
    return sort_by_score(merged)[:limit]


def _with_turns(scope: Scope, items: list[MemoryItem], count: int) -> list[MemoryItem]:
    """Each item with the ``count`` turns of its session before and after it (none when
    it names no session); read live, never from the cache. ``count`` 0: the items as
    they are."""
    if not count:
        return items
    found = execution.turns(scope, [item.id for item in items if item.id], count)
    return [dataclasses.replace(item, context=found.get(item.id or "", Turns())) for item in items]


def query(scope: Scope, request: QueryRequest | None = None, /, **raw: Any) -> QueryResult:
    """Search ``scope``'s memory. Pass a :class:`QueryRequest` or raw fields.

    The ranking (ids and scores, never content) is cached per (scope, domain
    generation, canonical request); any write or forget in the domain invalidates it, and
    a hit reads the rows again, so erased memory cannot come back from the cache. The
    reranker's scores are cached with it; an answer the reranker failed is not cached,
    so the next query asks it again.
    """
    if not isinstance(scope, Scope):
        raise TypeError("query() needs a Scope.")
    if request is None:
        request = QueryRequest.build(**raw)
    started = time.perf_counter()
    asked = {"memoryhub.query.mode": request.mode, "gen_ai.retrieval.top_k": request.k}
    with tracing.span("search_memory", store=scope.domain_id, **asked) as current:
        result = _answer(scope, request)
        plan = metrics.plan_of(result.strategy, cached=result.cached)
        if current is not None:
            current.set_attribute("gen_ai.memory.record.count", len(result.items))
            current.set_attribute("memoryhub.query.plan", plan)
    seconds = time.perf_counter() - started
    metrics.observe_query(request.mode, plan, seconds)
    return result


def _answer(scope: Scope, request: QueryRequest) -> QueryResult:
    reranker = rerank.reranker_for(request)
    limit = rerank.candidates(request, reranker)
    # The models are part of the key: after a change of embedder or reranker, old
    # entries are not reused.
    canonical = {
        **request.canonical(),
        "model": memoryhub_settings.embedder().name,
        "reranker": None if reranker is None else reranker.name,
        "candidates": limit,
        "boosts": conversation_weights(),
    }
    # One generation for the read, the plan and the write (one cache round trip): a write
    # between them moves the generation on, and this (older) ranking must not be stored
    # under the new one.
    gen = cache.generation(scope)
    key = cache.query_key(scope, canonical, gen) if gen is not None else None
    # An explained query is ranked afresh: the cache keeps rankings, not the legs.
    cached = None if request.explain else cache.get_query(key)
    if cached is not None:
        ranked, strategy, scores = cached
        items = _items(scope, ranked, limit=limit, observed=False)
        if scores is not None:
            items = rerank.apply(items, scores)
        items = _with_turns(scope, items[: request.k], request.context_turns)
        items, usage = _within_budget(items, request, len(ranked))
        return QueryResult(
            items=items,
            cached=True,
            strategy=strategy,
            reranked=scores is not None,
            usage=usage,
        )
    ranked, strategy, rows, legs = _rank(scope, request, gen, limit)
    items = _items(scope, ranked, rows, limit=limit, observed=True)
    scores = None if reranker is None else rerank.rerank(scope, reranker, request, items)
    half_life = request.half_life()
    if scores is not None and half_life is not None:
        # The reranker's scores rank the answer: the recency boost applies to them too.
        occurred = {str(item.id): item.occurred_at for item in items}
        scores = boost_recent(scores, occurred, half_life, timezone.now())
    if reranker is None or scores is not None or not items:
        cache.set_query(key, (ranked, strategy, scores))
    if scores is not None:
        items = rerank.apply(items, scores)
    items = _with_turns(scope, items[: request.k], request.context_turns)
    items, usage = _within_budget(items, request, len(ranked))
    if request.explain:
        empty: Legs = {"vector": None, "keyword": None}
        legs = {item.id: legs.get(item.id, empty) for item in items if item.id}
    return QueryResult(
        items=items, strategy=strategy, reranked=scores is not None, legs=legs, usage=usage
    )


def _within_budget(
    items: list[MemoryItem], request: QueryRequest, scanned: int
) -> tuple[list[MemoryItem], dict[str, Any]]:
    """The items packed into the request's ``max_tokens`` (all of them without one), and
    the answer's usage."""
    truncated = False
    if request.max_tokens is not None:
        items, truncated = budget.pack(
            items, request.max_tokens, lambda chosen: render_grounding(chosen) or ""
        )
    return items, {
        "tokens": budget.estimate_tokens(render_grounding(items) or ""),
        "items": len(items),
        "records_scanned": scanned,
        "max_tokens": request.max_tokens,
        "truncated": truncated,
    }


def render_grounding(items: Sequence[MemoryItem], format: Any = None) -> str | None:
    """The "Relevant context:" block, one ``[source] content`` line per item, as seed
    003 prints it (grounding; :mod:`memoryhub.sources` says what the seeds are).

    ``format`` (a callable over the items) replaces the lines. No items, or a format
    that renders nothing, gives ``None``: never an empty header.
    """
    if not items:
        return None
    body = grounding_lines(items) if format is None else format(list(items))
    if not body or not body.strip():
        return None
    return f"Relevant context:\n{body}"
