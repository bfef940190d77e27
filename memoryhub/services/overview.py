"""The operator's home: per domain the user may read, what memory holds and what happened
to it lately. Every count is one grouped query over an index, whatever the volume."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import current_app
from django.db.models import Count, Q, Sum
from django.utils import timezone

from tenants.models import Domain

from .. import policy
from ..conf import memoryhub_settings
from ..embedders.base import is_lexical
from ..models import ErasureReceipt, ImportJob, MemoryRecord, Observation
from ..policy import Action
from .indexing import models_in_use, pipeline_status

#: Domains the home page lists (the largest first); the rest are counted, not listed.
MAX_DOMAINS = 50


def overview(principal: policy.Principal) -> dict[str, Any]:
    """Domains (records, pending, failed, refusals and dedupes in 24 h / 7 d), recent
    imports and erasures, and the indexing pipeline's status, for ``principal``.

    Longer than most on purpose: each count is gathered once for all the listed domains
    (by the helpers below), then shaped into one row per domain, in one place."""
    orgs = policy.orgs_allowing(principal, Action.READ)
    domains = list(
        Domain.objects.filter(org__in=orgs)
        .select_related("org")
        .order_by("org__slug", "slug")[: MAX_DOMAINS + 1]
    )
    more = len(domains) > MAX_DOMAINS
    domains = domains[:MAX_DOMAINS]
    ids = [domain.pk for domain in domains]
    records = MemoryRecord.unscoped.filter(domain_id__in=ids)
    totals = {
        row["domain_id"]: row["n"]
        for row in records.values("domain_id").annotate(n=Count("pk")).order_by()
    }
    unindexed = _unindexed_counts(records, ids)
    embedder = memoryhub_settings.embedder()
    current = embedder.name
    previous = _previous_model_counts(records, current)
    events = _recent_events(ids)
    rows = []
    for domain in domains:
        counts: dict[str, Any] = dict(events.get(domain.pk) or {})
        rows.append(
            {
                "domain": domain,
                "records": totals.get(domain.pk, 0),
                "pending": unindexed.get((domain.pk, MemoryRecord.Status.PENDING), 0),
                "failed": unindexed.get((domain.pk, MemoryRecord.Status.FAILED), 0),
                "capped_at": UNINDEXED_CAP,
                "previous_model": previous.get(domain.pk, 0),
                **{
                    name: counts.get(name) or 0
                    for name in ("refused_day", "refused_week", "deduped_day", "deduped_week")
                },
            }
        )
    imports = (
        ImportJob.unscoped.filter(domain_id__in=ids)
        .select_related("knowledge_base", "domain__org")
        .order_by("-created_at")[:5]
    )
    # Receipts are for those who may erase (as in their admin), not for viewers.
    erasing = policy.orgs_allowing(principal, Action.FORGET)
    erasures = ErasureReceipt.unscoped.filter(domain_id__in=ids, org_id__in=erasing).order_by(
        "-created_at"
    )[:5]
    pipeline = _pipeline()
    return {
        "domains": rows,
        "more_domains": more,
        "imports": list(imports),
        "erasures": list(erasures),
        "pipeline": pipeline,
        "model": current,
        "lexical": is_lexical(embedder),
        "migrating": bool(previous),
        "can": {
            action.value: policy.allows_anywhere(principal, action)
            for action in (Action.READ, Action.IMPORT, Action.ERASE_SUBJECT, Action.FORGET)
        },
    }


def _previous_model_counts(records: Any, current: str) -> dict[int, int]:
    """A change of embedder in progress: indexed records still on a previous model, per
    domain (one range of the model index per previous model; shrinks as they go)."""
    previous: dict[int, int] = {}
    for model in models_in_use():
        if model == current:
            continue
        for row in (
            records.filter(embedding_model=model, status=MemoryRecord.Status.INDEXED)
            .values("domain_id")
            .annotate(n=Count("pk"))
            .order_by()
        ):
            previous[row["domain_id"]] = previous.get(row["domain_id"], 0) + row["n"]
    return previous


def _recent_events(ids: list[int]) -> dict[int, Any]:
    """Refusals and dedupes per domain in the last day and week, in one grouped query."""
    now = timezone.now()
    day, week = now - timedelta(days=1), now - timedelta(days=7)
    return {
        row["domain_id"]: row
        for row in Observation.unscoped.filter(
            domain_id__in=ids,
            created_at__gte=week,
            kind__in=[
                Observation.Kind.MEMORY_WRITE_REFUSED,
                Observation.Kind.MEMORY_DEDUPLICATED,
            ],
        )
        .values("domain_id")
        .annotate(
            # Refusals, as a knowledge base's refused_writes counts them (a refused
            # change of several records is one refusal).
            refused_day=_count(Observation.Kind.MEMORY_WRITE_REFUSED, day),
            refused_week=_count(Observation.Kind.MEMORY_WRITE_REFUSED, week),
            deduped_day=_sum(Observation.Kind.MEMORY_DEDUPLICATED, day),
            deduped_week=_sum(Observation.Kind.MEMORY_DEDUPLICATED, week),
        )
        .order_by()
    }


def _pipeline() -> dict[str, Any]:
    """The indexing pipeline's status; the page still shows what the database says when
    asking the broker fails."""
    try:
        return pipeline_status(eager=bool(current_app.conf.task_always_eager))
    except Exception as exc:
        return {"ok": False, "error": type(exc).__name__}


#: Pending and failed records are counted exactly up to this many per domain (a backlog
#: of a million imported records must not make the home page count them all).
UNINDEXED_CAP = 10_000


def _unindexed_counts(records: Any, ids: list[int]) -> dict[tuple[int, str], int]:
    """Pending and failed records per domain: one grouped count when the backlog is
    small, else a count per domain and status stopped at ``UNINDEXED_CAP + 1``."""
    unindexed = records.exclude(status=MemoryRecord.Status.INDEXED)
    if unindexed.order_by().values("pk")[: UNINDEXED_CAP + 1].count() <= UNINDEXED_CAP:
        return {
            (row["domain_id"], row["status"]): row["n"]
            for row in unindexed.values("domain_id", "status").annotate(n=Count("pk")).order_by()
        }
    return {
        (domain_id, status): records.filter(domain_id=domain_id, status=status)
        .order_by()
        .values("pk")[: UNINDEXED_CAP + 1]
        .count()
        for domain_id in ids
        for status in (MemoryRecord.Status.PENDING, MemoryRecord.Status.FAILED)
    }


def _sum(kind: str, since: Any) -> Sum:
    return Sum("count", filter=Q(kind=kind, created_at__gte=since))


def _count(kind: str, since: Any) -> Count:
    return Count("pk", filter=Q(kind=kind, created_at__gte=since))
