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

import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.contrib.postgres.search import SearchQuery, SearchRank
from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import CharField, F, FloatField, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Now
from pgvector import Vector
from pgvector.django import CosineDistance, VectorField
from psycopg import ClientCursor

from .. import cache, observe
from ..conf import memoryhub_settings
from ..embedders import Embedder
from ..exceptions import UnknownSource, ValidationFailed
from ..filters import compile_where
from ..items import MemoryItem, dedupe_items, grounding_lines, sort_by_score
from ..models import (
    LIVE_SQL,
    SEARCH_CONFIG,
    KnowledgeBase,
    MemoryRecord,
    MemoryRecordQuerySet,
    Observation,
)
from ..scope import Scope, tenant_scope
from . import indexing

__all__ = [
    "MODES",
    "RRF_K",
    "QueryRequest",
    "QueryResult",
    "query",
    "render_grounding",
]

MODES = ("vector", "keyword", "hybrid")
RRF_K = 60
#: pgvector's default ``hnsw.ef_search``: the least a tenant index is searched with.
MIN_EF_SEARCH = 40
MAX_FILTER_VALUES = 50

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class QueryRequest:
    """A validated query. Build with :meth:`build` from raw (e.g. JSON) input."""

    query: str
    k: int
    sources: tuple[str, ...] | None = None
    namespaces: tuple[str, ...] = ("",)
    kinds: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    where: dict[str, Any] | None = None
    mode: str = "hybrid"
    min_score: float | None = None

    @classmethod
    def build(cls, /, **raw: Any) -> QueryRequest:
        """Validate raw input; raise :class:`ValidationFailed` naming each bad field."""
        settings = memoryhub_settings
        errors: dict[str, list[str]] = {}
        unknown = sorted(set(raw) - {f for f in cls.__dataclass_fields__} - {"format"})
        for name in unknown:
            errors.setdefault(name, []).append("is not a query field.")
        text = raw.get("query")
        if not isinstance(text, str) or not text.strip():
            errors.setdefault("query", []).append("must be a non-empty string.")
        elif len(text) > settings.MAX_QUERY_LENGTH:
            errors.setdefault("query", []).append(
                f"is longer than {settings.MAX_QUERY_LENGTH} characters."
            )
        elif "\x00" in text:
            errors.setdefault("query", []).append("may not contain NUL characters.")
        k = raw.get("k", settings.DEFAULT_K)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= settings.MAX_K:
            errors.setdefault("k", []).append(f"must be an integer from 1 to {settings.MAX_K}.")
        mode = raw.get("mode", "hybrid")
        if mode not in MODES:
            errors.setdefault("mode", []).append(f"must be one of {', '.join(MODES)}.")
        min_score = raw.get("min_score")
        if min_score is not None and (
            isinstance(min_score, bool)
            or not isinstance(min_score, int | float)
            or not -1.0 <= float(min_score) <= 1.0
        ):
            errors.setdefault("min_score", []).append("must be a number from -1 to 1.")
        lists: dict[str, tuple[str, ...] | None] = {}
        for name in ("sources", "namespaces", "kinds", "tags"):
            lists[name] = _string_list(raw.get(name), name, errors)
        if lists["kinds"]:
            for index, kind in enumerate(lists["kinds"]):
                if kind not in MemoryRecord.Kind.values:
                    errors.setdefault(f"kinds[{index}]", []).append(
                        f"must be one of {', '.join(MemoryRecord.Kind.values)}."
                    )
        where = raw.get("where")
        if where is not None:
            try:
                compile_where(where)
            except ValidationFailed as exc:
                for path, messages in exc.errors.items():
                    errors.setdefault(path, []).extend(messages)
        if errors:
            raise ValidationFailed(errors)
        return cls(
            query=text.strip(),  # type: ignore[union-attr]
            k=k,
            sources=lists["sources"],
            namespaces=lists["namespaces"] or ("",),
            kinds=lists["kinds"],
            tags=lists["tags"],
            where=where or None,
            mode=mode,
            min_score=None if min_score is None else float(min_score),
        )

    def canonical(self) -> dict[str, Any]:
        """The normalised request, for cache keys: order-insensitive lists sorted."""
        return {
            "query": self.query,
            "k": self.k,
            "sources": sorted(self.sources) if self.sources is not None else None,
            "namespaces": sorted(self.namespaces),
            "kinds": sorted(self.kinds) if self.kinds is not None else None,
            "tags": sorted(self.tags) if self.tags is not None else None,
            "where": self.where,
            "mode": self.mode,
            "min_score": self.min_score,
        }


