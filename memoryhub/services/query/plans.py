"""Candidate statements: the vector legs (one per model the scope holds) and the keyword
leg of a request shape, compiled once per domain generation and kept in this process."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cachetools import TTLCache
from django.contrib.postgres.search import SearchQuery, SearchRank
from django.core.exceptions import EmptyResultSet
from django.db.models import BooleanField, CharField, F, FloatField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Now
from pgvector.django import CosineDistance, VectorField

from tenants.models import Domain

from ... import cache
from ...conf import memoryhub_settings
from ...embedders import Embedder
from ...embedders.base import DEFAULT_HYBRID_VECTOR_WEIGHT
from ...exceptions import UnknownSource
from ...filters import compile_where
from ...models import (
    SEARCH_CONFIG,
    KnowledgeBase,
    MemoryRecord,
    MemoryRecordQuerySet,
    occurred,
    valid_q,
)
from ...scope import Scope, tenant_scope
from .. import filter_indexes, indexing, vector_indexes, word_statistics
from .request import QueryRequest

#: pgvector's default ``hnsw.ef_search``: the least a tenant index is searched with by a
#: hybrid query's vector leg (one of its two candidate lists, depth 40 or more).
MIN_EF_SEARCH = 40
#: The least a tenant index is searched with by a vector query (the answer itself): a
#: share-scaled ``ef_search`` below it loses recall against exact search that a little
#: more search time buys back.
MIN_EF_SEARCH_VECTOR = 100
#: An own index holding more records than this is searched by a vector query with at
#: least :data:`MIN_EF_SEARCH_VECTOR_LARGE`: recall at a fixed ``ef_search`` falls as the
#: graph grows.
LARGE_OWN_INDEX_RECORDS = 100_000
MIN_EF_SEARCH_VECTOR_LARGE = 200
#: ... and a hybrid query's vector leg with at least this. A share-scaled ``ef_search``
#: (say 200 x 0.3 = 60) is too low for a large graph: a fused list holds only what its
#: legs find, so hybrid would answer worse than vector mode.
MIN_EF_SEARCH_LARGE = 100


#: What an item needs of its record, besides its id; the candidate statements select it,
#: so a query's rows come with its ranking, in the same round trip (``occurred``: the
#: ``models.occurred`` expression, which the legs annotate).
ROW_FIELDS: tuple[str, ...] = ("content", "knowledge_base__name", "metadata", "key", "kind")
ROW_FIELDS += ("namespace", "tags", "created_at", "derived_from", "occurred")
ROW_FIELDS += ("valid_from", "valid_until", "superseded_by")


def _base_queryset(scope: Scope, request: QueryRequest) -> MemoryRecordQuerySet:
    # Now(), not the clock: the compiled statement is reused, and expiry is the server's now.
    records = (
        MemoryRecord.objects.live(now=Now())
        .filter(valid_q(request.as_of, as_of=True) if request.as_of is not None else valid_q(Now()))
        .in_namespaces(list(request.namespaces or ("",)))
        .occurred_between(request.occurred_after, request.occurred_before)
    )
    if request.sources is not None:
        knowledge_bases = dict(
            KnowledgeBase.objects.filter(name__in=request.sources).values_list("name", "pk")
        )
        for name in request.sources:
            if name not in knowledge_bases:
                raise UnknownSource(name)
        records = records.filter(knowledge_base_id__in=list(knowledge_bases.values()))
    if request.kinds is not None:
        records = records.filter(kind__in=list(request.kinds))
    if request.tags:
        records = records.filter(tags__contains=list(request.tags))
    if request.where:
        records = records.filter(compile_where(request.where))
    if request.key_prefix is not None:
        records = records.filter(key__startswith=request.key_prefix)
    return records


def _scope_size(scope: Scope, records: QuerySet[MemoryRecord], limit: int, description: str) -> int:
    """How many rows the filter selects, counting at most ``limit + 1``.

    The count decides the plan, not the answer, so it is cached per domain generation
    (any write invalidates it) even when query results are not.
    """
    key = cache.plan_key(scope, f"{description}|{limit}")
    size = cache.get_plan(key)
    if size is None:
        size = records.order_by().values("pk")[: limit + 1].count()
        cache.set_plan(key, size)
    return int(size)


class Slot:
    """A parameter of a compiled statement filled in per query (found by identity)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<slot {self.name}>"


