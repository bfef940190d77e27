"""Querying memory: vector, keyword and hybrid search with tenant and metadata filters.

Scores are comparable within a mode:

* ``vector``: cosine similarity in [-1, 1] between the query's and the record's
  embeddings (the configured model only; records still pending are not found);
* ``keyword``: PostgreSQL full-text rank, ``ts_rank`` normalised to [0, 1)
  (``rank / (rank + 1)``), over the generated ``search_vector`` (finds pending records);
* ``hybrid`` (default): reciprocal-rank fusion, ``sum(1 / (RRF_K + rank))`` over the two
  lists, with ``RRF_K = 60`` (Cormack et al.); at most ``2 / 61`` ≈ 0.0328.

Vector search picks its plan from the size of the filtered scope: up to
``MEMORYHUB["EXACT_SCAN_THRESHOLD"]`` candidate rows it scans them exactly (btree on the tenant
columns, then a sort: recall 1.0), above it it uses the model's HNSW index with pgvector
iterative scans so a selective filter still yields k rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgvector import Vector

from ... import cache, observe
from ...conf import memoryhub_settings
from ...items import MemoryItem, dedupe_items, grounding_lines, sort_by_score
from ...models import Observation
from ...scope import Scope
from .execution import _fetch, _run, _to_item
from .fusion import RRF_K, _fuse, merge_models, union
from .plans import VECTOR, WORDS, _keyword_words, _plan, _Slot, clear_plans
from .request import MAX_FILTER_VALUES, MODES, QueryRequest, QueryResult

__all__ = [
    "MAX_FILTER_VALUES",
    "MODES",
    "RRF_K",
    "VECTOR",
    "QueryRequest",
    "QueryResult",
    "clear_plans",
    "merge_models",
    "query",
    "render_grounding",
]


def _rank(
    scope: Scope, request: QueryRequest, gen: int
) -> tuple[list[tuple[Any, float]], str, dict[Any, dict[str, Any]]]:
    """The best ``(id, score)`` pairs for ``request`` (twice k), the strategy used, and
    the candidates' rows."""
    plan = _plan(scope, request, gen)
    values: dict[_Slot, Any] = {WORDS: _keyword_words(request.query)}
    if plan.vector is not None:
        values[VECTOR] = Vector(memoryhub_settings.embedder().embed_query(request.query)).to_text()
    for name, leg in plan.previous:
        embedder = memoryhub_settings.embedder_for(name)
        assert embedder is not None  # the plan was built with it
        values[leg.slot] = Vector(embedder.embed_query(request.query)).to_text()
    legs = [plan.vector, plan.keyword, plan.delta, *(leg for _, leg in plan.previous)]
    (vector, keyword, delta, *rest), rows = _run(legs, values, plan.settings)
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
        ranked = _fuse(vector, keyword)
    if request.min_score is not None:
        ranked = [(pk, score) for pk, score in ranked if score >= request.min_score]
    # Twice k: room for duplicates that merge away.
    return ranked[: request.k * 2], plan.strategy, rows


def _items(
    scope: Scope,
    request: QueryRequest,
    ranked: list[tuple[Any, float]],
    rows: dict[Any, dict[str, Any]] | None = None,
    *,
    observed: bool,
) -> list[MemoryItem]:
    """The ranked records as items, duplicates merged; ``observed`` records the merge.

    ``rows`` are the candidates' rows when the ranking was just computed; a cached
    ranking reads them again (a record erased since is simply not there).
    """
    if rows is None:
        rows = _fetch(scope, [pk for pk, _ in ranked])
    items = [_to_item(rows[pk], score) for pk, score in ranked if pk in rows]
    merged, collapsed = dedupe_items(items, "id")
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
    return sort_by_score(merged)[: request.k]


def query(scope: Scope, request: QueryRequest | None = None, /, **raw: Any) -> QueryResult:
    """Search ``scope``'s memory. Pass a :class:`QueryRequest` or raw fields.

    The ranking (ids and scores, never content) is cached per (scope, domain
    generation, canonical request); any write or forget in the domain invalidates it, and
    a hit reads the rows again, so erased memory cannot come back from the cache.
    """
    if not isinstance(scope, Scope):
        raise TypeError("query() needs a Scope.")
    if request is None:
        request = QueryRequest.build(**raw)
    # The model is part of the key: after a change of embedder, old entries are not reused.
    canonical = {**request.canonical(), "model": memoryhub_settings.embedder().name}
    # One generation for the read, the plan and the write (one cache round trip): a write
    # between them moves the generation on, and this (older) ranking must not be stored
    # under the new one.
    gen = cache.generation(scope)
    key = cache.query_key(scope, canonical, gen)
    cached = cache.get_query(key)
    if cached is not None:
        ranked, strategy = cached
        items = _items(scope, request, ranked, observed=False)
        return QueryResult(items=items, cached=True, strategy=strategy)
    ranked, strategy, rows = _rank(scope, request, gen)
    cache.set_query(key, (ranked, strategy))
    items = _items(scope, request, ranked, rows, observed=True)
    return QueryResult(items=items, strategy=strategy)


def render_grounding(items: Sequence[MemoryItem], format: Any = None) -> str | None:
    """The "Relevant context:" block of seed 003: one ``[source] content`` line per item.

    ``format`` (a callable over the items) replaces the lines. No items, or a format
    that renders nothing, gives ``None``: never an empty header.
    """
    if not items:
        return None
    body = grounding_lines(items) if format is None else format(list(items))
    if not body or not body.strip():
        return None
    return f"Relevant context:\n{body}"
