"""Import jobs: the file stored in chunks by the request, then validated and written in
batches by a worker, with live progress, cancel, re-run and the outcome an operator
reads."""

from __future__ import annotations

import codecs
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import IO, Any

from django.db import DatabaseError, connection, transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from ... import observe, policy
from ...conf import memoryhub_settings
from ...exceptions import ValidationFailed
from ...models import ImportChunk, ImportJob, KnowledgeBase, MemoryRecord, Observation
from ...scope import Scope
from .. import write
from ..dispatch import send
from .formats import MAX_ERRORS, ImportFailed, Row, check_row, iter_rows

logger = logging.getLogger("memoryhub.imports")


#: Bytes of file text per stored chunk (cut at a line end).
STORED_CHUNK_BYTES = 1024 * 1024


#: Items written (and committed with the job's progress) per batch.
BATCH_ITEMS = 500


#: Namespaces remembered per job (for erasures to know what it writes); past it: unknown.
MAX_NAMESPACES = 1000


#: Files up to this size are scanned line by line when an erasure asks whether an
#: unvalidated job writes a subject's data; larger ones are cancelled to be safe.
SCAN_LIMIT = 1024 * 1024


class JobStateError(ValidationFailed):
    """The job is not in a state that allows this (cancel a finished job, undo a running
    one, ...)."""

    code = "import_state"

    def __init__(self, message: str) -> None:
        super().__init__({"status": [message]})


def _store(job: ImportJob, pieces: Iterable[bytes]) -> int:
    """Decode ``pieces`` as UTF-8 and store the text in chunks of whole lines.

    Returns the byte count. :class:`ImportFailed` for text that is not UTF-8 or holds
    NULs (nothing is stored then: the caller's transaction rolls back).
    """
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    buffer, size, seq, seen_text = "", 0, 0, False
    chunks: list[ImportChunk] = []

    def flush(text: str) -> None:
        nonlocal seq
        chunks.append(ImportChunk(job=job, org_id=job.org_id, seq=seq, text=text))
        seq += 1
        if len(chunks) >= 8:
            ImportChunk.objects.bulk_create(chunks)
            chunks.clear()

    try:
        for piece in pieces:
            size += len(piece)
            buffer += decoder.decode(piece)
            while len(buffer) >= STORED_CHUNK_BYTES:
                # Whole lines: up to the last line end within the limit (or the first
                # after it, for a longer line).
                cut = buffer.rfind("\n", 0, STORED_CHUNK_BYTES) + 1 or buffer.find("\n") + 1
                if not cut:
                    break  # one long line so far: wait for its end
                head, buffer = buffer[:cut], buffer[cut:]
                _check_text(head)
                seen_text = seen_text or bool(head.strip())
                flush(head)
        buffer += decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise ImportFailed({"file": ["is not UTF-8 text."]}) from None
    if buffer:
        _check_text(buffer)
        seen_text = seen_text or bool(buffer.strip())
        flush(buffer)
    if not seen_text:
        raise ImportFailed({"file": ["has nothing to import."]})
    ImportChunk.objects.bulk_create(chunks)
    return size


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise ImportFailed({"file": ["contains NUL characters; is it a text file?"]})


def job_lines(job: ImportJob) -> Iterator[str]:
    """The job's file, line by line, reading one stored chunk at a time."""
    seq = -1
    while True:
        chunk = (
            ImportChunk.objects.filter(job=job, seq__gt=seq)
            .order_by("seq")
            .values_list("seq", "text")
            .first()
        )
        if chunk is None:
            return
        seq, text = chunk
        yield from text.splitlines(keepends=True)


