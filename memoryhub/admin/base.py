"""The operator path into scoped models, shared by memoryhub's ModelAdmins."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import URLPattern

from tenants.admin import OrgRestrictedAdmin
from tenants.models import Domain

from ..models import KnowledgeBase
from ..scope import Scope, operator_access


def operator_view(view: Callable[..., Any]) -> Callable[..., Any]:
    """Run an admin view, and render its template, on the operator (unscoped) path.

    A TemplateResponse renders after the view returns; rendering inside the context
    keeps lazy querysets evaluated in templates on the operator path too.
    """

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        with operator_access():
            response = view(request, *args, **kwargs)
            if getattr(response, "is_rendered", True) is False:
                response.render()
            return response

    return wrapped


def actor(request: HttpRequest) -> str:
    return f"admin:{request.user.get_username()}"


class OperatorAdmin(OrgRestrictedAdmin):
    """A ModelAdmin over a scoped model: views run unscoped, rows filtered by membership."""

    def get_urls(self) -> list[URLPattern]:
        urls = super().get_urls()
        for pattern in urls:
            if isinstance(pattern, URLPattern):
                pattern.callback = operator_view(pattern.callback)
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

    def visible_domain(self, request: HttpRequest, domain_id: Any) -> Domain:
        """A domain the operator may act on, or PermissionDenied (no existence leak)."""
        domain = (
            Domain.objects.filter(pk=domain_id, org__in=self.visible_orgs(request))
            .select_related("org")
            .first()
        )
        if domain is None:
            raise PermissionDenied
        return domain

    @staticmethod
    def scope_of(obj: Any) -> Scope:
        return Scope(obj.org_id, obj.domain_id)


def admin_context(model_admin: admin.ModelAdmin, request: HttpRequest, **extra: Any) -> dict:
    """What admin templates need for breadcrumbs and the sidebar."""
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "app_label": model_admin.model._meta.app_label,
        "has_view_permission": model_admin.has_view_permission(request),
        **extra,
    }