def _string_list(value: Any, name: str, errors: dict[str, list[str]]) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple):
        errors.setdefault(name, []).append("must be a list of strings.")
        return None
    if len(value) > MAX_FILTER_VALUES:
        errors.setdefault(name, []).append(f"at most {MAX_FILTER_VALUES} values.")
        return None
    result: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or "\x00" in item or len(item) > 255:
            errors.setdefault(f"{name}[{index}]", []).append("must be a string.")
        elif item not in result:
            result.append(item)
    return tuple(result)


@dataclass
class QueryResult:
    items: list[MemoryItem] = field(default_factory=list)
    cached: bool = False
    strategy: str = ""


# --- candidates ------------------------------------------------------------------------


def _base_queryset(scope: Scope, request: QueryRequest) -> MemoryRecordQuerySet:
    # Now(), not the clock: the compiled statement is reused, and expiry is the server's now.
    records = MemoryRecord.objects.live(now=Now()).in_namespaces(list(request.namespaces))
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
    return records


def _scope_size(scope: Scope, records: QuerySet[MemoryRecord], limit: int, description: str) -> int:
    """How many rows the filter selects, counting at most ``limit + 1``.

    The count decides the plan, not the answer, so it is cached per domain generation
    (any write invalidates it) even when query results are not.
    """
    key = cache.plan_key(scope, f"{description}|{limit}")
    size = cache.get_plan(key)
    if size is None:
        size = records.values("pk")[: limit + 1].count()
        cache.set_plan(key, size)
    return int(size)


class _Slot:
    """A parameter of a compiled statement filled in per query (found by identity)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<slot {self.name}>"


VECTOR = _Slot("query vector")
WORDS = _Slot("query words")


@dataclass(frozen=True)
class _Leg:
    """A ranked candidate list: one statement selecting ``(id, value, *ROW_FIELDS)``, best
    first, with slots for the query, and how ``value`` (a distance or a rank) becomes the
    mode's score."""

    sql: str
    params: tuple[Any, ...]
    to_score: Callable[[float], float]
    slot: _Slot

    @classmethod
    def compile(
        cls, queryset: QuerySet[Any, Any], to_score: Callable[[float], float], slot: _Slot
    ) -> _Leg | None:
        """None when the filter can match nothing (e.g. ``kinds=[]``): nothing to send."""
        try:
            sql, params = queryset.query.sql_with_params()
        except EmptyResultSet:
            return None
        return cls(sql, tuple(params), to_score, slot)

    def bind(self, values: dict[_Slot, Any]) -> list[Any]:
        return [values[p] if isinstance(p, _Slot) else p for p in self.params]


@dataclass(frozen=True)
class _Plan:
    """The compiled legs of one request shape (filters, mode, k) in one domain generation,
    the strategy they use, and the settings that strategy needs."""

    vector: _Leg | None
    keyword: _Leg | None
    strategy: str
    settings: dict[str, str]
    #: During a change of embedder: a vector leg per previous model still holding
    #: vectors in the scope, with its model's name (the query is embedded once per model).
    previous: tuple[tuple[str, _Leg], ...] = ()