def create_job(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    *,
    format: str,
    filename: str,
    text: str | None = None,
    file: IO[bytes] | None = None,
    namespace: str = "",
    principal: policy.Principal = policy.AGENT,
) -> ImportJob:
    """Store the file (``file``, streamed, or ``text``) and queue the job, which a worker
    runs for ``principal`` (:func:`memoryhub.policy.principal_for_task`: the job keeps
    its :func:`~memoryhub.policy.actor_label`).

    Only what can be told without reading the items is checked here (format, UTF-8, NULs,
    emptiness); the worker validates the lines. :class:`ImportFailed` stores nothing.
    """
    if format not in ImportJob.Format.values:
        raise ImportFailed({"format": [f"unknown format {format!r}."]})
    if "\x00" in namespace or "\x00" in filename:
        raise ImportFailed({"namespace": ["must not contain NUL characters."]})
    if file is not None:
        pieces: Iterable[bytes] = iter(partial(file.read, 64 * 1024), b"")
    else:
        pieces = [(text or "").encode("utf-8")]
    with transaction.atomic():
        job = ImportJob.unscoped.create(
            org_id=scope.org_id,
            domain_id=scope.domain_id,
            knowledge_base=knowledge_base,
            filename=filename[:255],
            format=format,
            namespace=namespace,
            actor=policy.actor_label(principal),
        )
        job.size = _store(job, pieces)
        job.save(update_fields=["size"])
        schedule_job(job)
    return job


def schedule_job(job: ImportJob) -> None:
    """Run ``job`` on a worker once the transaction commits.

    A broker that cannot be reached does not fail the operator's request: the job stays
    ``queued`` and the sweeper enqueues it again (:func:`queued_for_sweep`).
    """
    transaction.on_commit(partial(enqueue_job, job.pk))


def enqueue_job(job_id: int) -> None:
    send("import_file", job_id, what=f"import job {job_id}", left="left queued")


def queued_for_sweep(older_than: timedelta | None = None) -> list[int]:
    """Jobs whose message never arrived or whose worker stopped moving them on
    (``queued``/``running`` untouched for ``SWEEP_PENDING_AFTER``)."""
    if older_than is None:
        older_than = timedelta(seconds=memoryhub_settings.SWEEP_PENDING_AFTER)
    cutoff = timezone.now() - older_than
    waiting = Q(status=ImportJob.Status.QUEUED, created_at__lte=cutoff)
    stalled = Q(status=ImportJob.Status.RUNNING, updated_at__lte=cutoff)
    return list(ImportJob.unscoped.filter(waiting | stalled).values_list("pk", flat=True)[:100])


def _claim(job_id: int) -> bool:
    """Whether this process now runs the job (a session lock, released at the end or
    when the worker's connection dies): a job never runs twice at once."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtext('memoryhub.import'), %s)", [job_id])
        return bool(cursor.fetchone()[0])


def _release(job_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(hashtext('memoryhub.import'), %s)", [job_id])


def _touch(job_id: int, **fields: Any) -> None:
    ImportJob.unscoped.filter(pk=job_id).update(updated_at=timezone.now(), **fields)


def run_job(job_id: int) -> ImportJob | None:
    """Validate, then write, a job's file (the worker's side; see the module's doc)."""
    if not _claim(job_id):  # another worker runs it right now
        return ImportJob.unscoped.filter(pk=job_id).first()
    try:
        job = ImportJob.unscoped.select_related("knowledge_base").filter(pk=job_id).first()
        if job is None or job.status not in (ImportJob.Status.QUEUED, ImportJob.Status.RUNNING):
            return job
        if job.status == ImportJob.Status.QUEUED:
            now = timezone.now()
            updated = ImportJob.unscoped.filter(pk=job_id, status=ImportJob.Status.QUEUED).update(
                status=ImportJob.Status.RUNNING, started_at=now, updated_at=now
            )
            if not updated:  # cancelled (or erased) meanwhile
                return ImportJob.unscoped.get(pk=job_id)
            job.status = ImportJob.Status.RUNNING
        try:
            if not job.validated and not _validate(job):
                return ImportJob.unscoped.get(pk=job_id)
            _write(job)
        except Exception as exc:
            _finish(job_id, ImportJob.Status.FAILED, {"file": [f"{type(exc).__name__}: {exc}"]})
            raise
        return ImportJob.unscoped.get(pk=job_id)
    finally:
        _release(job_id)


