"""GDPR erasure of a whole org or domain, added to the tenants admin.

Each action copies Django's ``delete_selected``: the first POST shows what would be
erased (counts per knowledge base), the second (``post=yes``) erases through the forget
service and shows the receipt (counts, time, actor; no content). Deleting an org or a
domain erases its memory through the same service first.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tenants.admin import DomainAdmin, OrgAdmin
from tenants.models import Domain, Org

from ..policy import Action
from ..scope import Scope
from ..services import forget as forget_service
from .base import actor, admin_context, deletion_summary


def _confirm_or_erase(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Any],
    rows: list[tuple[str, str, str, int]],
    erase: Any,
    what: Any,
) -> HttpResponse:
    context = admin_context(
        model_admin,
        request,
        title=_("Erase %s") % what,
        queryset=queryset,
        what=what,
        action=request.POST.get("action"),
        action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
    )
    if request.POST.get("post") != "yes":
        context.update(rows=rows, total=sum(row[3] for row in rows), confirm=True)
        return TemplateResponse(request, "admin/memoryhub/confirm_erasure.html", context)
    receipt = erase()
    context.update(
        receipt=receipt,
        total=sum(row[3] for row in receipt),
        erased_at=timezone.now(),
        actor=actor(request),
    )
    return TemplateResponse(request, "admin/memoryhub/erasure_receipt.html", context)


def _org_rows(orgs: QuerySet[Org]) -> list[tuple[str, str, str, int]]:
    return [
        (org.slug, domain, kb, count)
        for org in orgs
        for domain, kb, count in forget_service.preview_org(org.pk)
    ]


def _domain_rows(domains: QuerySet[Domain]) -> list[tuple[str, str, str, int]]:
    rows: list[tuple[str, str, str, int]] = []
    for domain in domains.select_related("org"):
        preview = forget_service.preview(
            Scope.for_domain(domain), forget_service.ForgetRequest(all=True)
        )
        rows.extend((domain.org.slug, domain.slug, kb, count) for kb, count in preview.items())
    return rows


def _erase_domain(domain: Domain, who: str) -> list[tuple[str, str, str, int]]:
    result = forget_service.forget(
        Scope.for_domain(domain), forget_service.ForgetRequest(all=True), actor=who, operator=True
    )
    return [(domain.org.slug, domain.slug, kb, count) for kb, count in result.by_source.items()]


class ErasureMixin:
    """Erasure actions and deletion through the erasure path, asked of the policy."""

    def has_erase_permission(self, request: HttpRequest) -> bool:
        return self.allows(request, Action.FORGET)  # type: ignore[attr-defined]

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        return deletion_summary(self, objs, request)  # type: ignore[arg-type]


class OrgErasureAdmin(ErasureMixin, OrgAdmin):
    actions = ["erase_memory"]

    @admin.action(description=_("Erase this org's memory"), permissions=["erase"])
    def erase_memory(self, request: HttpRequest, queryset: QuerySet[Org]) -> HttpResponse:
        queryset = self.allowed_rows(request, queryset, Action.FORGET)

        def erase() -> list[tuple[str, str, str, int]]:
            return [
                row
                for org in queryset
                for domain in org.domains.all()
                for row in _erase_domain(domain, actor(request))
            ]

        return _confirm_or_erase(
            self, request, queryset, _org_rows(queryset), erase, _("the memory of these orgs")
        )

    def delete_model(self, request: HttpRequest, obj: Org) -> None:
        result = forget_service.forget_org(obj.pk, actor=actor(request))
        _report_erasure(self, request, obj, result.deleted)
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Org]) -> None:
        for org in queryset:
            self.delete_model(request, org)


class DomainErasureAdmin(ErasureMixin, DomainAdmin):
    actions = ["erase_memory"]

    @admin.action(description=_("Erase this domain's memory"), permissions=["erase"])
    def erase_memory(self, request: HttpRequest, queryset: QuerySet[Domain]) -> HttpResponse:
        queryset = self.allowed_rows(request, queryset, Action.FORGET)

        def erase() -> list[tuple[str, str, str, int]]:
            return [
                row
                for domain in queryset.select_related("org")
                for row in _erase_domain(domain, actor(request))
            ]

        return _confirm_or_erase(
            self, request, queryset, _domain_rows(queryset), erase, _("the memory of these domains")
        )

    def delete_model(self, request: HttpRequest, obj: Domain) -> None:
        rows = _erase_domain(obj, actor(request))
        _report_erasure(self, request, obj, sum(row[3] for row in rows))
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Domain]) -> None:
        for domain in queryset.select_related("org"):
            self.delete_model(request, domain)


def _report_erasure(model_admin: Any, request: HttpRequest, obj: Any, count: int) -> None:
    model_admin.message_user(
        request,
        ngettext(
            "Erased %(count)d memory record of %(obj)s before deleting it "
            "(receipt: a memory.forgotten observation).",
            "Erased %(count)d memory records of %(obj)s before deleting it "
            "(receipt: memory.forgotten observations).",
            count,
        )
        % {"count": count, "obj": obj},
        messages.SUCCESS,
    )


for model, model_admin in ((Org, OrgErasureAdmin), (Domain, DomainErasureAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
