"""Consolidation: a namespace's episodic turns become semantic facts, with provenance.

A write asks for it (``consolidate``, or its knowledge base's ``consolidate`` flag): its
episodic records wait as ``consolidation = "pending"``. Once the indexer has embedded
them, a worker runs :func:`consolidate` for each (knowledge base, namespace) they are in,
one run at a time per namespace (an advisory lock; a run loops until nothing waits). A
run hands the waiting turns and the namespace's most similar facts to the configured
:class:`~memoryhub.consolidation.Extractor`, validates its operations, and applies them
through the write service (so the read-only policy, validation, history and indexing
apply): ``add`` writes a ``semantic`` record in the same knowledge base and namespace,
valid from when its first source turn occurred; ``update`` changes a fact (a new version,
cause ``consolidation``); ``supersede`` closes a fact when its sources were said and adds
its successor under the same key (services/supersession.py; a successor that would start
before the fact it replaces is an ``update`` instead); ``delete`` forgets one, ``none``
keeps it; every fact lists the turns it came from in ``derived_from`` (sources are only
ever added). A ``memory.consolidated`` observation records each run.

Erasure: erasing a namespace erases its facts with its turns (same namespace). Forgetting
single turns (by id, key, import or expiry) removes them from the ``derived_from`` of the
facts citing them; a fact left with no source is erased with them
(``store.deletion.delete_records``). A fact with sources left
is kept as it is.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any, cast

from django.db import connection, transaction
from django.utils.module_loading import import_string

from .. import metrics, observe, policy
from ..conf import memoryhub_settings
from ..consolidation import (
    Episode,
    ExtractionError,
    Extractor,
    ExtractorUnavailable,
    Fact,
    Operation,
    extractor_from_env,
    validate_operations,
)
from ..consolidation.base import OPERATIONS
from ..exceptions import RecordNotFound, ValidationFailed
from ..models import KnowledgeBase, MemoryRecord, Observation
from ..scope import Scope, tenant_scope
from . import forget as forget_service
from . import query as query_service
from . import supersession, updates
from . import write as write_service
from .dispatch import send
from .store.locks import int4_key
from .store.persistence import (
    CONSOLIDATION_DONE,
    CONSOLIDATION_FAILED,
    CONSOLIDATION_PENDING,
    add_sources,
)

__all__ = [
    "configured_extractor",
    "consolidate",
    "enqueue",
    "schedule_for",
]

logger = logging.getLogger(__name__)

#: At most this many operations are named in a run's observation (the counts are whole).
OPERATIONS_OBSERVED = 50


def configured_extractor() -> Extractor:
    """``MEMORYHUB["CONSOLIDATION_EXTRACTOR"]`` (an import path to a class or factory
    taking no arguments), or by default :func:`extractor_from_env`: the OpenAI-compatible
    extractor when ``MEMORYHUB_LLM_BASE_URL`` and ``MEMORYHUB_LLM_MODEL`` are set, else
    the built-in one."""
    path = memoryhub_settings.CONSOLIDATION_EXTRACTOR
    if path:
        factory: Any = import_string(path)
        return cast(Extractor, factory())
    return extractor_from_env()


def schedule_for(record_ids: Sequence[str], org_id: int | None = None) -> int:
    """Enqueue a run for each (knowledge base, namespace) of ``record_ids`` (of org
    ``org_id``, when one org's) that has records waiting, once the caller's transaction
    commits; returns how many."""
    if not record_ids:
        return 0
    records = MemoryRecord.unscoped.filter(pk__in=list(record_ids))
    if org_id is not None:
        records = records.filter(org_id=org_id)
    groups = list(
        records.filter(consolidation=CONSOLIDATION_PENDING)
        .values_list("knowledge_base_id", "namespace")
        .distinct()
    )
    for knowledge_base_id, namespace in groups:
        transaction.on_commit(partial(enqueue, knowledge_base_id, namespace))
    return len(groups)


def enqueue(knowledge_base_id: int, namespace: str) -> None:
    """Send a consolidation run for one namespace (the sweeper re-sends a lost one)."""
    send(
        "consolidate_namespace",
        knowledge_base_id,
        namespace,
        what="a consolidation run",
        left="left waiting for the sweeper",
    )


def waiting() -> list[tuple[int, str]]:
    """(knowledge base, namespace) pairs with turns waiting and embedded (the sweeper
    re-sends them: a run lost with its worker, or a broker that refused it)."""
    return list(
        MemoryRecord.unscoped.filter(consolidation=CONSOLIDATION_PENDING)
        .exclude(status=MemoryRecord.Status.PENDING)
        .values_list("knowledge_base_id", "namespace")
        .distinct()[:1000]
    )


def consolidate(knowledge_base_id: int, namespace: str) -> dict[str, int] | None:
    """Consolidate every waiting turn of one namespace of one knowledge base, in batches
    of ``CONSOLIDATION_BATCH``; None when another run holds the namespace (it will take
    these too). Returns the counts of the operations applied.

    Raises :class:`ExtractorUnavailable` (the model cannot be reached now: the task
    retries later; the turns keep waiting). Any other extraction error marks the batch's
    turns ``failed`` and records a ``consolidation.failed`` observation.
    """
    knowledge_base = KnowledgeBase.unscoped.filter(pk=knowledge_base_id).first()
    if knowledge_base is None:
        return None
    key = (int4_key(knowledge_base_id), f"consolidate:{namespace}")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", list(key))
        if not cursor.fetchone()[0]:
            metrics.observe_consolidation("busy")
            return None
    outcome = "failed"
    try:
        totals = _consolidate_locked(knowledge_base, namespace)
        outcome = "done"
        return totals
    except ExtractorUnavailable:
        outcome = "unavailable"
        raise
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", list(key))
        metrics.observe_consolidation(outcome)


def _consolidate_locked(knowledge_base: KnowledgeBase, namespace: str) -> dict[str, int]:
    """The run of :func:`consolidate` once it holds the namespace."""
    totals: dict[str, int] = {"episodes": 0, **dict.fromkeys(OPERATIONS, 0)}
    while True:
        batch = list(
            MemoryRecord.unscoped.filter(
                knowledge_base_id=knowledge_base.pk,
                namespace=namespace,
                consolidation=CONSOLIDATION_PENDING,
            )
            .exclude(status=MemoryRecord.Status.PENDING)
            .order_by("created_at")[: memoryhub_settings.CONSOLIDATION_BATCH]
        )
        if not batch:
            return totals
        counts = _run_batch(knowledge_base, namespace, batch)
        for name, count in counts.items():
            totals[name] = totals.get(name, 0) + count


def _similar_facts(
    scope: Scope, knowledge_base: KnowledgeBase, namespace: str, text: str
) -> list[Fact]:
    limit = memoryhub_settings.MAX_QUERY_LENGTH
    found = query_service.query(
        scope,
        query=text[:limit],
        k=min(memoryhub_settings.CONSOLIDATION_FACTS, memoryhub_settings.MAX_K),
        kinds=["semantic"],
        sources=[knowledge_base.name],
        namespaces=[namespace],
        mode="hybrid",
        # The query is a batch of turns, not a question a reranker is trained for, and
        # consolidation must not wait on (or observe the failures of) a reranker.
        rerank=False,
    )
    return [
        Fact(
            id=str(item.id),
            content=item.content,
            metadata=dict(item.metadata),
            derived_from=tuple(item.derived_from or ()),
            key=item.key,
        )
        for item in found.items
    ]


def _run_batch(
    knowledge_base: KnowledgeBase, namespace: str, batch: list[MemoryRecord]
) -> dict[str, int]:
    scope = Scope(knowledge_base.org_id, knowledge_base.domain_id)
    episodes = [
        Episode(
            id=str(r.pk), content=r.content, created_at=r.occurred_or_created, metadata=r.metadata
        )
        for r in batch
    ]
    facts = _similar_facts(
        scope, knowledge_base, namespace, "\n".join(episode.content for episode in episodes)
    )
    extractor = configured_extractor()
    ids = [record.pk for record in batch]
    try:
        operations = validate_operations(extractor.extract(episodes, facts), episodes, facts)
    except ExtractorUnavailable as exc:
        _observe_failure(scope, knowledge_base, extractor, len(batch), exc, retried=True)
        raise
    except ExtractionError as exc:
        _observe_failure(scope, knowledge_base, extractor, len(batch), exc, retried=False)
        MemoryRecord.unscoped.filter(pk__in=ids).update(consolidation=CONSOLIDATION_FAILED)
        return {"episodes": len(batch), "failed": len(batch)}
    # The extractor acts as an agent: bound by the read-only rule like any other.
    agent = _agent(extractor)
    said = {str(record.pk): record.occurred_or_created for record in batch}
    counts: dict[str, int] = {"episodes": len(batch), **dict.fromkeys(OPERATIONS, 0)}
    applied: list[dict[str, Any]] = []
    with transaction.atomic():
        for operation in operations:
            fact_id = _apply(scope, knowledge_base, namespace, operation, facts, agent, said)
            counts[operation.op] += 1
            applied.append(
                {"op": operation.op, "fact": fact_id, "sources": list(operation.sources)}
            )
        MemoryRecord.unscoped.filter(pk__in=ids, consolidation=CONSOLIDATION_PENDING).update(
            consolidation=CONSOLIDATION_DONE
        )
        observe.record_in_scope(
            Observation.Kind.MEMORY_CONSOLIDATED,
            scope,
            source=knowledge_base.name,
            count=len(operations),
            payload={
                **counts,
                "source": knowledge_base.name,
                "extractor": extractor.name,
                "model": getattr(extractor, "model", ""),
                "operations": applied[:OPERATIONS_OBSERVED],
            },
            actor=policy.actor_label(agent),
        )
    return counts


def _apply(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    namespace: str,
    operation: Operation,
    facts: Sequence[Fact],
    agent: policy.Principal,
    said: dict[str, datetime],
) -> str | None:
    """Apply one validated operation through the write path; the fact's id. ``said``:
    when each episode of the batch occurred."""
    cause = "consolidation"
    moments = [said[source] for source in operation.sources if source in said]
    if operation.op == "supersede":
        superseding = _supersede(scope, knowledge_base, namespace, operation, facts, agent, moments)
        if superseding is not None or operation.fact_id is None:
            return superseding
    if operation.op == "add":
        item: dict[str, Any] = {
            "content": operation.content,
            "kind": MemoryRecord.Kind.SEMANTIC,
            "namespace": namespace,
            "metadata": dict(operation.metadata),
            "valid_from": min(moments) if moments else None,
        }
        # Always keyed: a keyless write would be deduplicated against a turn with the
        # same words (the fact would collapse into its own source), and a key makes a
        # second add of the same fact an update of it.
        item["key"] = operation.key or _fact_key(operation.content)
        result = write_service.write(
            scope, [item], sources=[knowledge_base.name], principal=agent, cause=cause
        )
        fact_id = result.records[0].id
        add_sources(fact_id, operation.sources)
        return fact_id
    fact_id = str(operation.fact_id)
    if operation.op == "delete":
        forget_service.forget_record(scope, fact_id, principal=agent)
        return fact_id
    current = next(fact for fact in facts if fact.id == fact_id)
    changes: dict[str, Any] = {}
    if operation.op in ("update", "supersede") and operation.content != current.content:
        changes["content"] = operation.content
    metadata = {**current.metadata, **operation.metadata}
    if metadata != dict(current.metadata):
        changes["metadata"] = metadata
    try:
        if changes:
            updates.update_record(
                scope, fact_id, changes, partial=True, principal=agent, cause=cause
            )
        add_sources(fact_id, operation.sources)
    except RecordNotFound:  # forgotten since it was read: nothing to keep up to date
        return None
    return fact_id


def _supersede(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    namespace: str,
    operation: Operation,
    facts: Sequence[Fact],
    agent: policy.Principal,
    moments: list[datetime],
) -> str | None:
    """Close fact ``operation.fact_id`` (or the current holder of ``operation.key``)
    when its sources were first said and write its successor under its key (a keyless
    fact gets the key of its words first); the successor's id. A successor that would
    not start after what it replaces is a correction: None for a fact the caller then
    updates, and the key's holder updated here. None too when the fact is gone."""
    current = next((fact for fact in facts if fact.id == operation.fact_id), None)
    key = current.key if current is not None else operation.key
    try:
        if key is None and current is not None:
            key = _fact_key(current.content)
            updates.update_record(
                scope,
                current.id,
                {"key": key},
                partial=True,
                principal=agent,
                cause="consolidation",
            )
        result = write_service.write(
            scope,
            [
                {
                    "content": operation.content,
                    "kind": MemoryRecord.Kind.SEMANTIC,
                    "namespace": namespace,
                    "metadata": dict(operation.metadata),
                    "key": key,
                    "supersede": True,
                    "valid_from": min(moments) if moments else None,
                }
            ],
            sources=[knowledge_base.name],
            principal=agent,
            cause="consolidation",
        )
    except RecordNotFound:
        return None
    except ValidationFailed:
        if current is not None:
            return None
        # Said no later than the value it replaces: a correction of the key's holder.
        current_holder = supersession.holder(knowledge_base, namespace, str(key))
        if current_holder is None:
            return None
        updates.update_record(
            scope,
            current_holder.pk,
            {"content": operation.content},
            partial=True,
            principal=agent,
            cause="consolidation",
        )
        fact_id = str(current_holder.pk)
        add_sources(fact_id, operation.sources)
        return fact_id
    fact_id = result.records[0].id
    add_sources(fact_id, operation.sources)
    return fact_id


def _agent(extractor: Extractor) -> policy.AgentPrincipal:
    """Who consolidation acts as: ``consolidation:<extractor>``."""
    return policy.AgentPrincipal(label=f"consolidation:{extractor.name}")


def _fact_key(content: str) -> str:
    """The key of a fact the extractor gave none: its normalised words, hashed."""
    words = " ".join(content.lower().split())
    return "fact:" + hashlib.sha256(words.encode()).hexdigest()[:24]


def _observe_failure(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    extractor: Extractor,
    episodes: int,
    exc: ExtractionError,
    *,
    retried: bool,
) -> None:
    observe.record_in_scope(
        Observation.Kind.CONSOLIDATION_FAILED,
        scope,
        source=knowledge_base.name,
        count=episodes,
        payload={
            "source": knowledge_base.name,
            "extractor": extractor.name,
            "model": getattr(extractor, "model", ""),
            "error": type(exc).__name__,
            "reason": exc.reason[:300],
            "retried": retried,
        },
        actor=policy.actor_label(_agent(extractor)),
    )


def facts_citing(scope: Scope, record_id: Any, limit: int = 20) -> list[MemoryRecord]:
    """Up to ``limit`` facts that list ``record_id`` among their sources (the admin's
    link from a turn to what was learned from it)."""
    with tenant_scope(scope):
        return list(
            MemoryRecord.objects.filter(derived_from__contains=[record_id])
            .exclude(derived_from=[])
            .order_by("-updated_at")[:limit]
        )