VECTOR = Slot("query vector")
WORDS = Slot("query words")


@dataclass(frozen=True)
class Leg:
    """A ranked candidate list: one statement selecting ``(id, value, *ROW_FIELDS)``, best
    first, with slots for the query, and how ``value`` (a distance or a rank) becomes the
    mode's score."""

    sql: str
    params: tuple[Any, ...]
    to_score: Callable[[float], float]
    slot: Slot

    @classmethod
    def compile(
        cls, queryset: QuerySet[Any, Any], to_score: Callable[[float], float], slot: Slot
    ) -> Leg | None:
        """None when the filter can match nothing (e.g. ``kinds=[]``): nothing to send."""
        try:
            sql, params = queryset.query.sql_with_params()
        except EmptyResultSet:
            return None
        return cls(sql, tuple(params), to_score, slot)

    def bind(self, values: dict[Slot, Any]) -> list[Any]:
        return [values[p] if isinstance(p, Slot) else p for p in self.params]


@dataclass(frozen=True)
class Plan:
    """The compiled legs of one request shape (filters, mode, k) in one domain generation,
    the strategy they use, and the settings that strategy needs."""

    vector: Leg | None
    keyword: Leg | None
    strategy: str
    settings: dict[str, str]
    #: During a change of embedder: the vector legs of each previous model still holding
    #: vectors in the scope, with its model's name (the query is embedded once per model).
    previous: tuple[tuple[str, Leg], ...] = ()
    #: Hybrid: the vector leg's share of the fused score (:func:`hybrid_weight`).
    vector_weight: float = DEFAULT_HYBRID_VECTOR_WEIGHT
    #: The exact scan of the vectors stored in bulk that the HNSW index the vector leg
    #: searches does not hold yet (the domain's delta), when the scope has any.
    delta: Leg | None = None
    #: A large domain's keyword leg over every record holding any word of the query,
    #: sent when ``keyword`` (its rarest words' records) returns fewer than k.
    every_keyword: Leg | None = None
    #: How many candidates each leg fetches.
    depth: int = 0


