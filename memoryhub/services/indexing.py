"""Indexing: embed pending records and store their vectors; a change of embedding model.

The vector indexes themselves are ``services/vector_indexes/``.

``index_records(ids)`` is idempotent: ids that no longer exist (forgotten) or are
already indexed for the current model are skipped, and a vector is stored only if the
record's content is still the content that was embedded (a concurrent update wins).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db import DatabaseError, connection, transaction
from django.db.models import Case, F, QuerySet, Value, When
from django.utils import timezone

from .. import metrics, observe, tracing
from ..cache import bump_generation_on_commit
from ..conf import memoryhub_settings
from ..embedders import EmbedderError
from ..models import MemoryRecord, Observation, WorkerHeartbeat, adjacent_turn_sql
from ..scope import Scope
from . import distribution
from .dispatch import schedule_indexing, send
from .store import bulk
from .store.cluster import on_each_shard
from .vector_indexes import OWN_INDEX_ONLY, ensure_vector_index, fold_delta, own_index, placement

__all__ = [
    "IndexResult",
    "index_records",
    "model_change_progress",
    "models_in_domain",
    "models_in_use",
    "pending_for_sweep",
    "pipeline_status",
    "records_to_reembed",
    "reembed",
    "wait_until_indexed",
]


logger = logging.getLogger(__name__)


@dataclass(slots=True)
class IndexResult:
    indexed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def index_records(
    record_ids: Sequence[str], *, force: bool = False, org_id: int | None = None
) -> IndexResult:
    """Embed and store vectors for ``record_ids`` in one embedder call.

    A batch of at least ``BULK_MIN_RECORDS`` records is stored in bulk (one binary COPY,
    one ``UPDATE``), each domain's vectors where :func:`placement` puts them: outside
    the shared HNSW index when the domain is searched exactly or has (or qualifies
    for) its own index, built in bulk over them by the maintenance task this asks for.
    They are searchable as soon as the batch commits. A smaller batch (an agent's turn)
    is stored row by row into the HNSW indexes, as it always was.

    Records already indexed with the configured model are skipped unless ``force``. A
    record being re-embedded keeps its status and its previous vector until the new one
    is stored: a change of model never hides it from vector search.

    On an embedder error, attempts are counted and :class:`EmbedderError` is raised for
    the caller (the task) to retry; once ``INDEX_MAX_ATTEMPTS`` is reached the records
    are marked ``failed`` with the error, an ``embedding.failed`` observation is
    recorded, and nothing is raised.
    """
    if org_id is None:
        return _index_by_org(record_ids, force=force)
    with tracing.span("memoryhub.index", **{"memoryhub.batch.size": len(record_ids)}) as current:
        result = _index_org(record_ids, force=force, org_id=org_id)
        if current is not None:
            current.set_attribute("gen_ai.memory.record.count", len(result.indexed))
    return result


def _index_org(record_ids: Sequence[str], *, force: bool, org_id: int) -> IndexResult:
    embedder = memoryhub_settings.embedder()
    result = IndexResult()
    failure: Exception | None = None
    with transaction.atomic():
        # Rows are locked while they are embedded: a concurrent task (a redelivered
        # message, a sweep) skips them instead of embedding them a second time. If this
        # worker dies, the locks go with its connection and the rows stay pending.
        candidates = MemoryRecord.unscoped.filter(org_id=org_id, pk__in=list(record_ids))
        if not force:
            candidates = candidates.exclude(
                status=MemoryRecord.Status.INDEXED, embedding_model=embedder.name
            )
        rows = list(
            candidates.select_for_update(skip_locked=True).values_list(
                "id", "content", "org_id", "domain_id"
            )
        )
        found = {str(row[0]) for row in rows}
        result.skipped = [str(pk) for pk in record_ids if str(pk) not in found]
        if not rows:
            return result
        windows = previous_turns(org_id, [row[0] for row in rows])
        try:
            vectors = _embed(embedder, rows, windows)
        except Exception as exc:
            failure = exc
        else:
            store(rows, vectors, embedder.name)
            _mark_context(org_id, rows, windows)
            result.indexed = [str(row[0]) for row in rows]
            # The records are found now: a cached answer from while they were pending
            # would leave them out.
            for org_id, domain_id in {(row[2], row[3]) for row in rows}:
                bump_generation_on_commit(Scope(org_id=org_id, domain_id=domain_id))
    if failure is not None:
        result.failed = _record_failure([row[0] for row in rows], failure, org_id)
        metrics.observe_indexing(errors=len(rows), failed=len(result.failed))
        raise EmbedderError(str(failure)) from failure
    metrics.observe_indexing(indexed=len(result.indexed))
    return result


def _index_by_org(record_ids: Sequence[str], *, force: bool) -> IndexResult:
    """A batch of several orgs (the sweeper's, or a message from before batches named
    their org): each org's part on its own, as a cluster locks rows of one shard group
    at a time."""
    by_org: dict[int, list[str]] = {}
    for pk, owner in MemoryRecord.unscoped.filter(pk__in=list(record_ids)).values_list(
        "pk", "org_id"
    ):
        by_org.setdefault(owner, []).append(str(pk))
    result = IndexResult()
    skipped = set()
    for owner, ids in by_org.items():
        part = index_records(ids, force=force, org_id=owner)
        result.indexed += part.indexed
        result.failed += part.failed
        skipped.update(part.skipped)
    found = {pk for ids in by_org.values() for pk in ids}
    result.skipped = [str(pk) for pk in record_ids if str(pk) not in found or str(pk) in skipped]
    return result


def previous_turns(org_id: int, record_ids: Sequence[Any]) -> dict[str, str]:
    """With ``TURN_CONTEXT``: each record's previous turn's content, by record id (the
    records that name a session and have one); else nothing."""
    if not memoryhub_settings.TURN_CONTEXT or not record_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            adjacent_turn_sql(MemoryRecord._meta.db_table, after=False),
            [org_id, [str(pk) for pk in record_ids]],
        )
        return {str(pk): content for pk, _, content in cursor.fetchall()}


def _embed(
    embedder: Any, rows: Sequence[tuple[Any, str, int, int]], windows: dict[str, str]
) -> list[list[float]]:
    """One vector per row, in one embedder call: the content's, or for a turn with a
    previous one (``windows``) the normalised sum of the turn's and of both turns'
    (measured on LoCoMo: docs/benchmarks.md, "Retrieval quality")."""
    texts = [row[1] for row in rows]
    paired = [position for position, row in enumerate(rows) if str(row[0]) in windows]
    texts += [f"{windows[str(rows[p][0])]}\n{rows[p][1]}" for p in paired]
    vectors = embedder.embed_documents(texts)
    if len(vectors) != len(texts):
        raise EmbedderError(f"embedder returned {len(vectors)} vectors for {len(texts)} texts")
    combined = [list(vector) for vector in vectors[: len(rows)]]
    for offset, position in enumerate(paired):
        total = np.asarray(combined[position]) + np.asarray(vectors[len(rows) + offset])
        norm = float(np.linalg.norm(total))
        if norm > 0:
            combined[position] = (total / norm).tolist()
    return combined


def _mark_context(
    org_id: int, rows: Sequence[tuple[Any, str, int, int]], windows: dict[str, str]
) -> None:
    """With ``TURN_CONTEXT``: record which of the rows' vectors hold their previous turn
    (what forgetting that turn re-embeds). Without it nothing is written: a flag left
    from before costs a needless re-embed at most."""
    if not memoryhub_settings.TURN_CONTEXT:
        return
    MemoryRecord.unscoped.filter(org_id=org_id, pk__in=[str(row[0]) for row in rows]).update(
        context_embedded=Case(When(pk__in=list(windows), then=Value(True)), default=Value(False))
    )


def store(
    rows: Sequence[tuple[Any, str, int, int]], vectors: Sequence[Sequence[float]], model: str
) -> None:
    """Store ``vectors`` (of ``model``) for ``rows`` (id, content, org, domain; one org's
    records, locked or new in this transaction): in bulk from ``BULK_MIN_RECORDS``
    rows, else row by row into the HNSW indexes."""
    if len(rows) >= memoryhub_settings.BULK_MIN_RECORDS:
        _store_in_bulk(rows, vectors, model)
    else:
        _store_vectors(rows, vectors, model)


def _store_in_bulk(
    rows: Sequence[tuple[Any, str, int, int]], vectors: Sequence[Sequence[float]], model: str
) -> None:
    """Store a batch's vectors with one COPY, each domain's where :func:`placement` puts
    them; a domain whose vectors skip the HNSW indexes has its compiled plans redone
    (their exact leg now has rows to scan), and maintenance is asked for when a
    domain's own index is due."""
    by_domain: dict[tuple[int, int], list[int]] = {}
    for position, row in enumerate(rows):
        by_domain.setdefault((row[2], row[3]), []).append(position)
    batches: list[int | None] = [None] * len(rows)
    maintain = False
    for (org_id, domain_id), positions in by_domain.items():
        scope = Scope(org_id=org_id, domain_id=domain_id)
        where = placement(scope, model)
        maintain = maintain or where.maintain
        if where.fold:
            fold_delta(scope, model)
        if where.batch is not None:
            for position in positions:
                batches[position] = where.batch
    bulk.store_vectors([row[0] for row in rows], vectors, model, batches, org_id=rows[0][2])
    if maintain:
        transaction.on_commit(
            lambda: send("tenant_indexes", what="tenant index maintenance", left="left")
        )


def _store_vectors(
    rows: Sequence[tuple[Any, str, int, int]], vectors: Sequence[Sequence[float]], model: str
) -> None:
    """A small batch: one UPDATE (vectors travel as one array), each row inserted into
    the HNSW index that serves its domain, searchable by it at once: the domain's own
    index when it has one (``OWN_INDEX_ONLY``: its queries never search the shared index,
    so an entry there would cost an insert into the largest graph for nothing), else the
    shared index."""
    batch_of: dict[tuple[int, int], int | None] = {}
    for _, _, org_id, domain_id in rows:
        if (org_id, domain_id) not in batch_of:
            own = own_index(Scope(org_id=org_id, domain_id=domain_id), model)
            batch_of[(org_id, domain_id)] = OWN_INDEX_ONLY if own is not None else None
    table = MemoryRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {table} AS record
               SET embedding = batch.embedding,
                   embedding_model = %s,
                   status = %s,
                   last_error = '',
                   indexed_at = %s,
                   vector_batch = batch.vector_batch
              FROM unnest(%s::uuid[], %s::vector[], %s::bigint[])
                   AS batch(id, embedding, vector_batch)
             WHERE record.org_id = %s AND record.id = batch.id
            """,
            [
                model,
                MemoryRecord.Status.INDEXED,
                timezone.now(),
                [str(row[0]) for row in rows],
                ["[" + ",".join(repr(float(x)) for x in vector) + "]" for vector in vectors],
                [batch_of[(row[2], row[3])] for row in rows],
                rows[0][2],  # one org's records (index_records)
            ],
        )


def _record_failure(record_ids: list[Any], exc: Exception, org_id: int) -> list[str]:
    """Count an attempt; mark records (of org ``org_id``) failed once they have used up
    their attempts."""
    message = f"{type(exc).__name__}: {exc}"[:2000]
    max_attempts = memoryhub_settings.INDEX_MAX_ATTEMPTS
    with transaction.atomic():
        records = MemoryRecord.unscoped.filter(org_id=org_id, pk__in=record_ids).exclude(
            status=MemoryRecord.Status.INDEXED
        )
        records.update(attempts=F("attempts") + 1, last_error=message)
        exhausted = list(
            records.filter(attempts__gte=max_attempts).values_list("id", "org_id", "domain_id")
        )
        if not exhausted:
            return []
        MemoryRecord.unscoped.filter(org_id=org_id, pk__in=[pk for pk, _, _ in exhausted]).update(
            status=MemoryRecord.Status.FAILED
        )
        per_scope: dict[tuple[int, int], int] = {}
        for _, org_id, domain_id in exhausted:
            per_scope[(org_id, domain_id)] = per_scope.get((org_id, domain_id), 0) + 1
        for (org_id, domain_id), count in per_scope.items():
            observe.record(
                Observation.Kind.EMBEDDING_FAILED,
                org_id=org_id,
                domain_id=domain_id,
                count=count,
                payload={"error": message[:500], "attempts": max_attempts},
                actor="indexer",
            )
    return [str(pk) for pk, _, _ in exhausted]


@dataclass(frozen=True, slots=True)
class Waited:
    """What waiting for a write's records found: each record's status, whether none is
    pending any more, and if some are, why (``timeout``, or ``no_worker``: no worker
    has been seen, so the wait was not even tried)."""

    statuses: dict[str, str]
    done: bool
    reason: str | None


def wait_for_write(scope: Scope, record_ids: Sequence[str], seconds: float) -> Waited:
    """Read-your-writes after a committed write (``?wait``): wait up to ``seconds`` for
    its records to be indexed. Tasks run in the process (eager mode) have run already;
    waiting for a worker nobody has seen would only hold the request."""
    from celery import current_app

    waiting = bool(current_app.conf.task_always_eager) or worker_seen_recently()
    statuses, done = wait_until_indexed(scope, record_ids, seconds if waiting else 0)
    reason = None if done else "timeout" if waiting else "no_worker"
    return Waited(statuses, done, reason)


def wait_until_indexed(
    scope: Scope, record_ids: Sequence[str], seconds: float
) -> tuple[dict[str, str], bool]:
    """Read-your-writes: poll until no record of ``record_ids`` (in ``scope``) is pending,
    or ``seconds`` pass. Returns each record's status and whether all are done."""
    ids = {str(pk) for pk in record_ids}
    deadline = time.monotonic() + seconds
    delay = 0.02
    while True:
        rows = MemoryRecord.unscoped.filter(
            pk__in=ids, org_id=scope.org_id, domain_id=scope.domain_id
        ).values_list("id", "status")
        statuses = {str(pk): status for pk, status in rows}
        done = all(statuses.get(pk) != MemoryRecord.Status.PENDING for pk in ids)
        if done or time.monotonic() >= deadline:
            return statuses, done
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)


