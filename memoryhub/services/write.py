"""Writing memory: upsert by key, dedupe by content, read-only policies, history.

``write(scope, items, sources=...)`` is what every front door calls. A batch is
validated as a whole first (``memoryhub.vocabulary``): one bad item rejects the
request with errors that name the item index and field, and nothing is written. Then,
inside one transaction, each target knowledge base either accepts the items, refuses
them (a read-only KB with ``on_write="refuse"``) or ignores them (``on_write="ignore"``),
exactly as the seeds specify them for ``ReadOnlyMemory`` and ``CompositeMemory`` (the
seeds: the prototype's texts whose printed outputs are memoryhub's behaviour spec; see
:mod:`memoryhub.sources`). Accepted
records are stored ``pending``; indexing is scheduled when the transaction commits, so a
rolled-back write schedules nothing.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from .. import metrics, observe, policy, signals, tracing
from ..cache import bump_generation_on_commit
from ..conf import memoryhub_settings
from ..exceptions import WriteRefused
from ..items import RecordResult, WriteResult
from ..models import KnowledgeBase, MemoryRecord, Observation, RecordVersion
from ..scope import Scope, tenant_scope
from ..vocabulary import WriteBody, WriteItem, items_of
from . import history, supersession
from .dispatch import schedule_indexing
from .knowledge_bases import resolve_sources, source_names
from .store import persistence
from .store.locks import lock_domain, lock_namespaces
from .store.persistence import CONSOLIDATION_PENDING
from .store.refusals import refuse
from .store.transient import run_again_when_cancelled

__all__ = ["WriteRequest", "write"]

#: Names of the update use case, now in :mod:`.updates`: answered here with a
#: ``DeprecationWarning`` until 0.3 (the layer contract lists this alias in ``MOVED``).
_MOVED_TO_UPDATES = frozenset({"Updated", "restore_version", "update_record", "update_record_for"})


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_UPDATES:
        warnings.warn(
            f"memoryhub.services.write.{name} is memoryhub.services.updates.{name}; "
            "the old name goes in 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        from . import updates

        return getattr(updates, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: A write as a door receives it (a REST body, an MCP tool's arguments), checked as a
#: whole: its fields, one of ``source`` or ``sources``, every item.
WriteRequest = WriteBody


def write_body(
    scope: Scope, body: Mapping[str, Any], *, principal: policy.Principal = policy.AGENT
) -> WriteResult:
    """A door's write (a REST body, an MCP tool's arguments): checked as a whole
    (:class:`memoryhub.vocabulary.WriteBody`), then :func:`write`."""
    asked = WriteBody.parse(body)
    return write(
        scope,
        asked.items,
        sources=asked.named_sources,
        principal=principal,
        consolidate=asked.consolidate,
    )


def apply_item(record: MemoryRecord, item: WriteItem, *, content_changed: bool) -> None:
    """Copy an item's fields onto a record; new content sends it back to be embedded."""
    record.content = item.content
    record.content_hash = item.content_hash
    record.kind = item.kind
    record.tags = list(item.tags)
    record.metadata = dict(item.metadata)
    record.expires_at = item.expires_at
    record.occurred_at = item.occurred_at
    record.valid_from = item.valid_from
    record.valid_until = item.valid_until
    if content_changed:
        for name, value in persistence.UNEMBEDDED.items():
            setattr(record, name, value)


@dataclass
class _Batch:
    """One knowledge base's share of a write, as planned: records to create, records to
    change, one result per item, and how many items merged into an existing record."""

    new_records: list[MemoryRecord] = field(default_factory=list)
    changed: list[MemoryRecord] = field(default_factory=list)
    results: list[RecordResult] = field(default_factory=list)
    deduplicated: int = 0


def _existing(
    knowledge_base: KnowledgeBase, items: Sequence[WriteItem]
) -> tuple[dict[tuple[str, str], MemoryRecord], dict[tuple[str, str], str]]:
    """The records ``items`` meet: by (namespace, key), locked, and by (namespace,
    content hash)."""
    records = MemoryRecord.objects.filter(knowledge_base=knowledge_base)
    keys = {(item.namespace, item.key) for item in items if item.key is not None}
    hashes = {(item.namespace, item.content_hash) for item in items}
    by_key: dict[tuple[str, str], MemoryRecord] = {}
    if keys:
        # Namespace and key: the unique index (knowledge base, namespace, key) answers it
        # (the key alone would scan the whole knowledge base on every call).
        # The current record of each key: a superseded one keeps its key, closed.
        for record in records.filter(
            namespace__in={namespace for namespace, _ in keys},
            key__in={key for _, key in keys},
            superseded_by__isnull=True,
        ).select_for_update():
            by_key[(record.namespace, record.key or "")] = record
    by_hash: dict[tuple[str, str], str] = {}
    for record_id, namespace, digest in records.filter(
        content_hash__in={digest for _, digest in hashes}, namespace__in={ns for ns, _ in hashes}
    ).values_list("id", "namespace", "content_hash"):
        by_hash.setdefault((namespace, digest), str(record_id))
    return by_key, by_hash