def _vector_leg(
    scope: Scope,
    request: QueryRequest,
    records: MemoryRecordQuerySet,
    depth: int,
    embedder: Embedder | None = None,
    slot: Slot | None = None,
) -> tuple[Leg | None, Leg | None, str, dict[str, str]]:
    """The vector leg over ``embedder``'s vectors (default: the configured model's), the
    exact leg over its delta (None when the scope has none), the plan they use, and the
    settings that plan needs (HNSW)."""
    embedder = embedder or memoryhub_settings.embedder()
    slot = slot or VECTOR
    scoped = records.indexed_with(embedder.name)
    threshold = memoryhub_settings.EXACT_SCAN_THRESHOLD
    filters = {
        **request.canonical(),
        **dict.fromkeys(("query", "k", "mode", "min_score", "rerank", "recency_half_life")),
    }
    description = cache.canonical_json({**filters, "model": embedder.name})
    settings: dict[str, str] = {}
    delta: MemoryRecordQuerySet | None = None
    exact_up_to = threshold
    if threshold > 0 and filter_indexes.finds(request.where):
        # Filtered on an indexed key: its rows are found by that index, and scanned
        # exactly up to a larger bound.
        exact_up_to = threshold * filter_indexes.EXACT_SCAN_FACTOR
    if threshold > 0 and _scope_size(scope, scoped, exact_up_to, description) <= exact_up_to:
        # Not the indexed expression: the planner scans the filtered rows exactly.
        expression: Any = F("embedding")
        strategy = "exact"
    else:
        expression = Cast("embedding", VectorField(dimensions=embedder.dimensions))
        ef_search = memoryhub_settings.HNSW_EF_SEARCH
        strategy = "hnsw"
        own = vector_indexes.own_index(scope, embedder.name)
        if own is not None:
            # The domain's own index (the planner picks it: the predicate matches and it
            # is smaller): the same effort per record of the domain as a search of every
            # vector of the model would give it, so the same recall or better, at
            # ``share`` of the cost.
            ef_search, strategy = _own_index_effort(request, own, ef_search), "hnsw-tenant"
            # What it holds (the predicate, as its index's), and what it does not yet.
            delta = scoped.filter(vector_batch__gt=own.covers)
            scoped = scoped.filter(Q(vector_batch__isnull=True) | Q(vector_batch__lte=own.covers))
        else:
            # The shared index holds the vectors stored row by row.
            delta = scoped.filter(vector_batch__isnull=False)
            scoped = scoped.filter(vector_batch__isnull=True)
        covers = own.covers if own is not None else None
        if _scope_size(scope, delta, 0, f"{description}|delta>{covers}") == 0:
            delta = None
        else:
            strategy += "+delta"
        # enable_sort=off: we chose HNSW for this scope, and a sort would mean the planner
        # fell back to scanning the whole scope (it underestimates large tenants).
        settings = {
            "hnsw.iterative_scan": "relaxed_order",
            "enable_sort": "off",
            "hnsw.max_scan_tuples": str(int(memoryhub_settings.HNSW_MAX_SCAN_TUPLES)),
            "hnsw.ef_search": str(min(max(ef_search, depth), 1000)),
        }
    leg = _nearest(scoped, expression, slot, depth)
    if delta is None:
        return leg, None, strategy, settings
    # Not the indexed expression either: an exact scan of the delta's rows (a sort,
    # whatever enable_sort says, since no index can order them).
    return leg, _nearest(delta, F("embedding"), slot, depth), strategy, settings


def _own_index_effort(request: QueryRequest, own: Any, ef_search: int) -> int:
    """``hnsw.ef_search`` for a domain's own index: ``share`` of the setting, the
    effort per record of the domain a search of every vector of the model would give it
    (so the same recall or better), with a floor by mode and size that is never above
    the operator's setting."""
    large = own.covered > LARGE_OWN_INDEX_RECORDS
    if request.mode == "vector":
        least = MIN_EF_SEARCH_VECTOR_LARGE if large else MIN_EF_SEARCH_VECTOR
    else:
        least = MIN_EF_SEARCH_LARGE if large else MIN_EF_SEARCH
    return max(round(ef_search * own.share), min(least, ef_search))


def _nearest(records: MemoryRecordQuerySet, expression: Any, slot: Slot, depth: int) -> Leg | None:
    """The ``depth`` records of ``records`` nearest the vector in ``slot``."""
    vector = RawSQL("%s", (slot,), output_field=VectorField())
    # The distance is computed once per row: ORDER BY reuses the SELECT column.
    ranked = (
        records.annotate(distance=CosineDistance(expression, vector), occurred=occurred())
        .order_by("distance")
        .values_list("id", "distance", *ROW_FIELDS)[:depth]
    )
    return Leg.compile(ranked, _similarity, slot)


def _similarity(distance: float) -> float:
    return 1.0 - distance


#: At most this many previous models serve queries at once (each costs an embedding of
#: the query and a leg): a migration has one; more means re-embedding is overdue.
MAX_PREVIOUS_MODELS = 2


def _previous_embedders(scope: Scope) -> list[tuple[str, Embedder]]:
    """The models other than the configured one whose vectors the scope's domain still
    holds (an embedding-model change in progress), with their embedders; a model no
    embedder is known for is skipped (``PREVIOUS_EMBEDDERS``)."""
    current = memoryhub_settings.embedder().name
    found: list[tuple[str, Embedder]] = []
    for name in indexing.models_in_domain(scope):
        if name == current:
            continue
        embedder = memoryhub_settings.embedder_for(name)
        if embedder is not None:
            found.append((name, embedder))
    return found[:MAX_PREVIOUS_MODELS]