def worker_seen_recently() -> bool:
    """Whether a worker sent a heartbeat within ``WORKER_STALE_AFTER`` seconds."""
    cutoff = timezone.now() - timedelta(seconds=memoryhub_settings.WORKER_STALE_AFTER)
    return WorkerHeartbeat.objects.filter(seen_at__gte=cutoff).exists()


def pending_for_sweep(
    older_than: timedelta | None = None, *, held: set[str] | None = None
) -> list[str]:
    """Ids of records left pending longer than ``SWEEP_PENDING_AFTER`` (a worker died),
    but those in ``held`` (a live worker has them), up to 10,000 (no order: a backlog's
    sort would read every pending row at each sweep)."""
    if older_than is None:
        older_than = timedelta(seconds=memoryhub_settings.SWEEP_PENDING_AFTER)
    cutoff = timezone.now() - older_than
    pending = MemoryRecord.unscoped.pending().filter(updated_at__lte=cutoff)
    if held:
        pending = pending.exclude(pk__in=list(held))
    return [str(pk) for pk in pending.values_list("id", flat=True)[:10_000]]


def held_by_workers() -> set[str] | None:
    """Ids of the records in the indexing tasks live workers hold (running, prefetched,
    waiting to be retried), from their heartbeats; None when a live worker cannot tell
    (too many, or a release that does not say). A worker silent for
    ``WORKER_STALE_AFTER`` seconds is taken as gone, and what it held as lost."""
    cutoff = timezone.now() - timedelta(seconds=memoryhub_settings.WORKER_STALE_AFTER)
    held: set[str] = set()
    for holding in WorkerHeartbeat.objects.filter(seen_at__gte=cutoff).values_list(
        "holding", flat=True
    ):
        if holding is None:
            return None
        held.update(holding)
    return held


