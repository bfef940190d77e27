"""Archive jobs: an org's export or an archive's import, run by a worker for the admin."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _

from .tenancy import TenantScopedModel, domain_key


class ArchiveJob(TenantScopedModel):
    """An export of an org (or a domain) to an archive file, or an import of one, queued
    from the admin and run by a Celery task with its progress here.

    The file lives in the site's default storage under ``memoryhub/archives/``: an export's
    until ``ARCHIVE_RETENTION`` passes or the org erases anything (an archive made before
    an erasure still holds what it erased), an import's until the import ends.
    """

    class Kind(models.TextChoices):
        EXPORT = "export", _("Export")
        IMPORT = "import", _("Import")

    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")
        FAILED = "failed", _("Failed")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    #: Org-wide: the domain exported, if one.
    domain = domain_key(null=True, blank=True)
    kind = models.CharField(_("kind"), max_length=8, choices=Kind)
    status = models.CharField(_("status"), max_length=8, choices=Status, default=Status.QUEUED)
    vectors = models.BooleanField(_("with vectors"), default=False)
    dry_run = models.BooleanField(_("dry run"), default=False)
    #: The file's name in the default storage ("" once it is gone).
    file = models.CharField(_("file"), max_length=255, blank=True, default="")
    filename = models.CharField(_("file name"), max_length=255, blank=True, default="")
    total = models.PositiveBigIntegerField(_("records"), default=0)
    done = models.PositiveBigIntegerField(_("done"), default=0)
    report = models.JSONField(_("report"), default=dict, blank=True)
    error = models.TextField(_("error"), blank=True, default="")
    actor = models.CharField(_("actor"), max_length=150, blank=True, default="")
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("archive")
        verbose_name_plural = _("archives")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {str(self.pk)[:8]}"