def _write_to(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    items: Sequence[WriteItem],
    principal: policy.Principal,
    import_job: int | None = None,
    cause: str = RecordVersion.Cause.UPSERT,
    consolidate: bool = False,
) -> list[RecordResult]:
    """Upsert ``items`` into one writable knowledge base; return one result per item.

    A record written again by key keeps its previous state in its history (``cause``)
    when a field changes."""
    lock_namespaces(knowledge_base, (item.namespace for item in items))
    by_key, by_hash = _existing(knowledge_base, items)
    plan = _Plan(scope, knowledge_base, principal, cause, consolidate, import_job, by_key, by_hash)
    for index, item in enumerate(items):
        plan.add(index, item)
    persistence.save_records(plan.batch.new_records, plan.batch.changed)
    _announce(
        scope,
        knowledge_base,
        plan.batch,
        principal=principal,
        observations=import_job is None,
    )
    return plan.batch.results


@dataclass
class _Plan:
    """One knowledge base's share of a write, planned item by item against the records
    it meets (``by_key``, ``by_hash``; both grow as items are planned)."""

    scope: Scope
    knowledge_base: KnowledgeBase
    principal: policy.Principal
    cause: str
    consolidate: bool
    import_job: int | None
    by_key: dict[tuple[str, str], MemoryRecord]
    by_hash: dict[tuple[str, str], str]
    batch: _Batch = field(default_factory=_Batch)
    now: datetime = field(default_factory=timezone.now)
    #: Records created by this call: a key written twice in one call is one record,
    #: without history.
    created: set[Any] = field(default_factory=set)
    actor: str = field(init=False)

    def __post_init__(self) -> None:
        self.actor = policy.actor_label(self.principal)

    def add(self, index: int, item: WriteItem) -> None:
        digest = item.content_hash
        existing = self.by_key.get((item.namespace, item.key)) if item.key is not None else None
        superseded = None
        if existing is not None and item.supersede and existing.content_hash != digest:
            superseded, existing = existing, None
        elif existing is not None and item.valid_from is None and existing.valid_from:
            # A correction (or a restatement) keeps when the fact became true: its
            # place in a chain of supersessions stays.
            item = item.model_copy(update={"valid_from": existing.valid_from})
        if existing is not None:
            self._update(index, item, existing, digest)
            return
        duplicate_of = self.by_hash.get((item.namespace, digest))
        if duplicate_of is not None and item.key is None:
            self.batch.deduplicated += 1
            self.batch.results.append(
                RecordResult(duplicate_of, None, "", True, self.knowledge_base.name)
            )
            return
        self._create(index, item, superseded, digest)

    def _update(self, index: int, item: WriteItem, existing: MemoryRecord, digest: str) -> None:
        if existing.pk not in self.created:
            policy.require_forget_to_expire(
                self.principal,
                self.scope,
                existing.expires_at,
                item.expires_at,
                field=f"items[{index}].expires_at",
            )
            if not is_unchanged(existing, item):
                history.snapshot([existing], actor=self.actor, cause=self.cause)
        content_changed = existing.content_hash != digest
        apply_item(existing, item, content_changed=content_changed)
        if self.consolidate and content_changed and item.kind == MemoryRecord.Kind.EPISODIC:
            existing.consolidation = CONSOLIDATION_PENDING
        existing.updated_at = self.now
        self.batch.changed.append(existing)
        self.by_hash.setdefault((item.namespace, digest), str(existing.pk))
        self.batch.results.append(
            RecordResult(
                str(existing.pk), item.key, existing.status, False, self.knowledge_base.name
            )
        )

    def _create(
        self, index: int, item: WriteItem, superseded: MemoryRecord | None, digest: str
    ) -> None:
        record = _new_record(
            self.scope, self.knowledge_base, item, self.now, len(self.batch.new_records)
        )
        if superseded is not None:
            history.snapshot([superseded], actor=self.actor, cause=RecordVersion.Cause.SUPERSEDE)
            supersession.close(
                superseded,
                record,
                supersession.starts(item, self.now),
                f"items[{index}].valid_from",
            )
            superseded.updated_at = self.now
            self.batch.changed.append(superseded)
        record.import_job_id = self.import_job
        record.changed_by, record.change_cause = self.actor[:200], _creation_cause(self.cause)
        if self.consolidate and item.kind == MemoryRecord.Kind.EPISODIC:
            record.consolidation = CONSOLIDATION_PENDING
        self.batch.new_records.append(record)
        self.created.add(record.pk)
        if item.key is not None:
            self.by_key[(item.namespace, item.key)] = record
        self.by_hash.setdefault((item.namespace, digest), str(record.pk))
        self.batch.results.append(
            RecordResult(str(record.pk), item.key, record.status, False, self.knowledge_base.name)
        )


