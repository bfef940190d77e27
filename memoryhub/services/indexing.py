"""Indexing: embed pending records and store their vectors.

``index_records(ids)`` is idempotent: ids that no longer exist (forgotten) or are
already indexed for the current model are skipped, and a vector is stored only if the
record's content is still the content that was embedded (a concurrent update wins).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from .. import observe
from ..cache import bump_generation
from ..conf import memoryhub_settings
from ..embedders import EmbedderError
from ..models import MemoryRecord, Observation
from ..scope import Scope

__all__ = ["IndexResult", "index_records", "pending_for_sweep", "purge_expired"]


@dataclass(slots=True)
class IndexResult:
    indexed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def index_records(record_ids: Sequence[str]) -> IndexResult:
    """Embed and store vectors for ``record_ids`` in one embedder call.

    On an embedder error, attempts are counted and :class:`EmbedderError` is raised for
    the caller (the task) to retry; once ``INDEX_MAX_ATTEMPTS`` is reached the records
    are marked ``failed`` with the error, an ``embedding.failed`` observation is
    recorded, and nothing is raised.
    """
    embedder = memoryhub_settings.embedder()
    result = IndexResult()
    rows = list(
        MemoryRecord.unscoped.filter(pk__in=list(record_ids))
        .exclude(status=MemoryRecord.Status.INDEXED, embedding_model=embedder.name)
        .values_list("id", "content", "content_hash")
    )
    found = {str(pk) for pk, _, _ in rows}
    result.skipped = [str(pk) for pk in record_ids if str(pk) not in found]
    if not rows:
        return result
    try:
        vectors = embedder.embed_documents([content for _, content, _ in rows])
        if len(vectors) != len(rows):
            raise EmbedderError(f"embedder returned {len(vectors)} vectors for {len(rows)} texts")
    except Exception as exc:
        _record_failure([pk for pk, _, _ in rows], exc)
        raise EmbedderError(str(exc)) from exc
    now = timezone.now()
    with transaction.atomic():
        for (pk, _, digest), vector in zip(rows, vectors, strict=True):
            updated = MemoryRecord.unscoped.filter(pk=pk, content_hash=digest).update(
                embedding=vector,
                embedding_model=embedder.name,
                status=MemoryRecord.Status.INDEXED,
                last_error="",
                indexed_at=now,
            )
            (result.indexed if updated else result.skipped).append(str(pk))
    return result


def _record_failure(record_ids: list[Any], exc: Exception) -> None:
    """Count an attempt; mark records failed once they have used up their attempts."""
    message = f"{type(exc).__name__}: {exc}"[:2000]
    max_attempts = memoryhub_settings.INDEX_MAX_ATTEMPTS
    with transaction.atomic():
        records = MemoryRecord.unscoped.filter(pk__in=record_ids).exclude(
            status=MemoryRecord.Status.INDEXED
        )
        records.update(attempts=F("attempts") + 1, last_error=message)
        exhausted = list(
            records.filter(attempts__gte=max_attempts).values_list("id", "org_id", "domain_id")
        )
        if not exhausted:
            return
        MemoryRecord.unscoped.filter(pk__in=[pk for pk, _, _ in exhausted]).update(
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


def pending_for_sweep(older_than: timedelta | None = None) -> list[str]:
    """Ids of records left pending longer than ``SWEEP_PENDING_AFTER`` (a worker died)."""
    if older_than is None:
        older_than = timedelta(seconds=memoryhub_settings.SWEEP_PENDING_AFTER)
    cutoff = timezone.now() - older_than
    return [
        str(pk)
        for pk in MemoryRecord.unscoped.filter(
            status=MemoryRecord.Status.PENDING, updated_at__lte=cutoff
        ).values_list("id", flat=True)[:10_000]
    ]


def purge_expired() -> int:
    """Delete expired records and observations past retention; bump affected caches."""
    now = timezone.now()
    expired = MemoryRecord.unscoped.filter(Q(expires_at__lte=now))
    scopes = set(expired.values_list("org_id", "domain_id").distinct())
    deleted, _ = expired.delete()
    for org_id, domain_id in scopes:
        bump_generation(Scope(org_id, domain_id))
    retention = timedelta(days=memoryhub_settings.OBSERVATION_RETENTION_DAYS)
    Observation.unscoped.filter(created_at__lt=now - retention).delete()
    return deleted
