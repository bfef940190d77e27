"""Importing files into a knowledge base: JSON Lines, CSV and Markdown.

Parsing validates every item first; a bad row is reported with its line number and
nothing is written. The import itself runs in one transaction, so a failure half-way
leaves nothing half-imported. Markdown is split into chunks by headings, then by size
with overlap; each chunk keeps its heading, position and starting line as metadata.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from django.core.cache import caches
from django.db import transaction
from django.utils import timezone

from ..conf import memoryhub_settings
from ..models import ImportJob, KnowledgeBase
from ..scope import Scope
from . import write
from .errors import ValidationFailed

__all__ = [
    "CHUNK_OVERLAP",
    "CHUNK_SIZE",
    "INLINE_LIMIT",
    "ImportFailed",
    "chunk_markdown",
    "create_job",
    "parse",
    "progress",
    "run_job",
]

CHUNK_SIZE = 1200
CHUNK_OVERLAP = 200
#: Imports up to this many items run inside the request; larger ones go to a worker.
INLINE_LIMIT = 200
ITEM_KEYS = ("content", "key", "kind", "namespace", "tags", "metadata", "expires_at", "ttl_seconds")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


class ImportFailed(ValidationFailed):
    """A file could not be imported; ``errors`` maps ``line N`` to messages."""

    code = "import_failed"


@dataclass(frozen=True)
class Row:
    line: int
    item: dict[str, Any]


def _rows_jsonl(text: str) -> Iterator[Row]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ImportFailed({f"line {number}": [f"is not JSON: {exc.msg}."]}) from None
        if not isinstance(value, dict):
            raise ImportFailed({f"line {number}": ["must be a JSON object."]})
        yield Row(number, value)


def _rows_csv(text: str) -> Iterator[Row]:
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or "content" not in reader.fieldnames:
        raise ImportFailed({"line 1": ["the header must include a content column."]})
    for row in reader:
        item: dict[str, Any] = {"content": row.get("content") or ""}
        metadata: dict[str, Any] = {}
        for column, value in row.items():
            if column in (None, "content") or value in (None, ""):
                continue
            if column in ("key", "kind", "namespace", "expires_at"):
                item[column] = value
            elif column == "tags":
                item["tags"] = [tag.strip() for tag in value.split(",") if tag.strip()]
            elif column == "ttl_seconds":
                item["ttl_seconds"] = int(value) if value.isdigit() else value
            else:
                metadata[column] = value
        if metadata:
            item["metadata"] = metadata
        yield Row(reader.line_num, item)


def chunk_markdown(
    text: str, *, filename: str = "", size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP
) -> list[Row]:
    """Split Markdown by headings, then long sections by size with ``overlap``."""
    sections: list[tuple[int, str, list[str]]] = []
    heading, start, lines = "", 1, list[str]()
    for number, line in enumerate(text.splitlines(), start=1):
        match = _HEADING.match(line)
        if match:
            if any(part.strip() for part in lines):
                sections.append((start, heading, lines))
            heading, start, lines = match.group(2), number, []
        else:
            lines.append(line)
    if any(part.strip() for part in lines):
        sections.append((start, heading, lines))
    rows: list[Row] = []
    for start, heading, body_lines in sections:
        body = "\n".join(body_lines).strip()
        pieces = [body]
        if len(body) > size:
            step = max(1, size - overlap)
            pieces = [
                body[i : i + size] for i in range(0, len(body), step) if body[i : i + size].strip()
            ]
            if len(pieces) > 1 and len(pieces[-1]) <= overlap:
                pieces.pop()
        for index, piece in enumerate(pieces):
            metadata = {"heading": heading, "chunk": index, "line": start}
            if filename:
                metadata["file"] = filename
            content = f"{heading}\n\n{piece}" if heading else piece
            rows.append(Row(start, {"content": content, "metadata": metadata}))
    return rows


def parse(text: str, format: str, *, filename: str = "", namespace: str = "") -> list[Row]:
    """Parse and validate a whole file; :class:`ImportFailed` names the first bad lines."""
    if "\x00" in text:
        raise ImportFailed({"file": ["contains NUL characters; is it a text file?"]})
    if format == ImportJob.Format.JSONL:
        rows = list(_rows_jsonl(text))
    elif format == ImportJob.Format.CSV:
        rows = list(_rows_csv(text))
    elif format == ImportJob.Format.MARKDOWN:
        rows = chunk_markdown(text, filename=filename)
    else:
        raise ImportFailed({"format": [f"unknown format {format!r}."]})
    if not rows:
        raise ImportFailed({"file": ["has nothing to import."]})
    errors: dict[str, list[str]] = {}
    for row in rows:
        if namespace and "namespace" not in row.item:
            row.item["namespace"] = namespace
        try:
            write.validate_items([row.item])
        except ValidationFailed as exc:
            for path, messages in exc.errors.items():
                field = path.removeprefix("items[0]").lstrip(".") or "item"
                errors.setdefault(f"line {row.line}", []).extend(f"{field}: {m}" for m in messages)
        if len(errors) >= 20:
            break
    if errors:
        raise ImportFailed(errors)
    return rows


def _progress_key(job_id: int) -> str:
    return f"memoryhub:import:{job_id}"


def progress(job: ImportJob) -> dict[str, Any]:
    """What the KB page shows: status, items done and total."""
    cached = caches[memoryhub_settings.CACHE_ALIAS].get(_progress_key(job.pk))
    finished = job.status in (ImportJob.Status.DONE, ImportJob.Status.FAILED)
    done = job.imported if cached is None or finished else cached
    running = not finished and cached is not None
    return {
        "id": job.pk,
        "status": ImportJob.Status.RUNNING if running else job.status,
        "done": done,
        "total": job.total,
        "errors": job.errors,
    }


def create_job(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    *,
    text: str,
    format: str,
    filename: str,
    namespace: str = "",
    actor: str = "",
) -> ImportJob:
    """Validate the file and record the job; the caller runs it inline or enqueues it."""
    rows = parse(text, format, filename=filename, namespace=namespace)
    return ImportJob.unscoped.create(
        org_id=scope.org_id,
        domain_id=scope.domain_id,
        knowledge_base=knowledge_base,
        filename=filename[:255],
        format=format,
        namespace=namespace,
        text=text,
        total=len(rows),
        actor=actor,
    )


def schedule_job(job: ImportJob) -> None:
    """Run ``job`` on a worker once the transaction commits.

    A broker that cannot be reached does not fail the operator's request: the job stays
    ``queued`` and the sweeper enqueues it again (:func:`queued_for_sweep`). Should it
    then run twice, the write service's deduplication makes the second run a no-op.
    """
    transaction.on_commit(partial(enqueue_job, job.pk))


def enqueue_job(job_id: int) -> None:
    from ..tasks import enqueue, import_file

    enqueue(import_file, job_id, what=f"import job {job_id}", left="left queued")


def queued_for_sweep(older_than: timedelta | None = None) -> list[int]:
    """Jobs still ``queued`` after ``SWEEP_PENDING_AFTER``: their message never arrived."""
    if older_than is None:
        older_than = timedelta(seconds=memoryhub_settings.SWEEP_PENDING_AFTER)
    cutoff = timezone.now() - older_than
    return list(
        ImportJob.unscoped.filter(
            status=ImportJob.Status.QUEUED, created_at__lte=cutoff
        ).values_list("pk", flat=True)[:100]
    )


def run_job(job_id: int) -> ImportJob | None:
    """Import a job's file in one transaction; on any error nothing of it remains.

    The job's row stays locked while it runs, so a second message for it (the sweeper
    re-sends jobs that wait long) finds it taken and returns at once: a job never runs
    twice at once. A worker that dies mid-run releases the lock with its transaction, and the
    redelivered message runs the job again from the start.
    """
    failure: Exception | None = None
    with transaction.atomic():
        job = (
            ImportJob.unscoped.select_for_update(skip_locked=True, of=("self",))
            .select_related("knowledge_base")
            .filter(pk=job_id)
            .first()
        )
        if job is None:  # no such job, or another worker is running it right now
            return ImportJob.unscoped.filter(pk=job_id).first()
        if job.status in (ImportJob.Status.DONE, ImportJob.Status.FAILED):
            return job
        scope = Scope(job.org_id, job.domain_id)
        cache = caches[memoryhub_settings.CACHE_ALIAS]
        batch = memoryhub_settings.MAX_WRITE_ITEMS
        # The row's status changes with the import's commit; meanwhile the progress in
        # the cache tells the admin the job is running (progress()).
        cache.set(_progress_key(job.pk), 0, timeout=3600)
        try:
            rows = parse(job.text, job.format, filename=job.filename, namespace=job.namespace)
            with transaction.atomic():  # a savepoint: on error none of the file remains
                for start in range(0, len(rows), batch):
                    write.write(
                        scope,
                        [row.item for row in rows[start : start + batch]],
                        sources=[job.knowledge_base.name],
                        actor=job.actor,
                        operator=True,
                    )
                    progress = min(start + batch, len(rows))
                    cache.set(_progress_key(job.pk), progress, timeout=3600)
        except ValidationFailed as exc:
            _finish(job, ImportJob.Status.FAILED, 0, exc.errors)
        except Exception as exc:
            _finish(job, ImportJob.Status.FAILED, 0, {"file": [f"{type(exc).__name__}: {exc}"]})
            failure = exc  # raised once the failure is committed
        else:
            _finish(job, ImportJob.Status.DONE, len(rows), {})
    if failure is not None:
        raise failure
    job.refresh_from_db()
    return job


def _finish(job: ImportJob, status: str, imported: int, errors: dict[str, Any]) -> None:
    ImportJob.unscoped.filter(pk=job.pk).update(
        status=status, imported=imported, errors=errors, text="", finished_at=timezone.now()
    )
    caches[memoryhub_settings.CACHE_ALIAS].delete(_progress_key(job.pk))