def _new_record(
    scope: Scope, knowledge_base: KnowledgeBase, item: WriteItem, now: datetime, position: int
) -> MemoryRecord:
    return MemoryRecord(
        org_id=scope.org_id,
        domain_id=scope.domain_id,
        knowledge_base=knowledge_base,
        namespace=item.namespace,
        key=item.key,
        kind=item.kind,
        content=item.content,
        content_hash=item.content_hash,
        metadata=dict(item.metadata),
        tags=list(item.tags),
        expires_at=item.expires_at,
        occurred_at=item.occurred_at,
        valid_from=item.valid_from,
        valid_until=item.valid_until,
        # Distinct, increasing timestamps keep a batch's order in newest-first lists.
        created_at=now + timedelta(microseconds=position),
        updated_at=now,
    )


def _announce(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    batch: _Batch,
    *,
    principal: policy.Principal,
    observations: bool = True,
) -> None:
    """What a saved batch tells the rest: the ``record_written`` signal, the dedupe and
    written observations (not for an import's batches, ``observations=False``: the import
    records one summary of each, :func:`memoryhub.services.imports.observe_run`), and the
    records to embed (once the transaction commits)."""
    actor = policy.actor_label(principal)
    written = [*batch.new_records, *batch.changed]
    if written:
        signals.send_on_commit(
            signals.record_written,
            scope=scope,
            source=knowledge_base.name,
            created=[str(record.pk) for record in batch.new_records],
            updated=[str(record.pk) for record in batch.changed],
            actor=actor,
        )
    if batch.deduplicated and observations:
        observe.record_in_scope(
            Observation.Kind.MEMORY_DEDUPLICATED,
            scope,
            source=knowledge_base.name,
            count=batch.deduplicated,
            payload={"source": knowledge_base.name, "n": batch.deduplicated},
            actor=actor,
        )
    if written and observations:
        observe_written(
            scope,
            knowledge_base,
            created=len(batch.new_records),
            updated=len(batch.changed),
            principal=principal,
        )
    statuses = {str(record.pk): record.status for record in written}
    pending = [pk for pk, status in statuses.items() if status == MemoryRecord.Status.PENDING]
    schedule_indexing(
        pending, bulk=len(pending) >= memoryhub_settings.BULK_MIN_RECORDS, org_id=scope.org_id
    )


def observe_written(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    *,
    created: int,
    updated: int,
    principal: policy.Principal,
) -> None:
    """The ``memory.written`` observation of a write or an update by id (``operator``:
    whether the read-only rule left ``principal`` free)."""
    n = created + updated
    observe.record_in_scope(
        Observation.Kind.MEMORY_WRITTEN,
        scope,
        source=knowledge_base.name,
        count=n,
        payload={
            "source": knowledge_base.name,
            "n": n,
            "created": created,
            "updated": updated,
            "operator": policy.may_bypass_read_only(principal, scope.org_id),
        },
        actor=policy.actor_label(principal),
    )


def _fill_dedupe_status(records: list[RecordResult]) -> list[RecordResult]:
    """Deduplicated results report the status of the record they point at."""
    ids = [record.id for record in records if record.deduplicated]
    if not ids:
        return records
    statuses = {
        str(pk): status
        for pk, status in MemoryRecord.unscoped.filter(pk__in=ids).values_list("id", "status")
    }
    return [
        RecordResult(r.id, r.key, statuses.get(r.id, r.status), True, r.source)
        if r.deduplicated
        else r
        for r in records
    ]