def _vector_leg(
    scope: Scope,
    request: QueryRequest,
    records: MemoryRecordQuerySet,
    depth: int,
    embedder: Embedder | None = None,
    slot: _Slot | None = None,
) -> tuple[_Leg | None, str, dict[str, str]]:
    """The vector leg over ``embedder``'s vectors (default: the configured model's), the
    plan it uses, and the settings that plan needs (HNSW)."""
    embedder = embedder or memoryhub_settings.embedder()
    slot = slot or VECTOR
    scoped = records.indexed_with(embedder.name)
    threshold = memoryhub_settings.EXACT_SCAN_THRESHOLD
    filters = {**request.canonical(), "query": None, "k": None, "mode": None, "min_score": None}
    description = cache.canonical_json({**filters, "model": embedder.name})
    settings: dict[str, str] = {}
    if threshold > 0 and _scope_size(scope, scoped, threshold, description) <= threshold:
        # Not the indexed expression: the planner scans the filtered rows exactly.
        expression: Any = F("embedding")
        strategy = "exact"
    else:
        expression = Cast("embedding", VectorField(dimensions=embedder.dimensions))
        ef_search = memoryhub_settings.HNSW_EF_SEARCH
        strategy = "hnsw"
        share = indexing.tenant_index_share(scope, embedder.name)
        if share is not None:
            # The domain's own index (the planner picks it: the predicate matches and it
            # is smaller): the same effort per record of the domain as the shared index
            # gives it, so the same recall or better, at ``share`` of the cost.
            floor = min(MIN_EF_SEARCH, ef_search)  # never above the operator's setting
            ef_search, strategy = max(round(ef_search * share), floor), "hnsw-tenant"
        # enable_sort=off: we chose HNSW for this scope, and a sort would mean the planner
        # fell back to scanning the whole scope (it underestimates large tenants).
        settings = {
            "hnsw.iterative_scan": "relaxed_order",
            "enable_sort": "off",
            "hnsw.max_scan_tuples": str(int(memoryhub_settings.HNSW_MAX_SCAN_TUPLES)),
            "hnsw.ef_search": str(min(max(ef_search, depth), 1000)),
        }
    vector = RawSQL("%s", (slot,), output_field=VectorField())
    # The distance is computed once per row: ORDER BY reuses the SELECT column.
    ranked = (
        scoped.annotate(distance=CosineDistance(expression, vector))
        .order_by("distance")
        .values_list("id", "distance", *ROW_FIELDS)[:depth]
    )
    return _Leg.compile(ranked, lambda distance: 1.0 - distance, slot), strategy, settings


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


def _keyword_words(text: str) -> str | None:
    """The query's words as a raw tsquery OR (stemmed, stop words dropped by PostgreSQL:
    any match ranks); None when it has no words."""
    words = _WORD.findall(text.lower())[:64]
    return " | ".join(words) if words else None


def _keyword_leg(records: QuerySet[MemoryRecord], depth: int) -> _Leg | None:
    """The best ``depth`` full-text matches, ranked by ``ts_rank`` normalised to [0, 1)."""
    words = RawSQL("%s", (WORDS,), output_field=CharField())
    search = SearchQuery(words, config=SEARCH_CONFIG, search_type="raw")
    rank = Cast(SearchRank(F("search_vector"), search, normalization=32), FloatField())
    ranked = (
        records.filter(search_vector=search)
        .annotate(rank=rank)
        .order_by("-rank", "-created_at")
        .values_list("id", "rank", *ROW_FIELDS)[:depth]
    )
    return _Leg.compile(ranked, float, WORDS)


#: Compiled plans by request shape, settings and domain generation, in this process:
#: building and compiling the querysets cost about 1 ms a query on the benchmark machine,
#: as much as a small tenant's statement. Kept at most ``PLAN_SECONDS``.
_PLANS: OrderedDict[str, tuple[float, _Plan]] = OrderedDict()
_PLANS_LOCK = threading.Lock()
PLANS_KEPT = 512
PLAN_SECONDS = 60.0


def clear_plans() -> None:
    """Forget this process's compiled plans (tests)."""
    with _PLANS_LOCK:
        _PLANS.clear()