#: ``pipeline_status`` counts pending records up to this many (a bounded health check).
PENDING_COUNT_CAP = 10_000


def pipeline_status(*, eager: bool) -> dict[str, Any]:
    """The indexing pipeline as the health endpoint reports it.

    ``pending`` (capped at :data:`PENDING_COUNT_CAP`, ``pending_capped`` says so), the
    oldest pending record's age, and, with a broker, the newest worker heartbeat. It is
    not ``ok`` when records have waited longer than ``WORKER_STALE_AFTER`` and no worker
    has been seen for as long (nobody is indexing them), nor when the oldest has waited
    longer than ``INDEXING_LAG_DEGRADED_AFTER`` (``lagging``: the workers do not keep up,
    or cannot embed).
    """
    now = timezone.now()
    pending_records = MemoryRecord.unscoped.filter(status=MemoryRecord.Status.PENDING)
    pending = pending_records.order_by().values("pk")[: PENDING_COUNT_CAP + 1].count()
    oldest = pending_records.order_by("updated_at").values_list("updated_at", flat=True).first()
    oldest_age = (now - oldest).total_seconds() if oldest is not None else None
    status: dict[str, Any] = {
        "mode": "eager" if eager else "broker",
        "pending": min(pending, PENDING_COUNT_CAP),
        "pending_capped": pending > PENDING_COUNT_CAP,
        "oldest_pending_seconds": round(oldest_age, 1) if oldest_age is not None else None,
    }
    lag_limit = memoryhub_settings.INDEXING_LAG_DEGRADED_AFTER
    lagging = oldest_age is not None and oldest_age > lag_limit
    status["lagging"] = lagging
    if eager:
        return {"ok": not lagging, **status}
    stale_after = memoryhub_settings.WORKER_STALE_AFTER
    seen = _newest_heartbeat()
    seen_age = (now - seen).total_seconds() if seen is not None else None
    worker_missing = seen_age is None or seen_age > stale_after
    stuck = oldest_age is not None and oldest_age > stale_after
    return {
        "ok": not (worker_missing and stuck) and not lagging,
        **status,
        "worker_seen_at": seen.isoformat() if seen is not None else None,
        "worker_seen_seconds_ago": round(seen_age, 1) if seen_age is not None else None,
    }


