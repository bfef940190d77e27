"""Importing files into a knowledge base: JSON Lines, CSV and Markdown, as jobs.

A job's life: the request stores the file (streamed into ~1 MB chunks of whole lines in
the database, checked for UTF-8 and NULs) and queues the job; nothing else happens in a
request, whatever the file's size. A worker then

1. validates every line (``parsed``; a bad line fails the job with its line number, and
   nothing is written), learning the total and the namespaces the file writes;
2. writes the items in batches; each batch commits together with the job's progress
   (``imported``), so progress is live, a cancel takes effect at the next batch, and a
   worker that dies resumes after the last committed batch;
3. ends ``done`` (or ``failed``, with what failed; a re-run resumes where it stopped) and
   drops the file.

Records the job creates carry its id (``MemoryRecord.import_job``): undoing the job erases
exactly those, through the erasure service (``forget.undo_job``), with a receipt. Memory
stays bounded at any file size: the worker holds one chunk and one batch at a time.

Markdown is split into chunks by headings, then by size with overlap; each chunk keeps
its heading, position and starting line as metadata.
"""

from __future__ import annotations

from .formats import (
    CHUNK_OVERLAP,
    CHUNK_SIZE,
    MAX_ERRORS,
    TEXT_COLUMNS,
    ImportFailed,
    Row,
    check_row,
    chunk_markdown,
    iter_rows,
    parse,
)
from .jobs import (
    BATCH_ITEMS,
    MAX_NAMESPACES,
    OUTCOME_MARGIN,
    SCAN_LIMIT,
    STORED_CHUNK_BYTES,
    JobStateError,
    cancel_job,
    create_job,
    enqueue_job,
    get_job,
    job_lines,
    logger,
    may_write,
    observe_run,
    outcome,
    progress,
    queued_for_sweep,
    rerun_job,
    run_job,
    schedule_job,
)

__all__ = [
    "BATCH_ITEMS",
    "CHUNK_OVERLAP",
    "CHUNK_SIZE",
    "MAX_ERRORS",
    "MAX_NAMESPACES",
    "OUTCOME_MARGIN",
    "SCAN_LIMIT",
    "STORED_CHUNK_BYTES",
    "TEXT_COLUMNS",
    "ImportFailed",
    "JobStateError",
    "Row",
    "cancel_job",
    "check_row",
    "chunk_markdown",
    "create_job",
    "enqueue_job",
    "get_job",
    "iter_rows",
    "job_lines",
    "logger",
    "may_write",
    "observe_run",
    "outcome",
    "parse",
    "progress",
    "queued_for_sweep",
    "rerun_job",
    "run_job",
    "schedule_job",
]
