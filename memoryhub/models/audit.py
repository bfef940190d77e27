"""What the operators read afterwards: observations (the timeline of writes, refusals and
erasures) and erasure receipts."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .tenancy import TenantScopedModel, domain_key


class Observation(TenantScopedModel):
    """An append-only entry of the operator timeline (writes, refusals, dedupes, erasures)."""

    class Kind(models.TextChoices):
        MEMORY_WRITTEN = "memory.written", _("memory written")
        MEMORY_WRITE_REFUSED = "memory.write_refused", _("write refused")
        MEMORY_DEDUPLICATED = "memory.deduplicated", _("memory deduplicated")
        QUERY_DEDUPLICATED = "query.deduplicated", _("query deduplicated")
        MEMORY_FORGOTTEN = "memory.forgotten", _("memory forgotten")
        SCOPE_REFUSED = "scope.refused", _("scope refused")
        EMBEDDING_FAILED = "embedding.failed", _("embedding failed")
        MEMORY_CONSOLIDATED = "memory.consolidated", _("memory consolidated")
        CONSOLIDATION_FAILED = "consolidation.failed", _("consolidation failed")
        RERANK_FAILED = "rerank.failed", _("rerank failed")
        SUBJECT_EXPORTED = "subject.exported", _("data subject exported")

    domain = domain_key(null=True, blank=True)
    kind = models.CharField(_("kind"), max_length=32, choices=Kind)
    source = models.CharField(_("source"), max_length=64, blank=True, default="")
    count = models.PositiveIntegerField(_("count"), default=0)
    payload = models.JSONField(_("payload"), default=dict, blank=True)
    actor = models.CharField(_("actor"), max_length=150, blank=True, default="")
    created_at = models.DateTimeField(_("created"), default=timezone.now, db_index=True)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("observation")
        verbose_name_plural = _("observations")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["org", "kind", "created_at"], name="memoryhub_obs_kind_idx"),
            models.Index(fields=["domain", "created_at"], name="memoryhub_obs_domain_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.source} ({self.count})"


class ErasureReceipt(TenantScopedModel):
    """The permanent proof of one erasure: when, by whom, where, what selector (as a keyed
    hash), and how many records per knowledge base. Never the content or the namespace.

    The org and domain are kept as plain ids and slugs, not foreign keys, so a receipt
    outlives the org or domain it speaks of; receipts are exempt from retention.
    """

    org = None
    domain = None
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(_("erased at"), default=timezone.now, db_index=True)
    actor = models.CharField(_("actor"), max_length=150, blank=True, default="")
    org_id = models.BigIntegerField(_("org id"))
    org_slug = models.CharField(_("org"), max_length=64)
    domain_id = models.BigIntegerField(_("domain id"))
    domain_slug = models.CharField(_("domain"), max_length=64)
    #: One operator action (an org's erasure, a subject across domains) shares a batch.
    batch = models.UUIDField(_("batch"), default=uuid.uuid4, db_index=True)
    selector = models.JSONField(_("selector"), default=dict)
    by_source = models.JSONField(_("records erased per knowledge base"), default=dict)
    deleted = models.PositiveIntegerField(_("records erased"), default=0)
    cancelled_imports = models.PositiveIntegerField(_("imports cancelled"), default=0)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("erasure receipt")
        verbose_name_plural = _("erasure receipts")
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["org_id", "domain_id", "created_at"], name="memoryhub_receipt_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"erasure {str(self.id)[:8]} in {self.org_slug}/{self.domain_slug}"

    def as_json(self) -> dict[str, object]:
        """What the API and the admin's download give: nothing that names the subject."""
        return {
            "id": str(self.id),
            "erased_at": self.created_at.isoformat(),
            "actor": self.actor,
            "org": self.org_slug,
            "domain": self.domain_slug,
            "selector": self.selector,
            "by_source": self.by_source,
            "deleted": self.deleted,
            "cancelled_imports": self.cancelled_imports,
        }
