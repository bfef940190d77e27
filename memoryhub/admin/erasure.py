"""GDPR erasure of a whole org or domain, added to the tenants admin.

The tenants admins stay the ones ``tenants.admin`` registers: erasure is an extension
of theirs (``tenants.admin.extend_admin``). Each action copies Django's
``delete_selected``: the first POST shows what would be erased (counts per knowledge
base), the second (``post=yes``) erases through the forget service and shows the receipt
(counts, time, actor; no content). Deleting an org or a domain erases its memory through
the same service first.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tenants.admin import AdminExtension, OrgRestrictedAdmin, extend_admin
from tenants.models import Domain, Org

from .. import policy
from ..policy import Action
from ..scope import Scope
from ..services import forget as forget_service
from .base import actor, admin_context, deletion_summary, principal
from .receipts import batch_url

logger = logging.getLogger("memoryhub.erasure")


def erasure_batch(request: HttpRequest) -> uuid.UUID:
    """One operator action's receipts share a batch: the page it redirects to."""
    batch = getattr(request, "_memoryhub_batch", None)
    if batch is None:
        batch = request._memoryhub_batch = uuid.uuid4()  # type: ignore[attr-defined]
    return batch


def show_receipt(
    model_admin: Any, request: HttpRequest, rows: list[Any], *, deleted: str = ""
) -> HttpResponse:
    """Redirect to the batch's receipt (refreshing it erases nothing); an erasure that
    found nothing has no receipt and says so on the page."""
    if any(row[-1] for row in rows):
        return HttpResponseRedirect(batch_url(erasure_batch(request)))
    context = admin_context(
        model_admin,
        request,
        title=_("Erasure receipt"),
        receipt=[],
        total=0,
        erased_at=timezone.now(),
        actor=actor(request),
        deleted=deleted,
    )
    return TemplateResponse(request, "admin/memoryhub/erasure_receipt.html", context)


def _erase_domain(
    domain: Domain, who: policy.Principal, batch: uuid.UUID | None = None
) -> list[tuple[str, str, str, int]]:
    result = forget_service.forget(
        Scope.for_domain(domain),
        forget_service.ForgetRequest(all=True),
        principal=who,
        batch=batch,
    )
    return [(domain.org.slug, domain.slug, kb, count) for kb, count in result.by_source.items()]