def _validate(job: ImportJob) -> bool:
    """Check every line; record the total and namespaces. False: the job failed."""
    errors: dict[str, list[str]] = {}
    namespaces: set[str] | None = set()
    total = 0
    try:
        for row in iter_rows(
            job_lines(job), job.format, filename=job.filename, namespace=job.namespace
        ):
            total += 1
            problems = check_row(row)
            if problems:
                errors.setdefault(f"line {row.line}", []).extend(problems)
                if len(errors) >= MAX_ERRORS:
                    break
            if namespaces is not None:
                namespaces.add(str(row.item.get("namespace") or ""))
                if len(namespaces) > MAX_NAMESPACES:
                    namespaces = None
            if total % BATCH_ITEMS == 0:
                if _stopped(job.pk):
                    return False
                _touch(job.pk, parsed=total)
    except ImportFailed as exc:
        errors.update(exc.errors)
    if not total and not errors:
        errors = {"file": ["has nothing to import."]}
    if errors:
        _finish(job.pk, ImportJob.Status.FAILED, errors, drop_file=True)
        return False
    # Only while it runs: an erasure may have cancelled it and scrubbed its namespaces.
    validated = ImportJob.unscoped.filter(pk=job.pk, status=ImportJob.Status.RUNNING).update(
        parsed=total,
        total=total,
        validated=True,
        namespaces=sorted(namespaces) if namespaces is not None else None,
        updated_at=timezone.now(),
    )
    job.total, job.validated = total, True
    return bool(validated)


def _stopped(job_id: int) -> bool:
    return not ImportJob.unscoped.filter(pk=job_id, status=ImportJob.Status.RUNNING).exists()


@dataclass
class _Run:
    """What one run of a job wrote, for its summary observations (:func:`observe_run`)."""

    created_before: int
    items: int = 0
    deduplicated: int = 0


def _created(job_id: int) -> int:
    return MemoryRecord.unscoped.filter(import_job=job_id).order_by().count()


def _write(job: ImportJob) -> None:
    """Write the items after ``job.imported`` in batches, each committed with progress."""
    done = ImportJob.unscoped.values_list("imported", flat=True).get(pk=job.pk)
    rows = iter_rows(job_lines(job), job.format, filename=job.filename, namespace=job.namespace)
    for _ in range(done):  # resuming: the committed batches' items
        next(rows, None)
    scope = Scope(job.org_id, job.domain_id)
    run = _Run(created_before=_created(job.pk))
    try:
        _write_rows(job, scope, rows, run)
    except Exception:
        try:
            observe_run(job, scope, run)
        except DatabaseError:  # the write's own error is the one to report
            logger.exception("import job %s: its summary observations were not recorded", job.pk)
        raise
    observe_run(job, scope, run)


def _write_rows(job: ImportJob, scope: Scope, rows: Iterator[Row], run: _Run) -> None:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row.item)
        if len(batch) >= BATCH_ITEMS:
            if not _write_batch(job, scope, batch, run):
                return
            batch = []
    if batch and not _write_batch(job, scope, batch, run):
        return
    _finish(job.pk, ImportJob.Status.DONE, {}, drop_file=True)


