"""Import jobs and the chunks of their files."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from .knowledge_bases import KnowledgeBase
from .tenancy import TenantForeignKey, TenantScopedModel, org_key


class ImportJob(TenantScopedModel):
    """A file imported into a knowledge base by an operator, run by a Celery task.

    The file is kept in :class:`ImportChunk` rows until the job ends. A worker validates
    every line first (``parsed``), then writes in batches that each commit with the job's
    progress (``imported``): progress is live, a cancel stops at the next batch, a worker
    that dies resumes where the last batch ended, and an undo erases exactly the records
    this job created (``MemoryRecord.import_job``).
    """

    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")
        UNDOING = "undoing", _("Being undone")
        UNDONE = "undone", _("Undone")

    class Format(models.TextChoices):
        JSONL = "jsonl", _("JSON Lines")
        CSV = "csv", _("CSV")
        MARKDOWN = "markdown", _("Markdown")

    knowledge_base = TenantForeignKey(
        KnowledgeBase,
        on_delete=models.CASCADE,
        related_name="import_jobs",
        verbose_name=_("knowledge base"),
        db_constraint=False,  # a key with org_id in it: distribution.TENANT_KEYS
    )
    filename = models.CharField(_("file name"), max_length=255)
    format = models.CharField(_("format"), max_length=8, choices=Format)
    namespace = models.CharField(_("namespace"), max_length=200, blank=True, default="")
    status = models.CharField(_("status"), max_length=16, choices=Status, default=Status.QUEUED)
    size = models.PositiveBigIntegerField(_("bytes"), default=0)
    #: Lines validated so far; ``total`` is known once they all are (``validated``).
    parsed = models.PositiveIntegerField(_("validated"), default=0)
    validated = models.BooleanField(_("validated"), default=False)
    total = models.PositiveIntegerField(_("items"), default=0)
    imported = models.PositiveIntegerField(_("imported"), default=0)
    #: The namespaces the file writes (from validation; null: not known yet, or too many).
    namespaces = models.JSONField(_("namespaces"), null=True, blank=True, editable=False)
    #: The erasure receipt of the job's undo.
    receipt = models.CharField(_("undo receipt"), max_length=36, blank=True, default="")
    errors = models.JSONField(_("errors"), default=dict, blank=True)
    actor = models.CharField(_("actor"), max_length=150, blank=True, default="")
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    #: When a worker last moved the job on (the sweeper re-sends jobs that stopped).
    updated_at = models.DateTimeField(_("updated"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    FINISHED = (Status.DONE, Status.FAILED, Status.CANCELLED, Status.UNDONE)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("import")
        verbose_name_plural = _("imports")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.filename} → {self.knowledge_base_id} ({self.status})"


class ImportChunk(models.Model):
    """A piece (about a megabyte, whole lines) of an import's file, in file order.

    The file lives in the database rather than on a disk the web server and the workers
    would have to share; a worker streams it chunk by chunk, so memory stays bounded
    whatever the file's size. Deleted when the job ends.
    """

    #: The job's org: the chunk's place in a cluster distributed by org.
    org = org_key(db_index=False)
    job = TenantForeignKey(
        ImportJob,
        on_delete=models.CASCADE,
        related_name="chunks",
        db_constraint=False,  # a key with org_id in it: distribution.TENANT_KEYS
    )
    seq = models.PositiveIntegerField()
    text = models.TextField()

    class Meta:
        verbose_name = _("import chunk")
        constraints = [
            models.UniqueConstraint(fields=["job", "seq", "org"], name="memoryhub_import_chunk_seq")
        ]

    def __str__(self) -> str:
        return f"chunk {self.seq} of import {self.job_id}"