def _plan(scope: Scope, request: QueryRequest, gen: int | None = None) -> _Plan:
    """The compiled legs for ``request``'s shape, from this process's plans when the
    domain has not changed since (same generation ``gen``, default the current one), nor
    the settings the plan depends on, and the plan is younger than ``PLAN_SECONDS``."""
    settings = memoryhub_settings
    shape = {
        **request.canonical(),
        "query": None,
        "min_score": None,
        "model": settings.embedder().name,
        "previous": settings.PREVIOUS_EMBEDDERS,
        "exact": settings.EXACT_SCAN_THRESHOLD,
        "ef": settings.HNSW_EF_SEARCH,
        "tuples": settings.HNSW_MAX_SCAN_TUPLES,
    }
    key = cache.plan_key(scope, "statements|" + cache.canonical_json(shape), gen)
    now = time.monotonic()
    with _PLANS_LOCK:
        found = _PLANS.get(key)
        if found is not None and now - found[0] < PLAN_SECONDS:
            _PLANS.move_to_end(key)
            return found[1]
    with tenant_scope(scope):
        records = _base_queryset(scope, request)
        depth = max(request.k * 4, 40) if request.mode == "hybrid" else request.k * 2 + 10
        vector: _Leg | None = None
        keyword: _Leg | None = None
        hnsw: dict[str, str] = {}
        strategy = request.mode
        previous: list[tuple[str, _Leg]] = []
        if request.mode in ("vector", "hybrid"):
            vector, chosen, hnsw = _vector_leg(scope, request, records, depth)
            for name, embedder in _previous_embedders(scope):
                leg, _, leg_settings = _vector_leg(
                    scope, request, records, depth, embedder, _Slot(f"query vector {name}")
                )
                if leg is not None:
                    previous.append((name, leg))
                    hnsw = hnsw or leg_settings  # an HNSW leg needs its iterative scan
            strategy = chosen if request.mode == "vector" else f"hybrid+{chosen}"
            if previous:
                strategy += f"+{len(previous) + 1}models"
        if request.mode in ("keyword", "hybrid"):
            keyword = _keyword_leg(records, depth)
    plan = _Plan(vector, keyword, strategy, hnsw, tuple(previous))
    with _PLANS_LOCK:
        _PLANS[key] = (now, plan)
        while len(_PLANS) > PLANS_KEPT:
            _PLANS.popitem(last=False)
    return plan


_SET = "SELECT " + ", ".join(["set_config(%s, %s, true)"] * 4)


def _binds_client_side() -> bool:
    """Django's psycopg 3 default; with ``server_side_binding`` one message cannot hold
    several statements."""
    connection.ensure_connection()
    return isinstance(connection.connection, psycopg.Connection) and (
        connection.connection.cursor_factory is not None
        and issubclass(connection.connection.cursor_factory, ClientCursor)
    )


def _reset_value(cursor: Any, name: str) -> str:
    cursor.execute("SELECT reset_val FROM pg_settings WHERE name = %s", [name])
    row = cursor.fetchone()
    return str(row[0]) if row else ""