def observe_run(job: ImportJob, scope: Scope, run: _Run) -> None:
    """One ``memory.written`` and one ``memory.deduplicated`` observation for what a run
    of the job wrote, instead of one of each per write of a batch (which buried the
    timeline under an import's rows). Their payloads name the job."""
    if not run.items:
        return
    created = max(0, _created(job.pk) - run.created_before)  # an erasure may take some
    updated = max(0, run.items - created - run.deduplicated)
    source = job.knowledge_base.name
    if created or updated:
        observe.record_in_scope(
            Observation.Kind.MEMORY_WRITTEN,
            scope,
            source=source,
            count=created + updated,
            payload={
                "source": source,
                "n": created + updated,
                "created": created,
                "updated": updated,
                "operator": True,
                "import_job": job.pk,
            },
            actor=job.actor,
        )
    if run.deduplicated:
        observe.record_in_scope(
            Observation.Kind.MEMORY_DEDUPLICATED,
            scope,
            source=source,
            count=run.deduplicated,
            payload={"source": source, "n": run.deduplicated, "import_job": job.pk},
            actor=job.actor,
        )


#: How long after a job's end its last run's summary observations may be recorded.
OUTCOME_MARGIN = timedelta(minutes=5)


def outcome(job: ImportJob) -> dict[str, int] | None:
    """What a finished job's items became, from its runs' summary observations: new
    records, records updated by key, duplicates skipped (None: no summary yet)."""
    # Each run records its summary as it ends: within the job's life, plus a margin.
    until = (job.finished_at or timezone.now()) + OUTCOME_MARGIN
    rows = Observation.unscoped.filter(
        org_id=job.org_id,
        kind__in=(Observation.Kind.MEMORY_WRITTEN, Observation.Kind.MEMORY_DEDUPLICATED),
        created_at__gte=job.created_at,
        created_at__lte=until,
        payload__import_job=job.pk,
    ).values_list("kind", "payload")
    found = {"created": 0, "updated": 0, "deduplicated": 0}
    seen = False
    for kind, payload in rows:
        seen = True
        if kind == Observation.Kind.MEMORY_WRITTEN:
            found["created"] += int(payload.get("created") or 0)
            found["updated"] += int(payload.get("updated") or 0)
        else:
            found["deduplicated"] += int(payload.get("n") or 0)
    return found if seen else None


def _write_batch(
    job: ImportJob, scope: Scope, items: list[dict[str, Any]], run: _Run | None = None
) -> bool:
    """One batch and the job's progress, in one transaction; False: the job was stopped
    (cancelled, or an erasure removed what it imports)."""
    with transaction.atomic():
        # The job's row first, as erasures take it: an erasure waits for this batch, or
        # this batch waits for the erasure and then finds the job stopped.
        status = (
            ImportJob.unscoped.select_for_update()
            .filter(pk=job.pk, org_id=job.org_id)
            .values_list("status", flat=True)
            .first()
        )
        if status != ImportJob.Status.RUNNING:
            return False
        step = memoryhub_settings.MAX_WRITE_ITEMS
        deduplicated = 0
        for start in range(0, len(items), step):
            result = write.write(
                scope,
                items[start : start + step],
                sources=[job.knowledge_base.name],
                principal=policy.principal_for_task(job.actor),
                import_job=job.pk,
            )
            deduplicated += sum(1 for record in result.records if record.deduplicated)
        ImportJob.unscoped.filter(pk=job.pk).update(
            imported=F("imported") + len(items), updated_at=timezone.now()
        )
    if run is not None:
        run.items += len(items)
        run.deduplicated += deduplicated
    return True


def _finish(job_id: int, status: str, errors: dict[str, Any], *, drop_file: bool = False) -> None:
    """End a queued or running job (one an erasure or a cancel ended stays as they left it)."""
    now = timezone.now()
    ImportJob.unscoped.filter(
        pk=job_id, status__in=(ImportJob.Status.QUEUED, ImportJob.Status.RUNNING)
    ).update(status=status, errors=errors, finished_at=now, updated_at=now)
    if drop_file:
        ImportChunk.objects.filter(job_id=job_id).delete()