def write(
    scope: Scope,
    items: Sequence[Mapping[str, Any] | WriteItem],
    *,
    sources: Sequence[str] | None = None,
    principal: policy.Principal = policy.AGENT,
    import_job: int | None = None,
    cause: str | None = None,
    consolidate: bool = False,
) -> WriteResult:
    """Write ``items`` to the knowledge bases ``sources`` (default ``["memory"]``).

    ``principal`` is who writes (:mod:`memoryhub.policy`; by default an unnamed agent):
    named in the records' history and the observations, and asked whether the read-only
    rule binds it.

    ``cause`` is what a record's history says of the change (default: ``import`` for an
    import's writes, ``admin`` for a curator's, ``upsert`` otherwise).

    ``consolidate`` (or the knowledge base's ``consolidate`` flag) has the episodic
    records this call writes consolidated into semantic facts once they are indexed
    (:mod:`memoryhub.services.consolidation`).

    ``import_job`` marks the records this call creates as that import's (what undoing
    the import erases); records it updates or deduplicates against are not marked.

    Raises :class:`ValidationFailed` (nothing written) for invalid input,
    :class:`UnknownSource` for a knowledge base the domain lacks, and
    :class:`WriteRefused` when the only target is read-only with ``on_write="refuse"``
    (after counting the refusal). Whoever may curate in the scope's org is not bound by
    the read-only policy (:func:`memoryhub.policy.may_bypass_read_only`).
    """
    if not isinstance(scope, Scope):
        raise TypeError("write() needs a Scope.")
    names = source_names(sources)
    validated = items_of(items)
    knowledge_bases = resolve_sources(scope, names)
    with tracing.span("update_memory", store=scope.domain_id) as current:
        result, refusal = run_again_when_cancelled(
            functools.partial(
                _write_validated,
                scope,
                knowledge_bases,
                validated,
                principal=principal,
                import_job=import_job,
                cause=cause,
                consolidate=consolidate,
            )
        )
        if current is not None:
            current.set_attribute("gen_ai.memory.record.count", len(result.records))
    _count(result, len(validated), refused_all=refusal is not None and len(knowledge_bases) == 1)
    if refusal is not None and len(knowledge_bases) == 1:
        raise refusal
    return result


def _count(result: WriteResult, items: int, *, refused_all: bool) -> None:
    """The write's items by outcome, for the metrics."""
    merged = sum(record.deduplicated for record in result.records)
    metrics.observe_writes(
        {
            "accepted": len(result.records) - merged,
            "deduplicated": merged,
            "refused": items * (1 if refused_all else len(result.refused)),
            "failed": items * len(result.failed),
        }
    )


def _write_validated(
    scope: Scope,
    knowledge_bases: Sequence[KnowledgeBase],
    validated: Sequence[WriteItem],
    *,
    principal: policy.Principal,
    import_job: int | None,
    cause: str | None,
    consolidate: bool,
) -> tuple[WriteResult, WriteRefused | None]:
    """One transaction of :func:`write` (run again whole if the database cancels it):
    the result, and the refusal of a read-only target if there was one."""
    result = WriteResult()
    refusal: WriteRefused | None = None
    with transaction.atomic(), tenant_scope(scope):
        _lock_targets(scope, knowledge_bases, validated)
        for knowledge_base in knowledge_bases:
            if policy.refuses_change([knowledge_base], principal=principal):
                refused = refuse(scope, knowledge_base, len(validated), principal)
                if refused is None:
                    result.refused.append(knowledge_base.name)
                else:
                    result.failed[knowledge_base.name] = refused.code
                    refusal = refused
                continue
            if validated:
                with transaction.atomic():
                    result.records.extend(
                        _write_to(
                            scope,
                            knowledge_base,
                            validated,
                            principal,
                            import_job,
                            cause or _default_cause(scope, principal, import_job),
                            consolidate or knowledge_base.consolidate,
                        )
                    )
            result.accepted.append(knowledge_base.name)
        if result.records:
            bump_generation_on_commit(scope)
        result.records = _fill_dedupe_status(result.records)
    return result, refusal


def _lock_targets(
    scope: Scope, knowledge_bases: Sequence[KnowledgeBase], items: Sequence[WriteItem]
) -> None:
    """Every (knowledge base, namespace) lock of a write up front, in one order (by
    knowledge base id) that erasures take them in too: a write and an erasure of the same
    namespace serialise, and never deadlock."""
    namespaces = {item.namespace for item in items}
    lock_domain(scope)
    for knowledge_base in sorted(knowledge_bases, key=lambda kb: kb.pk):
        lock_namespaces(knowledge_base, namespaces)


def _default_cause(scope: Scope, principal: policy.Principal, import_job: int | None) -> str:
    if import_job is not None:
        return RecordVersion.Cause.IMPORT
    if policy.may_bypass_read_only(principal, scope.org_id):
        return RecordVersion.Cause.ADMIN
    return RecordVersion.Cause.UPSERT


def _creation_cause(cause: str) -> str:
    """What a new record's history says of its creation: ``create``, or what created it
    when that says more (an import, consolidation)."""
    if cause in (RecordVersion.Cause.IMPORT, RecordVersion.Cause.CONSOLIDATION):
        return cause
    return RecordVersion.Cause.CREATE


def is_unchanged(record: MemoryRecord, item: WriteItem) -> bool:
    return (
        record.content == item.content
        and record.key == item.key
        and record.kind == item.kind
        and list(record.tags) == list(item.tags)
        and record.metadata == dict(item.metadata)
        and record.expires_at == item.expires_at
        and record.occurred_at == item.occurred_at
        and record.valid_from == item.valid_from
        and record.valid_until == item.valid_until
    )