def _run(
    legs: Sequence[_Leg | None], values: dict[_Slot, Any], settings: dict[str, str]
) -> tuple[list[list[tuple[Any, float]]], dict[Any, dict[str, Any]]]:
    """Each leg's ``(id, score)`` list, best first, and the candidates' rows by id, from
    one round trip when possible; ``values`` fill the legs' slots.

    The statements (and the transaction-local ``settings``) go to PostgreSQL as one
    message when the connection binds parameters client-side (Django's default) and no
    transaction is open: one implicit transaction, so the settings end with it. Inside a
    transaction they are sent one by one and the settings restored afterwards.
    """
    # A leg whose slot has no value (a query without words) is not sent.
    runnable = [leg if leg and values.get(leg.slot) is not None else None for leg in legs]
    compiled = [(leg.sql, leg.bind(values)) for leg in runnable if leg is not None]
    names = list(settings)
    assert len(names) in (0, 4)
    results: list[list[tuple[Any, Any]]] = []
    if not compiled:
        pass
    elif connection.get_autocommit() and not connection.in_atomic_block and _binds_client_side():
        # One message, one implicit transaction: the settings end with it.
        statements = [sql for sql, _ in compiled]
        params: list[Any] = [p for _, leg_params in compiled for p in leg_params]
        if names:
            statements.insert(0, _SET)
            params[:0] = [v for name in names for v in (name, settings[name])]
        with connection.cursor() as cursor:
            cursor.execute(";\n".join(statements), params)
            if names:
                cursor.nextset()
            for index in range(len(compiled)):
                if index:
                    cursor.nextset()
                results.append(cursor.fetchall())
    else:
        with transaction.atomic(), connection.cursor() as cursor:
            saved: list[Any] = []
            if names:
                # missing_ok: hnsw.* exist only once pgvector is loaded in the session.
                cursor.execute(
                    "SELECT " + ", ".join(["current_setting(%s, true)"] * len(names)), names
                )
                saved = list(cursor.fetchone())
                cursor.execute(_SET, [v for name in names for v in (name, settings[name])])
            for sql, leg_params in compiled:
                cursor.execute(sql, leg_params)
                results.append(cursor.fetchall())
            # Only on success: after an error the transaction is aborted anyway, and a
            # restore would hide the error. Inside the caller's transaction the
            # settings would otherwise outlive this query (SET LOCAL ends with the
            # outermost transaction, not with a savepoint).
            restore = [
                v
                for name, value in zip(names, saved, strict=True)
                for v in (name, value if value is not None else _reset_value(cursor, name))
            ]
            if restore:
                cursor.execute(_SET, restore)
    found = iter(results)
    ranked: list[list[tuple[Any, float]]] = []
    rows: dict[Any, dict[str, Any]] = {}
    for leg in runnable:
        if leg is None:
            ranked.append([])
            continue
        leg_rows = next(found)
        ranked.append([(row[0], leg.to_score(float(row[1]))) for row in leg_rows])
        rows.update((row[0], _row(row[0], row[2:])) for row in leg_rows)
    return ranked, rows


#: What an item needs of its record, besides its id; the candidate statements select it,
#: so a query's rows come with its ranking, in the same round trip.
ROW_FIELDS: tuple[str, ...] = ("content", "knowledge_base__name", "metadata", "key", "kind")
ROW_FIELDS += ("namespace", "tags", "created_at", "derived_from")


def _row(pk: Any, values: Sequence[Any]) -> dict[str, Any]:
    """A record's item fields from a plain cursor row (``ROW_FIELDS`` order)."""
    row = dict(zip(ROW_FIELDS, values, strict=True))
    row["id"] = pk
    row["metadata"] = _json(row["metadata"])
    return row


def _fetch(scope: Scope, ids: list[Any]) -> dict[Any, dict[str, Any]]:
    """The rows of a cached ranking's records, read again (erased or expired ones are
    gone).

    One primary-key lookup on every cache hit, so plain SQL: the ORM's compilation cost
    more than the statement (about 1 ms of 1.5 on the benchmark machine). The tenant is
    in the WHERE clause, as the scoped manager would put it.
    """
    if not ids:
        return {}
    records, knowledge_bases = MemoryRecord._meta.db_table, KnowledgeBase._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT r.id, r.content, kb.name, r.metadata, r.key, r.kind, r.namespace, r.tags,"
            f" r.created_at, r.derived_from FROM {records} r JOIN {knowledge_bases} kb"
            " ON kb.id = r.knowledge_base_id"
            " WHERE r.org_id = %s AND r.domain_id = %s AND r.id = ANY(%s)"
            f" AND {LIVE_SQL.format(table='r')}",
            [scope.org_id, scope.domain_id, list(ids)],
        )
        rows = cursor.fetchall()
    return {row[0]: _row(row[0], row[1:]) for row in rows}