def get_job(scope: Scope, job_id: Any, *, lock: bool = False) -> ImportJob:
    """The scope's import job ``job_id`` (``ImportJob.DoesNotExist`` otherwise), locked
    when ``lock``."""
    jobs = ImportJob.unscoped.filter(org_id=scope.org_id, domain_id=scope.domain_id)
    if lock:
        jobs = jobs.select_for_update(of=("self",))
    job = jobs.select_related("knowledge_base").filter(pk=job_id).first()
    if job is None:
        raise ImportJob.DoesNotExist(job_id)
    return job


def cancel_job(
    scope: Scope, job_id: int, *, principal: policy.Principal = policy.AGENT
) -> ImportJob:
    """Stop a queued or running job; what it wrote so far stays (undo erases it)."""
    with transaction.atomic():
        job = get_job(scope, job_id, lock=True)  # waits for a batch in flight
        if job.status not in (ImportJob.Status.QUEUED, ImportJob.Status.RUNNING):
            raise JobStateError(f"the import is {job.get_status_display().lower()}.")
        actor = policy.actor_label(principal)
        message = f"cancelled by {actor}" if actor else "cancelled"
        _finish(job.pk, ImportJob.Status.CANCELLED, {"file": [message]}, drop_file=True)
    return get_job(scope, job_id)


def rerun_job(scope: Scope, job_id: int) -> ImportJob:
    """Queue a failed job again; it resumes after the last batch it committed."""
    with transaction.atomic():
        job = get_job(scope, job_id, lock=True)
        if job.status != ImportJob.Status.FAILED or not job.chunks.exists():
            raise JobStateError("only a failed import whose file is kept can run again.")
        ImportJob.unscoped.filter(pk=job.pk).update(
            status=ImportJob.Status.QUEUED, errors={}, finished_at=None, updated_at=timezone.now()
        )
        schedule_job(job)
    return get_job(scope, job_id)


def may_write(job: ImportJob, *, namespace: str | None, key: str | None) -> bool:
    """Whether an unfinished job may write a record in ``namespace`` (and/or with
    ``key``). When it cannot be told cheaply, yes (an erasure cancels it to be safe)."""
    if namespace is None and key is None:
        return True
    if key is None and job.namespace == namespace:
        return True
    if key is None and job.namespaces is not None:
        return namespace in job.namespaces
    if job.size > SCAN_LIMIT:
        return True
    try:
        rows = iter_rows(job_lines(job), job.format, filename=job.filename, namespace=job.namespace)
        return any(
            (namespace is None or row.item.get("namespace", "") == namespace)
            and (key is None or row.item.get("key") == key)
            for row in rows
        )
    except ImportFailed:
        return False  # it would fail and import nothing


def progress(job: ImportJob) -> dict[str, Any]:
    """What the KB page shows and polls: status, lines validated, items written, and how
    many of the records the job created are indexed; what may be done with it now."""
    counts = MemoryRecord.unscoped.filter(import_job=job).aggregate(
        created=Count("pk"), indexed=Count("pk", filter=Q(status=MemoryRecord.Status.INDEXED))
    )
    status = job.status
    finished = status in (
        ImportJob.Status.DONE,
        ImportJob.Status.FAILED,
        ImportJob.Status.CANCELLED,
    )
    return {
        "outcome": outcome(job) if finished and job.imported else None,
        "id": job.pk,
        "status": status,
        "status_label": job.get_status_display(),
        "filename": job.filename,
        "parsed": job.parsed,
        "total": job.total if job.validated else None,
        "imported": job.imported,
        "created": counts["created"],
        "indexed": counts["indexed"],
        "errors": job.errors,
        "actor": job.actor,
        "receipt": job.receipt or None,
        "finished": status in ImportJob.FINISHED,
        "can_cancel": status in (ImportJob.Status.QUEUED, ImportJob.Status.RUNNING),
        "can_undo": status
        in (ImportJob.Status.DONE, ImportJob.Status.FAILED, ImportJob.Status.CANCELLED)
        and counts["created"] > 0,
        "can_rerun": status == ImportJob.Status.FAILED and job.chunks.exists(),
    }