def _newest_heartbeat() -> datetime | None:
    heartbeats = WorkerHeartbeat.objects.order_by("-seen_at")
    return heartbeats.values_list("seen_at", flat=True).first()


def worker_seen_seconds_ago() -> float | None:
    """How long ago a worker last wrote its heartbeat (None: never)."""
    seen = _newest_heartbeat()
    return None if seen is None else (timezone.now() - seen).total_seconds()


# --- vector indexes -------------------------------------------------------------------


#: A skip scan of the model index over table ``{table}`` (the rows ``{scope}`` selects
#: of it): one probe per model.
_MODELS_SQL = """
WITH RECURSIVE models(name) AS (
    SELECT min(embedding_model) FROM {table} WHERE {scope} embedding_model > ''
    UNION ALL
    SELECT (SELECT min(embedding_model) FROM {table}
             WHERE {scope} embedding_model > models.name)
      FROM models WHERE models.name IS NOT NULL
)
SELECT {select} FROM models WHERE name IS NOT NULL
"""


def models_in_use() -> list[str]:
    """Every embedding model some record's vector is stored under: a skip scan of the
    model index (one probe per model, whatever the number of records). On a Citus
    cluster, the same scan of each shard, the names merged."""
    table = MemoryRecord._meta.db_table
    with connection.cursor() as cursor:
        if not distribution.is_citus(connection):
            cursor.execute(_MODELS_SQL.format(table=table, scope="", select="name"))
            return [row[0] for row in cursor.fetchall()]
        per_shard = _MODELS_SQL.format(
            table="%1$s", scope="", select="COALESCE(json_agg(name), '[]')"
        )
        names: set[str] = set()
        for success, result in on_each_shard(cursor, table, per_shard):
            if not success:
                raise DatabaseError(f"listing the models of a shard failed: {result}")
            names.update(json.loads(result))
        return sorted(names)


