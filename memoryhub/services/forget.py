"""Forgetting memory (GDPR Article 17): hard deletes with an audit trail of counts only.

Rows are deleted (the vectors live in them), the domain's cache generation is bumped and
its cached query results are deleted, queued indexing tasks for the erased ids find
nothing and do nothing, and one ``memory.forgotten`` observation records counts per
knowledge base and a salted hash of the selector, never the content or the namespace in
clear.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, QuerySet

from .. import observe
from ..cache import erase_on_commit
from ..models import KnowledgeBase, MemoryRecord, Observation
from ..scope import Scope, tenant_scope
from .errors import ValidationFailed

__all__ = [
    "ForgetRequest",
    "ForgetResult",
    "NothingToForget",
    "forget",
    "forget_knowledge_base",
    "forget_org",
    "forget_record",
    "preview",
    "preview_org",
    "salted_hash",
]


class NothingToForget(ValidationFailed):
    """A forget was malformed or named no selector; forgetting everything needs ``all``."""

    def __init__(
        self,
        message: str = "Name a namespace, key or source, or set all=true.",
        field: str = "non_field_errors",
    ) -> None:
        super().__init__({field: [message]})


@dataclass(frozen=True, slots=True)
class ForgetRequest:
    """What to erase inside a scope. Empty selectors with ``all=False`` are refused."""

    namespace: str | None = None
    key: str | None = None
    source: str | None = None
    all: bool = False

    def __post_init__(self) -> None:
        for name in ("namespace", "key", "source"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or "\x00" in value):
                raise NothingToForget("must be a string without NUL characters.", name)
        if self.key is not None and not self.key:
            raise NothingToForget("may not be empty.", "key")
        if self.source is not None and not self.source:
            raise NothingToForget("may not be empty.", "source")
        if not isinstance(self.all, bool):
            raise NothingToForget("must be true or false.", "all")
        if not self.all and self.namespace is None and self.key is None and self.source is None:
            raise NothingToForget()


@dataclass(slots=True)
class ForgetResult:
    deleted: int = 0
    by_source: dict[str, int] = field(default_factory=dict)


def salted_hash(value: str) -> str:
    """An HMAC of ``value`` keyed by the site's secret: comparable, not reversible."""
    return hmac.new(
        settings.SECRET_KEY.encode(), value.encode("utf-8"), hashlib.sha256
    ).hexdigest()[:32]


def _selected(request: ForgetRequest) -> QuerySet[MemoryRecord]:
    records = MemoryRecord.objects.all()
    if request.namespace is not None:
        records = records.filter(namespace=request.namespace)
    if request.key is not None:
        records = records.filter(key=request.key)
    if request.source is not None:
        records = records.filter(knowledge_base__name=request.source)
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


def forget(scope: Scope, request: ForgetRequest, *, actor: str = "") -> ForgetResult:
    """Hard-delete the records ``request`` selects in ``scope``; return counts per KB."""
    result = ForgetResult()
    with transaction.atomic(), tenant_scope(scope):
        if (
            request.source is not None
            and not KnowledgeBase.objects.filter(name=request.source).exists()
        ):
            return result
        records = _selected(request).select_for_update(of=("self",))
        counts: dict[str, int] = {}
        for name in records.values_list("knowledge_base__name", flat=True):
            counts[name] = counts.get(name, 0) + 1
        if not counts:
            return result
        MemoryRecord.objects.filter(pk__in=_selected(request).values("pk")).delete()
        result.deleted = sum(counts.values())
        result.by_source = dict(sorted(counts.items()))
        selector: dict[str, Any] = {"all": request.all}
        for name in ("namespace", "key", "source"):
            value = getattr(request, name)
            if value is not None:
                selector[name] = salted_hash(value) if name != "source" else value
        observe.record_in_scope(
            Observation.Kind.MEMORY_FORGOTTEN,
            scope,
            source=request.source or "",
            count=result.deleted,
            payload={"by_source": result.by_source, "selector": selector},
            actor=actor,
        )
        erase_on_commit(scope)
    return result


def forget_org(org_id: int, *, actor: str = "") -> ForgetResult:
    """Erase every record of every domain of an org (the admin's org erasure)."""
    from tenants.models import Domain

    total = ForgetResult()
    for domain_id in Domain.objects.filter(org_id=org_id).values_list("pk", flat=True):
        result = forget(Scope(org_id, domain_id), ForgetRequest(all=True), actor=actor)
        total.deleted += result.deleted
        for name, count in result.by_source.items():
            total.by_source[name] = total.by_source.get(name, 0) + count
    return total


def forget_record(scope: Scope, record_id: Any, *, actor: str = "") -> ForgetResult:
    """Hard-delete one record by id (``RecordNotFound`` if the scope has no such record)."""
    from .records import get_record

    record = get_record(scope, record_id)
    result = ForgetResult()
    with transaction.atomic(), tenant_scope(scope):
        deleted, _ = MemoryRecord.objects.filter(pk=record.pk).delete()
        if not deleted:
            return result
        name = record.knowledge_base.name
        result.deleted = 1
        result.by_source = {name: 1}
        observe.record_in_scope(
            Observation.Kind.MEMORY_FORGOTTEN,
            scope,
            source=name,
            count=1,
            payload={"by_source": result.by_source, "selector": {"id": str(record.pk)}},
            actor=actor,
        )
        erase_on_commit(scope)
    return result


def forget_knowledge_base(scope: Scope, name: str, *, actor: str = "") -> ForgetResult:
    """Erase a knowledge base's records (before the knowledge base itself is deleted)."""
    return forget(scope, ForgetRequest(source=name), actor=actor)


def preview_org(org_id: int) -> list[tuple[str, str, int]]:
    """(domain slug, knowledge base, live record count) rows for an org erasure page."""
    from tenants.models import Domain

    rows: list[tuple[str, str, int]] = []
    for domain in Domain.objects.filter(org_id=org_id).order_by("slug"):
        for name, count in preview(Scope(org_id, domain.pk), ForgetRequest(all=True)).items():
            rows.append((domain.slug, name, count))
    return rows