class MemoryErasure(AdminExtension):
    """Erasure actions, and deletion through the erasure path, asked of the policy.

    The action copies Django's ``delete_selected``: the first POST shows what would be
    erased (``preview``: counts per knowledge base), the second (``post=yes``) erases
    each row (``erase``) through the forget service and shows the receipt. Only rows of
    orgs where the user may forget are erased.

    Deleting an org or a domain erases its memory through the forget service first and
    answers with the erasure receipt (counts per knowledge base, time, actor). Its
    ``memory.forgotten`` observations go with the deleted org or domain, so the receipt
    is also logged (``memoryhub.erasure``: counts and ids, never content).
    """

    #: What the confirmation page says will be erased.
    what: Any = ""

    def preview(self, queryset: QuerySet[Any]) -> list[tuple[str, str, str, int]]:
        """``(org, domain, knowledge base, records)`` rows an erasure of ``queryset`` erases."""
        raise NotImplementedError

    def targets(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """The rows to erase, as :meth:`erase` reads them."""
        return queryset

    def erase(self, request: HttpRequest, obj: Any) -> list[tuple[str, str, str, int]]:
        raise NotImplementedError

    def erase_memory(
        self, model_admin: OrgRestrictedAdmin, request: HttpRequest, queryset: QuerySet[Any]
    ) -> HttpResponse:
        """The action (each subclass names it for its model)."""
        queryset = model_admin.allowed_rows(request, queryset, Action.FORGET)
        context = admin_context(
            model_admin,
            request,
            title=_("Erase %s") % self.what,
            queryset=queryset,
            what=self.what,
            action=request.POST.get("action"),
            action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
        )
        if request.POST.get("post") != "yes":
            rows = self.preview(queryset)
            context.update(rows=rows, total=sum(row[3] for row in rows), confirm=True)
            return TemplateResponse(request, "admin/memoryhub/confirm_erasure.html", context)
        erased = [row for obj in self.targets(queryset) for row in self.erase(request, obj)]
        return show_receipt(model_admin, request, erased)

    def actions(self, model_admin: OrgRestrictedAdmin, request: HttpRequest) -> list[Any]:
        return [self.erase_memory] if model_admin.allows(request, Action.FORGET) else []

    def deleted_objects(
        self, model_admin: OrgRestrictedAdmin, objs: Any, request: HttpRequest
    ) -> Any:
        return deletion_summary(model_admin, objs, request)

    def before_delete(self, model_admin: Any, request: HttpRequest, obj: Any) -> None:
        rows = self.erase(request, obj)
        receipt = [*getattr(request, "_memoryhub_receipt", []), *rows]
        request._memoryhub_receipt = receipt  # type: ignore[attr-defined]
        logger.info(
            "erased %d memory records of %s %s before deleting it",
            sum(row[3] for row in rows),
            obj._meta.model_name,
            obj.pk,
            extra={
                "by_source": {f"{r[0]}/{r[1]}/{r[2]}": r[3] for r in rows},
                "actor": actor(request),
            },
        )

    def after_bulk_delete(self, model_admin: Any, request: HttpRequest, objs: list[Any]) -> None:
        total = sum(row[3] for row in getattr(request, "_memoryhub_receipt", []))
        model_admin.message_user(
            request,
            ngettext(
                "Erased %(count)d memory record before deleting.",
                "Erased %(count)d memory records before deleting.",
                total,
            )
            % {"count": total},
            messages.SUCCESS,
        )

    def response_delete(
        self, model_admin: Any, request: HttpRequest, obj_display: str, obj_id: Any
    ) -> HttpResponse | None:
        receipt = getattr(request, "_memoryhub_receipt", None)
        if receipt is None:
            return None
        return show_receipt(model_admin, request, receipt, deleted=obj_display)


@extend_admin(Org)
class OrgErasure(MemoryErasure):
    what = _("the memory of these orgs")

    @admin.action(description=_("Erase this org's memory"))
    def erase_memory(
        self, model_admin: OrgRestrictedAdmin, request: HttpRequest, queryset: QuerySet[Any]
    ) -> HttpResponse:
        return super().erase_memory(model_admin, request, queryset)

    def preview(self, queryset: QuerySet[Org]) -> list[tuple[str, str, str, int]]:
        return [
            (org.slug, domain, kb, count)
            for org in queryset
            for domain, kb, count in forget_service.preview_org(org.pk)
        ]

    def erase(self, request: HttpRequest, obj: Org) -> list[tuple[str, str, str, int]]:
        return [
            row
            for domain in obj.domains.all()
            for row in _erase_domain(domain, principal(request), erasure_batch(request))
        ]


@extend_admin(Domain)
class DomainErasure(MemoryErasure):
    what = _("the memory of these domains")

    @admin.action(description=_("Erase this domain's memory"))
    def erase_memory(
        self, model_admin: OrgRestrictedAdmin, request: HttpRequest, queryset: QuerySet[Any]
    ) -> HttpResponse:
        return super().erase_memory(model_admin, request, queryset)

    def preview(self, queryset: QuerySet[Domain]) -> list[tuple[str, str, str, int]]:
        rows: list[tuple[str, str, str, int]] = []
        for domain in self.targets(queryset):
            preview = forget_service.preview(
                Scope.for_domain(domain), forget_service.ForgetRequest(all=True)
            )
            rows.extend((domain.org.slug, domain.slug, kb, count) for kb, count in preview.items())
        return rows

    def targets(self, queryset: QuerySet[Domain]) -> QuerySet[Domain]:
        return queryset.select_related("org")

    def erase(self, request: HttpRequest, obj: Domain) -> list[tuple[str, str, str, int]]:
        return _erase_domain(obj, principal(request), erasure_batch(request))
