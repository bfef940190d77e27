"""What the periodic sweep decides (the ``sweep`` task only calls :func:`sweep`).

Every piece of work a worker may have lost (a killed worker, a broker that refused a
send) is found again by its state and sent again: records left pending, imports left
queued or undoing, knowledge bases being deleted, turns waiting for consolidation.
Expired memory is purged, and tenant HNSW indexes are maintained in their own task.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from .. import policy
from ..cache import bump_generation
from ..conf import memoryhub_settings
from ..models import MemoryRecord, Observation
from ..scope import Scope
from . import consolidation, forget, idempotency, imports, indexing, vector_indexes
from .archives import jobs as archive_jobs
from .dispatch import queued, redelivery_after, schedule_indexing, send
from .store.deletion import delete_records

__all__ = ["lost_records", "purge_expired", "sweep"]

#: Who the sweep re-sends lost work for: unnamed (who queued it is not kept).
SWEEPER = policy.principal_for_task("")


def sweep() -> dict[str, int]:
    """One sweep; returns what it re-sent and purged (see :func:`lost_records`)."""
    in_flight = queued("index_records")
    pending = lost_records(in_flight)
    schedule_indexing(pending)
    jobs = imports.queued_for_sweep()
    for job_id in jobs:
        imports.enqueue_job(job_id)
    for job_id in forget.undoing_for_sweep():
        forget.enqueue_undo(job_id, principal=SWEEPER)
    for knowledge_base_id in forget.deletions_for_sweep():
        forget.enqueue_knowledge_base_deletion(knowledge_base_id, principal=SWEEPER)
    waiting = consolidation.waiting()
    for knowledge_base_id, namespace in waiting:
        consolidation.enqueue(knowledge_base_id, namespace)
    purged = purge_expired()
    for archive_job in archive_jobs.queued_for_sweep():
        archive_jobs.enqueue(archive_job)
    archive_jobs.drop_expired()
    if (
        memoryhub_settings.TENANT_INDEX_MIN_RECORDS
        or vector_indexes.has_tenant_indexes()
        or vector_indexes.has_deltas()
    ):
        # Its own task: a build takes minutes on a large domain; the sweep stays quick.
        send("tenant_indexes", what="tenant index maintenance", left="left")
    return {
        "requeued": len(pending),
        "indexing_queued": in_flight if in_flight is not None else -1,
        "jobs_requeued": len(jobs),
        "consolidations_requeued": len(waiting),
        "purged": purged,
    }


def lost_records(in_flight: int | None) -> list[str]:
    """The pending records whose indexing message is lost, given how many indexing
    messages wait in the broker's queue (None: it cannot tell).

    * Messages wait (a backlog): the workers have not reached them yet, and only records
      pending for longer than the broker takes to deliver a dead worker's message again
      are lost, so a backlog is never multiplied by the sweeps.
    * None wait, and every live worker says which records it holds: the records pending
      for ``SWEEP_ORPHANED_AFTER`` that none holds are lost (a worker killed mid-batch,
      whose messages the broker would hold back until its visibility timeout).
    * Otherwise, the records pending for ``SWEEP_PENDING_AFTER``.
    """
    pending_after = memoryhub_settings.SWEEP_PENDING_AFTER
    if in_flight:
        older_than = max(pending_after, redelivery_after())
        return indexing.pending_for_sweep(timedelta(seconds=older_than))
    held = indexing.held_by_workers() if in_flight == 0 else None
    if held is None:
        return indexing.pending_for_sweep(timedelta(seconds=pending_after))
    older_than = min(pending_after, memoryhub_settings.SWEEP_ORPHANED_AFTER)
    return indexing.pending_for_sweep(timedelta(seconds=older_than), held=held)


def purge_expired() -> int:
    """Delete expired records and observations past retention; bump affected caches."""
    now = timezone.now()
    expired = MemoryRecord.unscoped.expired(now)
    scopes = set(expired.values_list("org_id", "domain_id").distinct())
    # The erasures' delete: versions, the admin log, and facts whose every source
    # expired go with them (no fact outlives its sources).
    deleted, orphans = delete_records(expired)
    deleted += sum(orphans.values())
    for org_id, domain_id in scopes:
        bump_generation(Scope(org_id, domain_id))
    idempotency.purge_expired(now)
    retention = timedelta(days=memoryhub_settings.OBSERVATION_RETENTION_DAYS)
    Observation.unscoped.filter(created_at__lt=now - retention).delete()
    return deleted