def models_in_domain(scope: Scope) -> list[str]:
    """The models whose vectors serve queries in ``scope``'s domain (indexed records),
    from the model index: one probe per model in use. On a Citus cluster, a skip scan of
    the model index restricted to the domain, which names the org: one statement on the
    org's worker, not one on every shard."""
    table = MemoryRecord._meta.db_table
    with connection.cursor() as cursor:
        if distribution.is_citus(connection):
            in_domain = "org_id = %(org)s AND domain_id = %(domain)s AND status = %(status)s AND"
            cursor.execute(
                _MODELS_SQL.format(table=table, scope=in_domain, select="name"),
                {"org": scope.org_id, "domain": scope.domain_id, "status": "indexed"},
            )
            return sorted(row[0] for row in cursor.fetchall())
        cursor.execute(
            f"""
            SELECT name FROM unnest(%s::text[]) AS name
             WHERE EXISTS (SELECT 1 FROM {table} WHERE embedding_model = name
                            AND org_id = %s AND domain_id = %s AND status = %s)
             ORDER BY name
            """,
            [models_in_use(), scope.org_id, scope.domain_id, MemoryRecord.Status.INDEXED],
        )
        return [row[0] for row in cursor.fetchall()]


def model_change_progress(scope: Scope) -> dict[str, Any]:
    """How far a change of embedder has come in ``scope``'s domain: the configured model
    and, per previous model still holding indexed records, how many (counted from the
    model index; they shrink to none as re-embedding goes on), and whether queries can
    use them (an embedder is known for the model)."""
    current = memoryhub_settings.embedder().name
    previous = {}
    for name in models_in_domain(scope):
        if name == current:
            continue
        count = MemoryRecord.unscoped.filter(
            embedding_model=name, domain_id=scope.domain_id, status=MemoryRecord.Status.INDEXED
        ).count()
        previous[name] = {
            "records": count,
            "serves_queries": memoryhub_settings.embedder_for(name) is not None,
        }
    return {"model": current, "previous": previous, "migrating": bool(previous)}


