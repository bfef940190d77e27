"""Archive jobs (``ArchiveJob``): an org's export, or an archive's import, queued from
the admin and run by a worker (the ``archive_job`` task) with its progress on the row.

Files live in the site's default storage (``STORAGES["default"]``, shared by web and
workers) under :data:`DIRECTORY`. A worker copies an upload to a local temporary file to
read it (an import reads it three times), and writes an export locally before storing
it. An export's file is deleted after ``ARCHIVE_RETENTION`` and by any erasure in its
org (an archive made before an erasure still holds what was erased); an import's when
the import ends.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import IO, Any

from django.core.files import File
from django.core.files.storage import default_storage
from django.db import connection, transaction
from django.utils import timezone

from tenants.models import Domain, Org

from ... import policy
from ...conf import memoryhub_settings
from ...exceptions import PolicyDenied, ValidationFailed
from ...models import ArchiveJob, MemoryRecord
from ...policy import Action
from ..dispatch import send
from .exporting import erasure_count, export_archive
from .importing import import_archive

__all__ = [
    "DIRECTORY",
    "drop_expired",
    "drop_exports",
    "enqueue",
    "forgotten",
    "queued_for_sweep",
    "run_job",
    "start_export",
    "start_import",
]

logger = logging.getLogger(__name__)

#: Where archive files are kept in the default storage.
DIRECTORY = "memoryhub/archives"
#: How often a running job writes its progress (records).
PROGRESS_EVERY = 1000


def _require(principal: policy.Principal, action: Action, org: Org) -> None:
    if not policy.allows(principal, action, org_id=org.pk):
        raise PolicyDenied(action)


def start_export(
    org: Org,
    *,
    principal: policy.Principal,
    domain: Domain | None = None,
    vectors: bool = False,
) -> ArchiveJob:
    """Queue an export of ``org`` (or its ``domain``) for ``principal`` (the ``export``
    action in the org)."""
    _require(principal, Action.EXPORT, org)
    if domain is not None and domain.org_id != org.pk:
        raise ValidationFailed({"domain": ["This domain belongs to another org."]})
    records = MemoryRecord.unscoped.filter(org_id=org.pk)
    if domain is not None:
        records = records.filter(domain_id=domain.pk)
    job = ArchiveJob.unscoped.create(
        org=org,
        domain=domain,
        kind=ArchiveJob.Kind.EXPORT,
        vectors=vectors,
        total=records.count(),
        actor=policy.actor_label(principal),
    )
    transaction.on_commit(partial(enqueue, job.pk))
    return job


def start_import(
    upload: IO[bytes],
    filename: str,
    *,
    org: Org,
    principal: policy.Principal,
    dry_run: bool = False,
) -> ArchiveJob:
    """Store the archive ``upload`` (streamed) and queue its import into ``org`` for
    ``principal`` (the ``import`` action in the org)."""
    _require(principal, Action.IMPORT, org)
    suffix = ".jsonl.gz" if filename.endswith(".gz") else ".jsonl"
    name = default_storage.save(f"{DIRECTORY}/{uuid.uuid4()}{suffix}", File(upload))
    job = ArchiveJob.unscoped.create(
        org=org,
        kind=ArchiveJob.Kind.IMPORT,
        dry_run=dry_run,
        file=name,
        filename=filename[:255],
        actor=policy.actor_label(principal),
    )
    transaction.on_commit(partial(enqueue, job.pk))
    return job


def enqueue(job_id: Any) -> None:
    send("archive_job", str(job_id), what=f"archive job {job_id}", left="left queued")


def queued_for_sweep(older_than: timedelta = timedelta(minutes=5)) -> list[str]:
    """Jobs queued or running for longer than ``older_than``: their message lost, or
    their worker gone (a running one holds its lock: sent again, it does nothing)."""
    cutoff = timezone.now() - older_than
    return [
        str(pk)
        for pk in ArchiveJob.unscoped.filter(
            status__in=(ArchiveJob.Status.QUEUED, ArchiveJob.Status.RUNNING),
            created_at__lte=cutoff,
        ).values_list("pk", flat=True)[:100]
    ]


# --- the worker's side -----------------------------------------------------------------


@contextmanager
def _claimed(job_id: str) -> Iterator[bool]:
    """Whether this process runs the job (a session lock, released at the end or with the
    worker's connection): a job never runs twice at once."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_try_advisory_lock(hashtext('memoryhub.archive'), hashtext(%s))", [job_id]
        )
        claimed = bool(cursor.fetchone()[0])
    try:
        yield claimed
    finally:
        if claimed:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_unlock(hashtext('memoryhub.archive'), hashtext(%s))",
                    [job_id],
                )


