"""Knowledge bases: the named collections of a domain's records, and whether agents may
write to them."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from .tenancy import TenantScopedModel, domain_key, scoped_manager


class KnowledgeBaseQuerySet(models.QuerySet["KnowledgeBase"]):
    """Whether a knowledge base takes a write is the policy's to say
    (``policy.refuses_change``), not a filter's."""


class KnowledgeBase(TenantScopedModel):
    """A named source of memory inside a domain; ``name`` is what items carry as source."""

    DEFAULT_NAME = "memory"

    class OnWrite(models.TextChoices):
        REFUSE = "refuse", _("Refuse (403)")
        IGNORE = "ignore", _("Ignore (report as refused)")

    domain = domain_key(related_name="knowledge_bases")
    name = models.SlugField(
        _("name"),
        max_length=64,
        help_text=_("Unique in its domain; returned items carry it as their source."),
    )
    description = models.TextField(_("description"), blank=True, default="")
    read_only = models.BooleanField(
        _("read-only"),
        default=False,
        help_text=_("Agents may read but not write it; operators curate it in the admin."),
    )
    on_write = models.CharField(
        _("on write"),
        max_length=8,
        choices=OnWrite,
        default=OnWrite.REFUSE,
        help_text=_("What a write through the API does to a read-only knowledge base."),
    )
    refused_writes = models.PositiveBigIntegerField(_("refused writes"), default=0)
    consolidate = models.BooleanField(
        _("consolidate"),
        default=False,
        help_text=_(
            "Turn episodic records written here into semantic facts (with their sources), "
            "in the background; a write can also ask for it."
        ),
    )
    #: Set when an operator deleted it: a worker is erasing its records (then the row).
    #: It takes no writes meanwhile.
    deleting_since = models.DateTimeField(_("being deleted since"), null=True, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    objects = scoped_manager(models.Manager.from_queryset(KnowledgeBaseQuerySet))
    unscoped = models.Manager.from_queryset(KnowledgeBaseQuerySet)()

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("knowledge base")
        verbose_name_plural = _("knowledge bases")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["domain", "name", "org"], name="memoryhub_kb_unique_name"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def accepts_writes(self) -> bool:
        return not self.read_only