def reembed(records: QuerySet[MemoryRecord], *, force: bool = False) -> int:
    """Embed ``records`` again with the configured model, in the workers' batches.

    The one re-embedding path (the ``memoryhub_reembed`` command, the admin action): a
    record keeps its status and serves queries with its previous vector until the new
    one is stored. Without ``force`` records already on the configured model are left
    alone; with it they are embedded again too (e.g. the model's files changed under the
    same name). Their attempts start again from zero. Returns how many records were
    scheduled; ids are read and sent in batches, never all at once.
    """
    embedder = memoryhub_settings.embedder()
    ensure_vector_index(embedder.name, embedder.dimensions)
    if not force:
        records = records.exclude(status=MemoryRecord.Status.INDEXED, embedding_model=embedder.name)
    # A fresh set of attempts (a failed record gets INDEX_MAX_ATTEMPTS again); the status
    # and the vector stay, so nothing is hidden meanwhile.
    MemoryRecord.unscoped.filter(
        pk__in=records.filter(attempts__gt=0).order_by().values("pk")
    ).update(attempts=0, last_error="")
    size = memoryhub_settings.BULK_INDEX_BATCH_SIZE * 10
    batch: list[str] = []
    total = 0
    for pk in records.order_by().values_list("id", flat=True).iterator(chunk_size=size):
        batch.append(str(pk))
        if len(batch) >= size:
            schedule_indexing(batch, force=force, bulk=True)
            total, batch = total + len(batch), []
    schedule_indexing(batch, force=force, bulk=True)
    return total + len(batch)


def records_to_reembed(
    model_name: str,
    *,
    org_id: int | None = None,
    domain_id: int | None = None,
    source: str | None = None,
) -> QuerySet[MemoryRecord]:
    """Records (operator view) not yet indexed with ``model_name``, oldest first."""
    records = MemoryRecord.unscoped.exclude(
        status=MemoryRecord.Status.INDEXED, embedding_model=model_name
    )
    if org_id is not None:
        records = records.filter(org_id=org_id)
    if domain_id is not None:
        records = records.filter(domain_id=domain_id)
    if source is not None:
        records = records.filter(knowledge_base__name=source)
    return records.order_by("created_at")
