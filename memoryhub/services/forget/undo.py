"""Undoing an import: the records it wrote erased, in the background."""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial

from django.db import transaction
from django.utils import timezone

from ... import policy
from ...conf import memoryhub_settings
from ...models import (
    ImportChunk,
    ImportJob,
)
from ...scope import Scope
from .. import imports
from ..dispatch import send
from .erasure import forget
from .request import ForgetRequest

logger = logging.getLogger(__name__)


def undoing_for_sweep(older_than: timedelta | None = None) -> list[int]:
    """Undos whose message never arrived."""
    if older_than is None:
        older_than = timedelta(seconds=memoryhub_settings.SWEEP_PENDING_AFTER)
    cutoff = timezone.now() - older_than
    return list(
        ImportJob.unscoped.filter(
            status=ImportJob.Status.UNDOING, updated_at__lte=cutoff
        ).values_list("pk", flat=True)[:100]
    )


def undo_job(scope: Scope, job_id: int, *, principal: policy.Principal) -> ImportJob:
    """Queue the erasure of the records this job created (done by a worker: it can be a
    million records). A running job is cancelled first by the caller."""
    with transaction.atomic():
        job = imports.get_job(scope, job_id, lock=True)
        if job.status not in (
            ImportJob.Status.DONE,
            ImportJob.Status.FAILED,
            ImportJob.Status.CANCELLED,
        ):
            raise imports.JobStateError(f"the import is {job.get_status_display().lower()}.")
        ImportJob.unscoped.filter(pk=job.pk).update(
            status=ImportJob.Status.UNDOING, updated_at=timezone.now()
        )
        ImportChunk.objects.filter(job=job).delete()
        transaction.on_commit(partial(enqueue_undo, job.pk, principal=principal))
    return imports.get_job(scope, job_id)


def enqueue_undo(job_id: int, *, principal: policy.Principal) -> None:
    """Send the undo to a worker, which acts for ``principal``
    (:func:`memoryhub.policy.principal_for_task`)."""
    send(
        "undo_import",
        job_id,
        policy.actor_label(principal),
        what=f"undo of import {job_id}",
        left="left undoing",
    )


def finish_undo(job_id: int, *, principal: policy.Principal) -> ImportJob | None:
    """Erase the job's records (the worker's side of :func:`undo_job`), with a receipt."""
    job = ImportJob.unscoped.filter(pk=job_id).first()
    if job is None or job.status != ImportJob.Status.UNDOING:
        return job
    scope = Scope(job.org_id, job.domain_id)
    with transaction.atomic():
        result = forget(scope, ForgetRequest(import_job=job.pk), principal=principal)
        now = timezone.now()
        ImportJob.unscoped.filter(pk=job.pk).update(
            status=ImportJob.Status.UNDONE,
            receipt=result.receipt or "",
            finished_at=now,
            updated_at=now,
        )
    return ImportJob.unscoped.get(pk=job_id)
