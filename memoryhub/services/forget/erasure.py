"""The erasure itself: a selector's records deleted under the writers' locks, read-only
knowledge bases refusing an agent, imports cancelled, a receipt recorded, in one
transaction."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Count, QuerySet

from tenants.models import Domain

from ... import metrics, policy, signals, tracing
from ...exceptions import UnknownSource, ValidationFailed, WriteRefused
from ...models import (
    KnowledgeBase,
    MemoryRecord,
)
from ...scope import Scope, tenant_scope
from .. import idempotency
from ..records import get_record
from ..store.deletion import delete_records
from ..store.locks import lock_domain, lock_namespaces
from ..store.refusals import refuse, refuse_record_change
from ..store.transient import run_again_when_cancelled
from .import_jobs import cancel_imports, lock_imports
from .receipts import keyed_selector, record_receipt
from .request import ForgetRequest, ForgetResult

logger = logging.getLogger(__name__)


def _selected(request: ForgetRequest) -> QuerySet[MemoryRecord]:
    records = MemoryRecord.objects.all()
    if request.namespace is not None:
        records = records.filter(namespace=request.namespace)
    if request.key is not None:
        records = records.filter(key=request.key)
    if request.sources is not None:
        records = records.filter(knowledge_base__name__in=request.sources)
    if request.import_job is not None:
        records = records.filter(import_job_id=request.import_job)
    return records


def preview(scope: Scope, request: ForgetRequest) -> dict[str, int]:
    """Counts per knowledge base of what ``forget`` would erase, erasing nothing."""
    with tenant_scope(scope):
        rows = (
            _selected(request)
            .values("knowledge_base__name")
            .annotate(n=Count("id"))
            .order_by("knowledge_base__name")
        )
        return {row["knowledge_base__name"]: row["n"] for row in rows}


def forget(
    scope: Scope,
    request: ForgetRequest,
    *,
    principal: policy.Principal = policy.AGENT,
    batch: uuid.UUID | None = None,
) -> ForgetResult:
    """Hard-delete the records ``request`` selects in ``scope``; return counts per KB.

    ``sources`` naming a knowledge base the domain lacks is :class:`UnknownSource` (a
    misspelt erasure must not look like a success). ``principal`` is who forgets (by
    default an unnamed agent). Read-only knowledge bases whose records the request
    selects refuse the forget unless the policy lets ``principal`` curate in the scope's
    org or it erases a data subject (:mod:`memoryhub.policy`): one whose policy is ``refuse``
    fails the whole request with :class:`WriteRefused` (nothing is deleted; the
    refusal is counted), one whose policy is ``ignore`` keeps its records and is
    reported under ``refused``.

    ``principal`` needs the ``forget`` permission in ``scope``, and ``erase_subject``
    for a whole namespace (:attr:`ForgetRequest.is_subject_erasure`):
    :class:`~memoryhub.exceptions.PolicyDenied` otherwise, nothing deleted.
    """
    policy.require(principal, policy.Action.FORGET, scope)
    if request.is_subject_erasure:
        policy.require(principal, policy.Action.ERASE_SUBJECT, scope)
    started = time.perf_counter()
    kind = _kind(request)
    outcome = "failed"
    try:
        with tracing.span(
            "delete_memory", store=scope.domain_id, **{"memoryhub.erasure": kind}
        ) as current:
            result, refusal = run_again_when_cancelled(
                partial(_forget_once, scope, request, principal=principal, batch=batch)
            )
            if current is not None:
                current.set_attribute("gen_ai.memory.record.count", result.deleted)
        outcome = "done" if refusal is None else "refused"
    except (UnknownSource, ValidationFailed):
        outcome = "invalid"  # the request's mistake, answered 400: nothing went wrong
        raise
    finally:
        metrics.observe_erasure(kind, outcome, time.perf_counter() - started)
    if refusal is not None:
        raise refusal
    return result


def _kind(request: ForgetRequest) -> str:
    """What an erasure erased, as metrics label it."""
    if request.import_job is not None:
        return "import"
    if request.all:
        return "domain"
    if request.key is not None:
        return "key"
    return "subject" if request.is_subject_erasure else "source"


def _forget_once(
    scope: Scope,
    request: ForgetRequest,
    *,
    principal: policy.Principal,
    batch: uuid.UUID | None,
) -> tuple[ForgetResult, WriteRefused | None]:
    """One transaction of :func:`forget` (run again whole if the database cancels it):
    what it erased, and the refusal of a read-only knowledge base if there was one."""
    result = ForgetResult()
    actor = policy.actor_label(principal)
    with transaction.atomic(), tenant_scope(scope):
        if request.sources is not None:
            _check_sources(request.sources)
        # Locks, in the order every writer takes them (import job rows, the domain, the
        # namespaces): a running import or a write in flight commits first and is erased
        # below; one that starts now waits, and is new data.
        imports = lock_imports(request)
        _lock_writers(scope, request)
        records = _selected(request)
        counts: dict[int, int] = {}
        for kb_id in records.select_for_update(of=("self",)).values_list(
            "knowledge_base_id", flat=True
        ):
            counts[kb_id] = counts.get(kb_id, 0) + 1
        knowledge_bases = {kb.pk: kb for kb in KnowledgeBase.objects.filter(pk__in=counts)}
        refusal = _apply_read_only(scope, request, knowledge_bases, counts, result, principal)
        erased = {kb_id: n for kb_id, n in counts.items() if kb_id in knowledge_bases}
        if refusal is None:
            result.cancelled_imports = cancel_imports(imports, request, principal)
        if refusal is None and erased:
            _, orphans = delete_records(records.filter(knowledge_base_id__in=erased))
            for kb_id, n in orphans.items():
                erased[kb_id] = erased.get(kb_id, 0) + n
                if kb_id not in knowledge_bases:
                    knowledge_bases[kb_id] = KnowledgeBase.objects.get(pk=kb_id)
            result.deleted = sum(erased.values())
            result.by_source = dict(
                sorted((knowledge_bases[kb_id].name, n) for kb_id, n in erased.items())
            )
        if refusal is None and (result.deleted or result.cancelled_imports):
            # Answers kept for retries may hold what was erased (an update's record).
            idempotency.forget_domain(scope)
            record_receipt(scope, keyed_selector(request), result, actor, batch)
            _signal(scope, request, result, actor)
    return result, refusal


def _signal(scope: Scope, request: ForgetRequest, result: ForgetResult, actor: str) -> None:
    """Tell the host project (``memoryhub.signals``), once this erasure commits."""
    common = {"scope": scope, "receipt": result.receipt, "deleted": result.deleted, "actor": actor}
    signals.send_on_commit(
        signals.records_forgotten,
        **common,
        by_source=dict(result.by_source),
        selector=keyed_selector(request),
    )
    if request.is_subject_erasure and request.namespace:
        signals.send_on_commit(signals.subject_erased, **common, namespace=request.namespace)


def _lock_writers(scope: Scope, request: ForgetRequest) -> None:
    """Wait for the writes this erasure concerns, and hold off new ones until it commits.

    A namespace's erasure takes the domain's writer lock shared and the (knowledge base,
    namespace) locks writes take; an erasure of whole knowledge bases, of the domain or
    of a key across namespaces takes the domain's writer lock exclusively.
    """
    if request.namespace is None:
        lock_domain(scope, exclusive=True)
        return
    lock_domain(scope)
    knowledge_bases = KnowledgeBase.objects.order_by("pk")
    if request.sources is not None:
        knowledge_bases = knowledge_bases.filter(name__in=request.sources)
    for knowledge_base in knowledge_bases:
        lock_namespaces(knowledge_base, [request.namespace])


def _check_sources(names: Sequence[str]) -> None:
    """Inside the scope: every named knowledge base exists (``UnknownSource`` otherwise)."""
    found = set(KnowledgeBase.objects.filter(name__in=names).values_list("name", flat=True))
    for name in names:
        if name not in found:
            raise UnknownSource(name)


def _apply_read_only(
    scope: Scope,
    request: ForgetRequest,
    knowledge_bases: dict[int, KnowledgeBase],
    counts: dict[int, int],
    result: ForgetResult,
    principal: policy.Principal,
) -> WriteRefused | None:
    """Count the refusals of read-only knowledge bases among those the request selects
    records in; drop ``ignore`` ones from ``knowledge_bases`` (reported in ``result``),
    and return the refusal of the first ``refuse`` one, if any."""
    refusal: WriteRefused | None = None
    for knowledge_base in policy.refuses_change(
        knowledge_bases.values(),
        principal=principal,
        subject_erasure=request.is_subject_erasure,
    ):
        refused = refuse(
            scope, knowledge_base, counts[knowledge_base.pk], principal, change="forget"
        )
        if refused is None:
            result.refused.append(knowledge_base.name)
            del knowledge_bases[knowledge_base.pk]
        elif refusal is None:
            refusal = refused
    result.refused.sort()
    return refusal


def forget_org(
    org_id: int, *, principal: policy.Principal, batch: uuid.UUID | None = None
) -> ForgetResult:
    """Erase every record of every domain of an org (the admin's org erasure); its
    domains' receipts share one batch."""
    total = ForgetResult()
    batch = batch or uuid.uuid4()
    for domain_id in Domain.objects.filter(org_id=org_id).values_list("pk", flat=True):
        result = forget(
            Scope(org_id, domain_id),
            ForgetRequest(all=True),
            principal=principal,
            batch=batch,
        )
        total.deleted += result.deleted
        for name, count in result.by_source.items():
            total.by_source[name] = total.by_source.get(name, 0) + count
    return total


def forget_record(
    scope: Scope, record_id: Any, *, principal: policy.Principal = policy.AGENT
) -> ForgetResult:
    """Hard-delete one record by id (``RecordNotFound`` if the scope has no such record).

    A record of a read-only knowledge base is refused (``WriteRefused``, counted) unless
    ``principal`` may curate in its org.
    """
    record = get_record(scope, record_id)
    refuse_record_change(scope, record, change="forget", principal=principal)
    knowledge_base = record.knowledge_base
    result = ForgetResult()
    with transaction.atomic(), tenant_scope(scope):
        selected = MemoryRecord.objects.filter(pk=record.pk)
        if not selected.exists():
            return result
        _, orphans = delete_records(selected)
        result.deleted = 1 + sum(orphans.values())
        by_source = {knowledge_base.pk: 1}
        for kb_id, n in orphans.items():
            by_source[kb_id] = by_source.get(kb_id, 0) + n
        names = dict(KnowledgeBase.objects.filter(pk__in=by_source).values_list("pk", "name"))
        result.by_source = {names[kb_id]: n for kb_id, n in sorted(by_source.items())}
        selector = {"id": str(record.pk), "sources": [knowledge_base.name]}
        actor = policy.actor_label(principal)
        record_receipt(scope, selector, result, actor, None)
        signals.send_on_commit(
            signals.records_forgotten,
            scope=scope,
            receipt=result.receipt,
            deleted=result.deleted,
            actor=actor,
            by_source=dict(result.by_source),
            selector=selector,
        )
    return result


def preview_org(org_id: int) -> list[tuple[str, str, int]]:
    """(domain slug, knowledge base, live record count) rows for an org erasure page."""
    rows: list[tuple[str, str, int]] = []
    for domain in Domain.objects.filter(org_id=org_id).order_by("slug"):
        for name, count in preview(Scope(org_id, domain.pk), ForgetRequest(all=True)).items():
            rows.append((domain.slug, name, count))
    return rows
