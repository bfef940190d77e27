"""The running service's own rows: kept answers of idempotent requests, and worker
heartbeats."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .tenancy import TenantScopedModel


class IdempotentRequest(TenantScopedModel):
    """The answer to a write, update or forget sent with an ``Idempotency-Key`` header,
    kept for its retries (``services.idempotency``): a retry with the same key gets
    this answer again instead of acting twice.

    Stored in the transaction that acted, so an answer exists exactly when the action
    committed. Kept ``IDEMPOTENCY_TTL`` seconds (the sweeper deletes older ones); an
    update's answer holds the record's content, so every erasure in the domain deletes
    the domain's answers.
    """

    #: Who sent it: an API key (``key:<prefix>``) or a staff user (``user:<id>``).
    sender = models.CharField(_("sender"), max_length=64)
    idempotency_key = models.CharField(_("idempotency key"), max_length=255)
    #: sha256 of the method, path and body: the same key with another request is refused.
    fingerprint = models.CharField(_("request fingerprint"), max_length=64)
    status = models.PositiveSmallIntegerField(_("status"))
    answer = models.JSONField(_("answer"))
    created_at = models.DateTimeField(_("created"), default=timezone.now, db_index=True)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("idempotent request")
        verbose_name_plural = _("idempotent requests")
        constraints = [
            models.UniqueConstraint(
                fields=["sender", "idempotency_key", "org"], name="memoryhub_idempotency_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"idempotent request {self.pk} ({self.status})"


class WorkerHeartbeat(models.Model):
    """The last time each Celery worker said it was alive (``memoryhub.worker``).

    Not tenant data: one row per worker host name, read by the health endpoint and by
    the sweeper (which records a live worker still holds).
    """

    hostname = models.CharField(_("host name"), max_length=255, unique=True)
    seen_at = models.DateTimeField(_("last seen"))
    #: Ids of the records in the indexing tasks the worker held at ``seen_at`` (running,
    #: prefetched, or waiting to be retried); null when it could not tell.
    holding = models.JSONField(_("records held"), null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("worker heartbeat")
        verbose_name_plural = _("worker heartbeats")

    def __str__(self) -> str:
        return f"{self.hostname} at {self.seen_at:%Y-%m-%d %H:%M:%S}"
