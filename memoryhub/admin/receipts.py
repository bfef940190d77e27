"""Erasure receipts: the permanent, content-free proof of every erasure.

A list and a page per receipt (read-only), a JSON download, the page an erasure
redirects to (its batch: refreshing it erases nothing), and a lookup that answers "was
this namespace erased?" by hashing the input, never storing it.
"""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from tenants.models import Domain

from ..models import ErasureReceipt
from ..policy import Action
from ..services import forget as forget_service
from .base import AuditAdmin, actor, admin_context


def batch_url(batch: uuid.UUID) -> str:
    return reverse("admin:memoryhub_erasurereceipt_batch", args=[batch])


class LookupForm(forms.Form):
    namespace = forms.CharField(
        max_length=200, help_text=_("The data subject's namespace, e.g. user:alice.")
    )


@admin.register(ErasureReceipt)
class ErasureReceiptAdmin(AuditAdmin):
    org_field = "org_id"
    # Who may erase may see the receipts (as the API's forget permission does).
    view_action = Action.FORGET
    list_display = [
        "created_at",
        "where",
        "deleted",
        "cancelled_imports",
        "actor",
        "download",
    ]
    list_filter = ["org_slug", "domain_slug", "created_at"]
    search_fields = ["=id", "actor"]
    search_help_text = _(
        "A receipt's id, who erased, or an erased namespace (such as user:alice), found by"
        " its keyed hash as the lookup finds it: receipts never hold a namespace itself."
    )
    date_hierarchy = "created_at"
    readonly_fields = [
        "id",
        "created_at",
        "actor",
        "org_slug",
        "domain_slug",
        "batch",
        "selector",
        "by_source",
        "deleted",
        "cancelled_imports",
    ]
    fields = list(readonly_fields)
    change_list_template = "admin/memoryhub/erasurereceipt/change_list.html"
    change_form_template = "admin/memoryhub/erasurereceipt/change_form.html"

    def org_id_of(self, obj: Any) -> int | None:
        return obj.org_id

    def get_queryset(self, request: HttpRequest) -> QuerySet[ErasureReceipt]:
        receipts = ErasureReceipt.unscoped.order_by("-created_at")
        if self.principal(request).is_superuser:
            return receipts
        # Their orgs' receipts, and their own (an owner who deleted their org keeps it).
        return receipts.filter(
            Q(org_id__in=self.visible_orgs(request).values("pk")) | Q(actor=actor(request))
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[ErasureReceipt], search_term: str
    ) -> tuple[QuerySet[ErasureReceipt], bool]:
        found, duplicates = super().get_search_results(request, queryset, search_term)
        namespace = search_term.strip()
        if namespace and "\x00" not in namespace:
            erased = forget_service.receipts_for_namespace(namespace).values("pk")
            found = found | queryset.filter(pk__in=erased)
        return found, duplicates

    @admin.display(description=_("org / domain"), ordering="org_slug")
    def where(self, obj: ErasureReceipt) -> str:
        return f"{obj.org_slug} / {obj.domain_slug}"

    @admin.display(description=_("receipt"))
    def download(self, obj: ErasureReceipt) -> str:
        return format_html(
            '<a href="{}" title="{}">{}</a>',
            reverse("admin:memoryhub_erasurereceipt_download", args=[obj.pk]),
            _("Download receipt (JSON)"),
            _("Download (JSON)"),
        )

    def get_urls(self) -> list[URLPattern]:
        def wrap(view: Any) -> Any:
            return self.admin_site.admin_view(view)

        custom = [
            path("lookup/", wrap(self.lookup_view), name="memoryhub_erasurereceipt_lookup"),
            path(
                "batch/<uuid:batch>/",
                wrap(self.batch_view),
                name="memoryhub_erasurereceipt_batch",
            ),
            path(
                "<uuid:pk>/download/",
                wrap(self.download_view),
                name="memoryhub_erasurereceipt_download",
            ),
        ]
        return custom + super().get_urls()

    def download_view(self, request: HttpRequest, pk: uuid.UUID) -> JsonResponse:
        receipt = get_object_or_404(self.get_queryset(request), pk=pk)
        response = JsonResponse(receipt.as_json(), json_dumps_params={"indent": 2})
        response["Content-Disposition"] = f'attachment; filename="erasure-{receipt.pk}.json"'
        return response

    def batch_view(self, request: HttpRequest, batch: uuid.UUID) -> HttpResponse:
        """The receipt of one erasure action (one or more domains): the page an erasure
        redirects to, so refreshing it shows the same receipt and erases nothing."""
        receipts = list(self.get_queryset(request).filter(batch=batch).order_by("domain_slug"))
        if not receipts:
            raise Http404
        existing = set(
            Domain.objects.filter(pk__in=[r.domain_id for r in receipts]).values_list(
                "pk", flat=True
            )
        )
        rows = [
            (receipt.org_slug, receipt.domain_slug, name, count)
            for receipt in receipts
            for name, count in sorted(receipt.by_source.items())
        ]
        context = admin_context(
            self,
            request,
            title=_("Erasure receipt"),
            receipt=rows,
            receipts=receipts,
            total=sum(receipt.deleted for receipt in receipts),
            erased_at=receipts[0].created_at,
            actor=receipts[0].actor,
            deleted=", ".join(
                f"{receipt.org_slug}/{receipt.domain_slug}"
                for receipt in receipts
                if receipt.domain_id not in existing
            ),
        )
        return TemplateResponse(request, "admin/memoryhub/erasure_receipt.html", context)

    def lookup_view(self, request: HttpRequest) -> HttpResponse:
        """Was this namespace erased? The input is hashed like the receipts' selectors."""
        form = LookupForm(request.POST or None)
        context = admin_context(self, request, title=_("Look up an erasure"), form=form)
        if request.method == "POST" and form.is_valid():
            found = forget_service.receipts_for_namespace(form.cleaned_data["namespace"])
            context["found"] = list(
                found.filter(pk__in=self.get_queryset(request).values("pk")).order_by(
                    "-created_at"
                )[:100]
            )
            context["searched"] = True
        return TemplateResponse(request, "admin/memoryhub/erasurereceipt/lookup.html", context)
