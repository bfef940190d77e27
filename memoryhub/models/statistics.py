"""Word statistics: per-domain document frequencies the keyword leg and the playground
read."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .tenancy import TenantScopedModel


class WordStatistics(TenantScopedModel):
    """When a large domain's words were last counted (``services.word_statistics``), and
    how many records it held then: the sweeper counts them again once the domain has
    grown or shrunk by a tenth since."""

    records = models.PositiveIntegerField(_("records counted"))
    counted_at = models.DateTimeField(_("counted at"), default=timezone.now)

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("word statistics")
        verbose_name_plural = _("word statistics")
        constraints = [
            models.UniqueConstraint(
                fields=["domain", "org"], name="memoryhub_wordstats_domain_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"word statistics of domain {self.domain_id} ({self.records} records)"


class WordFrequency(TenantScopedModel):
    """How many of a large domain's records hold one of its common words (a lexeme of the
    search configuration, in at least ``COMMON_WORD_RECORDS`` records when counted).

    The keyword leg reads them to rank only the records holding a query's rarest words
    (``services.word_statistics``). Rare words are never stored; every erasure in the
    domain deletes its counts, which the sweeper makes again from what remains.
    """

    lexeme = models.TextField(_("word"))
    records = models.PositiveIntegerField(_("records holding it"))

    class Meta(TenantScopedModel.Meta):
        verbose_name = _("word frequency")
        verbose_name_plural = _("word frequencies")
        constraints = [
            models.UniqueConstraint(
                fields=["domain", "lexeme", "org"], name="memoryhub_wordfreq_domain_lexeme_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.lexeme!r} in {self.records} records"