def hybrid_weight(scope: Scope) -> float:
    """The vector leg's share of ``scope``'s hybrid scores: the domain's own weight, else
    ``HYBRID_VECTOR_WEIGHT``, else the configured embedder's ``hybrid_vector_weight``."""
    own = Domain.objects.filter(pk=scope.domain_id).values_list("hybrid_vector_weight").first()
    if own is not None and own[0] is not None:
        return float(own[0])
    if memoryhub_settings.HYBRID_VECTOR_WEIGHT is not None:
        return float(memoryhub_settings.HYBRID_VECTOR_WEIGHT)
    embedder = memoryhub_settings.embedder()
    return float(getattr(embedder, "hybrid_vector_weight", DEFAULT_HYBRID_VECTOR_WEIGHT))


_WORD = re.compile(r"\w+", re.UNICODE)


def keyword_words(text: str) -> str | None:
    """The query's words as a raw tsquery OR (stemmed, stop words dropped by PostgreSQL:
    any match ranks); None when it has no words."""
    words = _WORD.findall(text.lower())[:64]
    return " | ".join(words) if words else None


def _keyword_legs(
    scope: Scope, records: QuerySet[MemoryRecord], depth: int
) -> tuple[Leg | None, Leg | None]:
    """The best ``depth`` full-text matches, ranked by ``ts_rank`` normalised to [0, 1):
    the leg sent first, and the leg sent when the first returns fewer than k (or None).

    Every record holding any word of the query is ranked (an OR), except in a domain
    with word statistics (``services.word_statistics``: a large one): there the first
    leg ranks the records holding the query's rarest words (about
    ``KEYWORD_RANK_BUDGET`` of them; all of its rarest words when each is common), and
    the OR over every record is the second, for a query whose rarest words are held by
    too few records to fill k. Both rank at most
    :func:`~memoryhub.services.word_statistics.ranked_at_most` records there: the first
    of them the GIN index finds (ranking every record of a large domain that holds a
    common word costs time in proportion to the domain).

    Ranking only the records holding two or more of the words first does not pay: the
    pairs' tsquery is evaluated on every row of a small scope, which costs a small
    tenant more than it saves a large one, and raises a large tenant's tail latency.
    """
    words = RawSQL("%s", (WORDS,), output_field=CharField())
    search = SearchQuery(words, config=SEARCH_CONFIG, search_type="raw")
    rank = Cast(SearchRank(F("search_vector"), search, normalization=32), FloatField())
    columns = ("id", "rank", *ROW_FIELDS)

    def ranked(matching: QuerySet[MemoryRecord], most: int | None = None) -> Leg | None:
        candidates = matching.annotate(rank=rank, occurred=occurred())
        if most is None:
            ordered = candidates.order_by("-rank", "-created_at").values_list(*columns)
            return Leg.compile(ordered[:depth], float, WORDS)
        # The first ``most`` matches the index finds, then the best of them: the ranking
        # is of at most ``most`` rows whatever the words.
        leg = Leg.compile(candidates.order_by().values_list(*columns)[:most], float, WORDS)
        if leg is None:
            return None
        created = columns.index("created_at") + 1
        sql = f"SELECT * FROM ({leg.sql}) AS first_found ORDER BY 2 DESC, {created} DESC"
        return Leg(f"{sql} LIMIT {int(depth)}", leg.params, leg.to_score, leg.slot)

    if not word_statistics.applies(scope):
        return ranked(records.filter(search_vector=search)), None
    most = word_statistics.ranked_at_most(depth)
    column = f'"{MemoryRecord._meta.db_table}"."search_vector"'
    match, params = word_statistics.rarest_words_match(
        scope, column, WORDS, word_statistics.budget(depth), depth, most
    )
    # The GIN index finds the records holding the rarest words (written twice in a
    # domain holding much of the table: see rarest_words_match); the whole query's match
    # is checked on those rows only (IS TRUE keeps it out of the index scan).
    matched = RawSQL(
        f"{match} AND ({column} @@ to_tsquery(%s::regconfig, %s)) IS TRUE",
        (*params, SEARCH_CONFIG, WORDS),
        output_field=BooleanField(),
    )
    return ranked(records.filter(matched), most), ranked(records.filter(search_vector=search), most)


