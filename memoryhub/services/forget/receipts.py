"""Erasure receipts: what an erasure leaves as its proof (counts and a keyed hash of its
selector, never the content or a namespace in clear), and how they are found."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from tenants.models import Domain

from ... import observe
from ...cache import erase_on_commit
from ...exceptions import ReceiptNotFound
from ...models import (
    ErasureReceipt,
    Observation,
)
from ...scope import Scope, tenant_scope
from .. import word_statistics
from .request import ForgetRequest, ForgetResult, salted_hash
from .vacuum import schedule_vacuum

logger = logging.getLogger(__name__)


def keyed_selector(request: ForgetRequest) -> dict[str, Any]:
    """The request as a receipt keeps it: namespace and key as keyed hashes."""
    selector: dict[str, Any] = {"all": request.all}
    for name in ("namespace", "key"):
        value = getattr(request, name)
        if value is not None:
            selector[name] = salted_hash(value)
    if request.sources is not None:
        selector["sources"] = list(request.sources)
    if request.import_job is not None:
        selector["import_job"] = request.import_job
    return selector


def record_receipt(
    scope: Scope,
    selector: dict[str, Any],
    result: ForgetResult,
    actor: str,
    batch: uuid.UUID | None,
) -> None:
    """The permanent receipt and the audit observation (counts and hashes, never the
    content or the namespace), then the cache's erasure and the vacuum after commit."""
    domain = Domain.objects.select_related("org").get(pk=scope.domain_id)
    receipt = ErasureReceipt.unscoped.create(
        actor=actor[:150],
        org_id=scope.org_id,
        org_slug=domain.org.slug,
        domain_id=scope.domain_id,
        domain_slug=domain.slug,
        batch=batch or uuid.uuid4(),
        selector=selector,
        by_source=result.by_source,
        deleted=result.deleted,
        cancelled_imports=result.cancelled_imports,
    )
    result.receipt = str(receipt.pk)
    sources = selector.get("sources") or []
    observe.record_in_scope(
        Observation.Kind.MEMORY_FORGOTTEN,
        scope,
        source=sources[0] if len(sources) == 1 else "",
        count=result.deleted,
        payload={"by_source": result.by_source, "selector": selector, "receipt": result.receipt},
        actor=actor,
    )
    # Counts of the domain's common words may count erased records' words: gone with
    # them, counted again from what remains by the sweeper.
    word_statistics.forget(scope)
    erase_on_commit(scope)
    transaction.on_commit(schedule_vacuum)


#: Every store that can hold a data subject's data, and how an erasure reaches it (or
#: why it need not). ``tests/erasure/test_erasure_registry.py`` fails on a model with a field
#: that may hold subject data and no entry here: a new store must say how it is erased.
ERASURE_REGISTRY: dict[str, str] = {
    "memoryhub.MemoryRecord": "hard-deleted (every knowledge base, read-only ones included)",
    "memoryhub.ImportJob": "unfinished jobs for the subject cancelled; jobs made for the "
    "subject lose file name and namespaces, shared ones the subject's namespace "
    "(_scrub_jobs)",
    "memoryhub.ImportChunk": "the files of cancelled jobs deleted (_drop_files), and the"
    " files failed imports keep for a re-run that may hold the subject's lines"
    " (_drop_kept_files)",
    "memoryhub.RecordVersion": "a record's previous states: deleted with the record (the "
    "foreign key cascades) by every path that deletes records",
    "admin.LogEntry": "entries about erased records deleted (store.deletion); a record's "
    "str() is its kind and id, never content",
    "memoryhub.Observation": "holds counts, knowledge base names and keyed hashes only",
    "memoryhub.ErasureReceipt": "the receipt: counts and the selector as a keyed hash",
    "memoryhub.KnowledgeBase": "operator-curated names and descriptions, not subject data",
    "memoryhub.IdempotentRequest": "answers kept for retries (an update's holds the record):"
    " every erasure in the domain deletes the domain's (idempotency.forget_domain), the"
    " sweeper those older than IDEMPOTENCY_TTL",
    "sessions.Session": "login sessions of staff users, not memory",
    "memoryhub.ArchiveJob": "an org export's file (it may hold the subject): deleted by every"
    " erasure in the org (archives.jobs, on records_forgotten), by the sweeper after"
    " ARCHIVE_RETENTION; the row keeps the uploaded file's name and counts",
    "memoryhub.WordFrequency": "a large domain's common words (held by at least 20 of "
    "its records) and their counts: deleted by every erasure in the domain "
    "(word_statistics.forget), counted again by the sweeper from what remains",
    "memoryhub.WordStatistics": "when a domain's words were counted, and how many "
    "records it held: counts only",
}


def get_receipt(scope: Scope, receipt_id: Any) -> ErasureReceipt:
    """The scope's erasure receipt ``receipt_id`` (:class:`ReceiptNotFound` otherwise)."""
    try:
        pk = uuid.UUID(str(receipt_id))
    except ValueError:
        raise ReceiptNotFound(receipt_id) from None
    with tenant_scope(scope):
        receipt = ErasureReceipt.objects.filter(pk=pk).first()
    if receipt is None:
        raise ReceiptNotFound(receipt_id)
    return receipt


def receipts_for_namespace(namespace: str) -> QuerySet[ErasureReceipt]:
    """Receipts of erasures of ``namespace`` (looked up by its keyed hash), unscoped:
    the caller narrows them to the orgs it may see."""
    return ErasureReceipt.unscoped.filter(selector__namespace=salted_hash(namespace))
