"""Change-list filters for memoryhub's admins: bounded at any volume, and never a choice
from an org the user does not see.

Django's ``RelatedOnlyFieldListFilter`` and ``AllValuesFieldListFilter`` read their
choices with a ``DISTINCT`` over every visible row: a scan per page view at a million
records. These read the small tables (orgs, domains, knowledge bases) for related
choices, and one ``GROUP BY … LIMIT`` for the most frequent values of a column (it
still reads the rows, but returns twenty). The records' embedding model filter and the
observations' source filter are still Django's ``DISTINCT``.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from tenants.models import Domain, Org

from .. import boundary
from ..models import KnowledgeBase, valid_q

#: The foreign keys whose active filter narrows the choices of the filters below.
NARROWING_FIELDS = ("org", "domain", "knowledge_base")


def knowledge_base_label(knowledge_base: KnowledgeBase) -> str:
    """``org / domain / name``: a knowledge base's name is unique only in its domain.

    Reads ``domain.org``: select it with the knowledge base (``domain__org``).
    """
    domain = knowledge_base.domain
    return f"{domain.org.slug} / {domain.slug} / {knowledge_base.name}"


def active_narrowing(
    request: HttpRequest, fields: tuple[str, ...] = NARROWING_FIELDS
) -> dict[str, int]:
    """The filters of ``fields`` (org, domain, knowledge base) active in the request, as
    field lookups (``{"domain_id": 3}``)."""
    lookups = {}
    for name in fields:
        value = request.GET.get(f"{name}__id__exact", "")
        if value.isascii() and value.isdigit() and len(value) < 19:
            lookups[f"{name}_id"] = int(value)
    return lookups


def _has_field(options: Any, name: str) -> bool:
    return any(field.name == name for field in options.get_fields())


class VisibleRelatedFilter(admin.RelatedFieldListFilter):
    """An org, domain or knowledge base filter whose choices are the orgs the user sees
    and their domains and knowledge bases (narrowed by the org and domain filters above
    it), read from their own tables: one small query, whatever the number of rows."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list:
        orgs = model_admin.visible_orgs(request)
        related = field.related_model
        position = NARROWING_FIELDS.index(field.name) if field.name in NARROWING_FIELDS else 0
        above = NARROWING_FIELDS[:position]
        narrowing = active_narrowing(request, above)
        if related is Org:
            return [(org.pk, str(org)) for org in orgs.order_by("slug")]
        if related is Domain:
            domains = (
                Domain.objects.filter(org__in=orgs, **narrowing)
                .select_related("org")
                .order_by("org__slug", "slug")
            )
            return [(domain.pk, str(domain)) for domain in domains]
        if related is KnowledgeBase:
            knowledge_bases = (
                KnowledgeBase.unscoped.filter(org__in=orgs, **narrowing)
                .select_related("domain__org")
                .order_by("domain__org__slug", "domain__slug", "name")
            )
            return [(kb.pk, knowledge_base_label(kb)) for kb in knowledge_bases]
        raise TypeError(f"VisibleRelatedFilter does not know {related.__name__}")


def shown(value: str) -> str:
    """``value`` as a page may show it: a control or invisible format character (in a
    name stored before the doors refused them) written as its escape, never sent raw to
    a terminal or a page."""
    if not boundary.has_invisible(value):
        return value
    return "".join(
        char.encode("unicode_escape").decode("ascii")
        if unicodedata.category(char) in boundary.INVISIBLE_CATEGORIES
        else char
        for char in value
    )


class TopValuesFilter(admin.SimpleListFilter):
    """The ``limit`` most frequent values of ``field`` among the rows the user sees (in
    the active org, domain and knowledge base filter), counted in a sample of ``sample``
    rows: a bounded read at any volume (a ``GROUP BY`` over a million rows is not).

    A value outside the top ones still filters when it is in the URL (and is shown as
    the selected choice); the search box finds the rest.
    """

    field: str
    limit = 20
    sample = 20_000
    blank_label = _("(empty)")

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        fields = model_admin.model._meta
        narrowing = active_narrowing(
            request, tuple(name for name in NARROWING_FIELDS if _has_field(fields, name))
        )
        rows = model_admin.get_queryset(request).filter(**narrowing)
        counts = Counter(rows.order_by().values_list(self.field, flat=True)[: self.sample])
        values = [value for value, _ in sorted(counts.items(), key=lambda c: (-c[1], c[0]))]
        values = values[: self.limit]
        selected = self.value()
        if selected is not None and selected not in values:
            values.append(selected)
        return [(value, shown(value) or str(self.blank_label)) for value in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(**{self.field: value})


class NamespaceFilter(TopValuesFilter):
    title = _("namespace")
    parameter_name = "namespace"
    field = "namespace"
    blank_label = _("(shared)")


class ActorFilter(TopValuesFilter):
    title = _("actor")
    parameter_name = "actor"
    field = "actor"
    blank_label = _("(none)")


class SourceFilter(TopValuesFilter):
    title = _("source")
    parameter_name = "source"
    field = "source"
    blank_label = _("(none)")


class EmbeddingModelFilter(TopValuesFilter):
    title = _("embedding model")
    parameter_name = "embedding_model"
    field = "embedding_model"
    blank_label = _("(none yet)")


class ValidityFilter(admin.SimpleListFilter):
    """Records valid now, or closed (superseded, or past their ``valid_until``)."""

    title = _("validity")
    parameter_name = "validity"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("now", _("Valid now")), ("closed", _("Closed or superseded"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "now":
            return queryset.filter(valid_q())
        if self.value() == "closed":
            return queryset.exclude(valid_q())
        return queryset


class CreatedWithinFilter(admin.SimpleListFilter):
    """Rows created in the last 24 hours, 7 days or 30 days."""

    title = _("created")
    parameter_name = "created_within"
    periods = {
        "24h": (timedelta(hours=24), _("Last 24 hours")),
        "7d": (timedelta(days=7), _("Last 7 days")),
        "30d": (timedelta(days=30), _("Last 30 days")),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [(value, label) for value, (_period, label) in self.periods.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        period = self.periods.get(self.value() or "")
        if period is None:
            return queryset
        return queryset.filter(created_at__gte=timezone.now() - period[0])