#: Compiled plans by request shape, settings and domain generation, in this process:
#: building and compiling the querysets costs about as much as a small tenant's
#: statement. Kept at most ``PLAN_SECONDS``.
PLANS_KEPT = 512
PLAN_SECONDS = 60.0
_PLANS: TTLCache[str, Plan] = TTLCache(maxsize=PLANS_KEPT, ttl=PLAN_SECONDS, timer=time.monotonic)
_PLANS_LOCK = threading.Lock()


def clear_plans() -> None:
    """Forget this process's compiled plans (tests)."""
    with _PLANS_LOCK:
        _PLANS.clear()


def plan_for(
    scope: Scope, request: QueryRequest, gen: int | None = None, candidates: int = 0
) -> Plan:
    """The compiled legs for ``request``'s shape, from this process's plans when the
    domain has not changed since (same generation ``gen``, default the current one), nor
    the settings the plan depends on, and the plan is younger than ``PLAN_SECONDS``.

    Each leg selects at least ``candidates`` rows (the reranker's share), besides its
    room for k."""
    settings = memoryhub_settings
    shape = {
        **request.canonical(),
        "query": None,
        "min_score": None,
        "rerank": None,
        "recency_half_life": None,
        "candidates": candidates,
        "model": settings.embedder().name,
        "previous": settings.PREVIOUS_EMBEDDERS,
        "exact": settings.EXACT_SCAN_THRESHOLD,
        "ef": settings.HNSW_EF_SEARCH,
        "tuples": settings.HNSW_MAX_SCAN_TUPLES,
        "weight": settings.HYBRID_VECTOR_WEIGHT,
        "words": settings.KEYWORD_STATISTICS_MIN_RECORDS,
        "budget": settings.KEYWORD_RANK_BUDGET,
        "indexed": sorted(settings.INDEXED_METADATA_KEYS or ()),
    }
    key = cache.plan_key(scope, "statements|" + cache.canonical_json(shape), gen)
    # No key (the cache did not answer: the domain's generation is not known): no plan
    # of this process can be known to be current.
    if key is not None:
        with _PLANS_LOCK:
            found = _PLANS.get(key)
        if found is not None:
            return found
    with tenant_scope(scope):
        records = _base_queryset(scope, request)
        depth = max(request.k * 4, 40) if request.mode == "hybrid" else request.k * 2 + 10
        depth = max(depth, candidates)
        vector: Leg | None = None
        delta: Leg | None = None
        keyword: Leg | None = None
        every_keyword: Leg | None = None
        hnsw: dict[str, str] = {}
        strategy = request.mode
        previous: list[tuple[str, Leg]] = []
        if request.mode in ("vector", "hybrid"):
            vector, delta, chosen, hnsw = _vector_leg(scope, request, records, depth)
            for name, embedder in _previous_embedders(scope):
                leg, its_delta, _, leg_settings = _vector_leg(
                    scope, request, records, depth, embedder, Slot(f"query vector {name}")
                )
                previous.extend((name, part) for part in (leg, its_delta) if part is not None)
                if leg is not None:
                    hnsw = hnsw or leg_settings  # an HNSW leg needs its iterative scan
            strategy = chosen if request.mode == "vector" else f"hybrid+{chosen}"
            if previous:
                strategy += f"+{len({name for name, _ in previous}) + 1}models"
        if request.mode in ("keyword", "hybrid"):
            keyword, every_keyword = _keyword_legs(scope, records, depth)
        weight = hybrid_weight(scope) if request.mode == "hybrid" else 0.0
    plan = Plan(
        vector, keyword, strategy, hnsw, tuple(previous), weight, delta, every_keyword, depth
    )
    if key is None:
        return plan
    with _PLANS_LOCK:
        _PLANS[key] = plan
    return plan
