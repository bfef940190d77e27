"""Celery tasks: thin wrappers over the services, which hold every rule (what to retry,
what the sweeper re-sends). Arguments are ids. Services send these by name
(``services.dispatch.send``) and never import this module."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError

from . import policy
from .conf import memoryhub_settings
from .consolidation import ExtractorUnavailable
from .embedders import EmbedderError
from .services import consolidation, forget, imports, indexing, maintenance, vector_indexes
from .services.archives import jobs as archive_jobs

RETRY_BACKOFF_MAX = 600

logger = logging.getLogger(__name__)


#: Errors of a database that went away or cancelled the work (a restart, a failover, a
#: deadlock with a shard move): the task is retried with backoff; past the retries, the
#: sweeper sends its records again.
DATABASE_GONE = (OperationalError, InterfaceError)
#: Retries of a task whose database went away: with backoff capped at a minute, about
#: ten minutes.
DATABASE_RETRIES = 12


@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
    autoretry_for=DATABASE_GONE,
    retry_backoff=1,
    retry_backoff_max=60,
    retry_jitter=True,
    retry_kwargs={"max_retries": DATABASE_RETRIES},
)
def index_records(
    self: Any, record_ids: list[str], force: bool = False, org_id: int | None = None
) -> dict[str, int]:
    """Embed and index a batch of records; retried with exponential backoff on errors
    of the embedder and of the database. ``force`` embeds records already indexed with
    the configured model again; ``org_id`` is their org, when one org's."""
    try:
        result = indexing.index_records(record_ids, force=force, org_id=org_id)
    except EmbedderError as exc:
        if self.request.retries + 1 >= memoryhub_settings.INDEX_MAX_ATTEMPTS:
            # The service has marked the records failed and recorded why.
            return {"indexed": 0, "skipped": 0, "failed": len(record_ids)}
        countdown = min(2**self.request.retries, RETRY_BACKOFF_MAX)
        raise self.retry(exc=exc, countdown=countdown) from exc
    # Turns waiting to be consolidated can go now that they are embedded.
    consolidation.schedule_for(result.indexed, org_id)
    return {
        "indexed": len(result.indexed),
        "skipped": len(result.skipped),
        "failed": len(result.failed),
    }


@shared_task(acks_late=True)
def sweep() -> dict[str, int]:
    """Re-send what a worker may have lost, purge expired memory
    (``services.maintenance.sweep`` decides what)."""
    return maintenance.sweep()


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=8)
def consolidate_namespace(self: Any, knowledge_base_id: int, namespace: str) -> dict[str, Any]:
    """Consolidate a namespace's waiting turns (one run per namespace at a time; a
    redelivered message finds them done, or the namespace locked). An extractor that
    cannot be reached is retried later, after the delay it asked for if it asked."""
    try:
        counts = consolidation.consolidate(knowledge_base_id, namespace)
    except ExtractorUnavailable as exc:
        countdown = exc.retry_after or min(2**self.request.retries * 5, RETRY_BACKOFF_MAX)
        raise self.retry(exc=exc, countdown=countdown) from exc
    return {"ran": counts is not None, **(counts or {})}


@shared_task(acks_late=True)
def tenant_indexes() -> dict[str, Any]:
    """Build the HNSW indexes of domains that grew large, again over what was stored in
    bulk since; drop those of shrunk ones (``services.vector_indexes`` decides)."""
    changes = vector_indexes.ensure_tenant_indexes()
    return {
        "created": changes.created,
        "dropped": changes.dropped,
        "rebuilt": changes.rebuilt,
        "folded": changes.folded,
        "words": changes.words,
        "keyword_indexes": {"created": changes.keyword_created, "dropped": changes.keyword_dropped},
        "filter_indexes": {
            "keys_indexed": changes.filter_keys_indexed,
            "dropped": changes.filter_indexes_dropped,
        },
        "busy": changes.busy,
    }


@shared_task(acks_late=True)
def vacuum_erased() -> list[str]:
    """Vacuum and analyse the tables erasures touch (dead tuples, planner samples)."""
    return forget.vacuum_erased_tables()


@shared_task(acks_late=True, reject_on_worker_lost=True)
def import_file(job_id: int) -> str:
    """Run an operator's import job: validate every line, then write in batches."""
    job = imports.run_job(job_id)
    return job.status if job is not None else "missing"


@shared_task(acks_late=True, reject_on_worker_lost=True)
def archive_job(job_id: str) -> str:
    """Run an org's export or an archive's import that an operator queued."""
    job = archive_jobs.run_job(job_id)
    return job.status if job is not None else "missing"


@shared_task(acks_late=True, reject_on_worker_lost=True)
def undo_import(job_id: int, actor: str = "") -> str:
    """Erase the records an import created (with an erasure receipt), for whoever asked
    (``actor``: their :func:`~memoryhub.policy.actor_label`)."""
    job = forget.finish_undo(job_id, principal=policy.principal_for_task(actor))
    return job.status if job is not None else "missing"


@shared_task(acks_late=True, reject_on_worker_lost=True)
def delete_knowledge_base(knowledge_base_id: int, actor: str = "") -> int:
    """Erase a knowledge base an operator deleted (with a receipt), then delete it, for
    that operator (``actor``: their :func:`~memoryhub.policy.actor_label`)."""
    result = forget.delete_knowledge_base(
        knowledge_base_id, principal=policy.principal_for_task(actor)
    )
    return result.deleted if result is not None else 0