def run_job(job_id: str) -> ArchiveJob | None:
    """Run a queued (or interrupted) job; its status, progress and report on the row."""
    with _claimed(job_id) as claimed:
        job = ArchiveJob.unscoped.select_related("org", "domain").filter(pk=job_id).first()
        if (
            not claimed
            or job is None
            or job.status in (ArchiveJob.Status.DONE, ArchiveJob.Status.FAILED)
        ):
            return job
        ArchiveJob.unscoped.filter(pk=job.pk).update(status=ArchiveJob.Status.RUNNING, done=0)
        try:
            report = _export(job) if job.kind == ArchiveJob.Kind.EXPORT else _import(job)
        except (ValidationFailed, PolicyDenied, OSError) as exc:
            _finish(job, ArchiveJob.Status.FAILED, error=_problem(exc))
        except Exception as exc:
            _finish(job, ArchiveJob.Status.FAILED, error=f"{type(exc).__name__}: {exc}")
            raise
        else:
            _finish(job, ArchiveJob.Status.DONE, report=report)
        return ArchiveJob.unscoped.get(pk=job.pk)


def _problem(exc: Exception) -> str:
    if isinstance(exc, ValidationFailed):
        return "; ".join(
            f"{name}: {' '.join(map(str, messages))}" for name, messages in exc.errors.items()
        )
    return str(exc)


def _progress(job: ArchiveJob) -> Any:
    def told(done: int) -> None:
        ArchiveJob.unscoped.filter(pk=job.pk).update(done=done)

    return told


def _export(job: ArchiveJob) -> dict[str, Any]:
    erasures = erasure_count(job.org_id)
    with tempfile.TemporaryDirectory(prefix="memoryhub-archive-") as scratch:
        slug = job.domain.slug if job.domain is not None else None
        local = Path(scratch) / f"{job.org.slug}{'-' + slug if slug else ''}.jsonl.gz"
        manifest = export_archive(
            job.org, local, domain=slug, vectors=job.vectors, progress=_progress(job)
        )
        with local.open("rb") as stream:
            name = default_storage.save(f"{DIRECTORY}/{job.pk}.jsonl.gz", File(stream))
    ArchiveJob.unscoped.filter(pk=job.pk).update(file=name, filename=local.name)
    if erasure_count(job.org_id) != erasures:
        # An erasure while the file was stored (drop_exports found no file yet).
        _drop_file(job)
        raise ValidationFailed({"archive": ["an erasure in the org ran meanwhile: export again."]})
    return {"counts": manifest["counts"], "sha256": manifest["sha256"]}


def _import(job: ArchiveJob) -> dict[str, Any]:
    principal = policy.principal_for_task(job.actor)
    try:
        with tempfile.TemporaryDirectory(prefix="memoryhub-archive-") as scratch:
            local = Path(scratch) / Path(job.file).name
            with default_storage.open(job.file, "rb") as source, local.open("wb") as copy:
                shutil.copyfileobj(source, copy, 1024 * 1024)
            report = import_archive(
                local,
                org=job.org.slug,
                dry_run=job.dry_run,
                principal=principal,
                progress=_progress(job),
            )
    finally:
        _drop_file(job)
    return report.as_json()


def _finish(
    job: ArchiveJob, status: str, *, report: dict[str, Any] | None = None, error: str = ""
) -> None:
    ArchiveJob.unscoped.filter(pk=job.pk).update(
        status=status, report=report or {}, error=error[:2000], finished_at=timezone.now()
    )


def _drop_file(job: ArchiveJob) -> None:
    if job.file:
        default_storage.delete(job.file)
        ArchiveJob.unscoped.filter(pk=job.pk).update(file="")


# --- what is kept ------------------------------------------------------------------------


def drop_exports(org_id: int) -> int:
    """Delete the org's exported files (an erasure happened: they may hold it)."""
    jobs = list(
        ArchiveJob.unscoped.filter(org_id=org_id, kind=ArchiveJob.Kind.EXPORT).exclude(file="")
    )
    for job in jobs:
        _drop_file(job)
    return len(jobs)


def forgotten(sender: Any = None, *, scope: Any, **kwargs: Any) -> None:
    """``memoryhub.signals.records_forgotten``: the org erased something, so its exports
    go."""
    dropped = drop_exports(scope.org_id)
    if dropped:
        logger.info("an erasure in org %s deleted %s exported archive(s)", scope.org_id, dropped)


def drop_expired() -> int:
    """Delete exported files older than ``ARCHIVE_RETENTION`` (the sweeper's)."""
    cutoff = timezone.now() - timedelta(seconds=memoryhub_settings.ARCHIVE_RETENTION)
    jobs = list(
        ArchiveJob.unscoped.filter(kind=ArchiveJob.Kind.EXPORT, finished_at__lte=cutoff).exclude(
            file=""
        )
    )
    for job in jobs:
        _drop_file(job)
    return len(jobs)