def _json(value: Any) -> Any:
    """A jsonb column read without the ORM (Django's psycopg setup returns it as text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def _to_item(row: dict[str, Any], score: float) -> MemoryItem:
    return MemoryItem(
        content=row["content"],
        source=row["knowledge_base__name"],
        score=score,
        metadata=row["metadata"],
        id=str(row["id"]),
        key=row["key"],
        kind=row["kind"],
        namespace=row["namespace"],
        tags=tuple(row["tags"]),
        created_at=row["created_at"],
        derived_from=tuple(row["derived_from"] or ()),
    )


def _fuse(
    vector: list[tuple[Any, float]], keyword: list[tuple[Any, float]]
) -> list[tuple[Any, float]]:
    """Reciprocal-rank fusion of two ``(id, score)`` rankings."""
    scores: dict[Any, float] = {}
    for ranking in (vector, keyword):
        for rank, (pk, _) in enumerate(ranking, start=1):
            scores[pk] = scores.get(pk, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])


#: How the vector rankings of two models merge during a model change: "calibrated"
#: moves the previous model's similarities onto the configured model's mean and spread
#: over the candidates (the configured model's scores stay cosines); "raw" compares the
#: cosines as they are, "rrf" interleaves by rank, "normalized" divides each model's by
#: its best. Measured by ``python -m benchmarks.model_change`` (benchmarks/REPORT.md):
#: calibrated keeps recall@10 of rrf and normalized (0.99) with recall@1 near raw's.
MODEL_MERGE_DEFAULT = "calibrated"
MODEL_MERGE = MODEL_MERGE_DEFAULT


def merge_models(
    rankings: Sequence[list[tuple[Any, float]]], how: str | None = None
) -> list[tuple[Any, float]]:
    """One vector ranking from disjoint per-model rankings (a record has one vector)."""
    how = how or MODEL_MERGE
    if how == "calibrated":
        return _calibrated(rankings)
    merged: list[tuple[Any, float]] = []
    for ranking in rankings:
        if not ranking:
            continue
        if how == "rrf":
            merged.extend((pk, 1.0 / (RRF_K + rank)) for rank, (pk, _) in enumerate(ranking, 1))
        elif how == "normalized" and ranking[0][1] > 0:
            best = ranking[0][1]
            merged.extend((pk, score / best) for pk, score in ranking)
        else:
            merged.extend(ranking)
    return sorted(merged, key=lambda pair: -pair[1])


#: The candidates each model's ranking needs for a calibrated merge (a small scope's
#: few candidates say little about a model's scale: its cosines are compared as they are).
CALIBRATION_MIN = 10


def _calibrated(rankings: Sequence[list[tuple[Any, float]]]) -> list[tuple[Any, float]]:
    """Each previous model's similarities moved onto the configured model's scale (the
    first ranking): the same mean and spread over their candidates, so a record that
    stands out under its own model stands out as much under the other's. The configured
    model's scores stay its cosines; too few candidates to measure a spread
    (``CALIBRATION_MIN``): as they are."""
    import statistics

    target = rankings[0]
    merged = list(target)
    if len(target) < CALIBRATION_MIN:
        return sorted([pair for ranking in rankings for pair in ranking], key=lambda p: -p[1])
    mean, spread = statistics.fmean(s for _, s in target), statistics.pstdev(s for _, s in target)
    for ranking in rankings[1:]:
        scores = [score for _, score in ranking]
        own_spread = statistics.pstdev(scores) if len(scores) >= CALIBRATION_MIN else 0.0
        if own_spread <= 0 or spread <= 0:
            merged.extend(ranking)
            continue
        own_mean = statistics.fmean(scores)
        merged.extend(
            (pk, max(-1.0, min(1.0, mean + (score - own_mean) * spread / own_spread)))
            for pk, score in ranking
        )
    return sorted(merged, key=lambda pair: -pair[1])


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
    legs = [plan.vector, plan.keyword, *(leg for _, leg in plan.previous)]
    (vector, keyword, *previous), rows = _run(legs, values, plan.settings)
    # relaxed_order may return the vector leg slightly out of order.
    for ranking in (vector, *previous):
        ranking.sort(key=lambda pair: -pair[1])
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
