"""Admin for knowledge bases, memory records and observations.

memoryhub's models refuse unscoped queries; every view here runs on the explicit
operator path (``operator_access``) and shows a staff user only their orgs' rows.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import URLPattern
from django.utils.translation import gettext_lazy as _

from tenants.admin import OrgRestrictedAdmin

from ..models import KnowledgeBase, MemoryRecord, Observation
from ..scope import operator_access


class OperatorAdmin(OrgRestrictedAdmin):
    """A ModelAdmin over a scoped model: views run unscoped, rows filtered by membership."""

    def get_urls(self) -> list[URLPattern]:
        urls = super().get_urls()
        for pattern in urls:
            if isinstance(pattern, URLPattern):
                pattern.callback = operator_access()(pattern.callback)
        return urls

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = self.model.unscoped.all()
        ordering = self.get_ordering(request)
        if ordering:
            queryset = queryset.order_by(*ordering)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(org__in=self.visible_orgs(request))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.related_model is KnowledgeBase:
            kwargs["queryset"] = KnowledgeBase.unscoped.filter(
                org__in=self.visible_orgs(request)
            ).select_related("domain__org")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(OperatorAdmin):
    list_display = ["name", "domain", "read_only", "on_write", "refused_writes", "created_at"]
    list_filter = ["read_only", "on_write", "org"]
    list_select_related = ["domain__org"]
    search_fields = ["name", "description", "domain__slug", "org__slug"]
    readonly_fields = ["refused_writes", "created_at", "updated_at"]


@admin.register(MemoryRecord)
class MemoryRecordAdmin(OperatorAdmin):
    list_display = [
        "short_content",
        "knowledge_base",
        "namespace",
        "kind",
        "status",
        "embedding_model",
        "created_at",
    ]
    list_filter = ["status", "kind", "embedding_model", "org", "created_at"]
    list_select_related = ["knowledge_base", "domain__org"]
    search_fields = ["content", "key", "namespace"]
    readonly_fields = [
        "id",
        "status",
        "embedding_model",
        "attempts",
        "last_error",
        "content_hash",
        "created_at",
        "updated_at",
        "indexed_at",
    ]
    date_hierarchy = "created_at"

    @admin.display(description=_("content"))
    def short_content(self, obj: MemoryRecord) -> str:
        return obj.content if len(obj.content) <= 80 else obj.content[:79] + "…"


@admin.register(Observation)
class ObservationAdmin(OperatorAdmin):
    list_display = ["created_at", "kind", "org", "domain", "source", "count", "actor"]
    list_filter = ["kind", "org", "source"]
    list_select_related = ["org", "domain"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
