"""The operator path into scoped models, shared by memoryhub's ModelAdmins, and the
access every admin asks: memoryhub's policy, installed into tenants' admin seam
(``tenants.admin.register_access``), decides for the tenants admins and memoryhub's."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import URLPattern
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tenants.admin import AdminAccess, OrgRestrictedAdmin, register_access
from tenants.models import Domain, Org

from .. import boundary, policy
from ..models import KnowledgeBase, MemoryRecord
from ..policy import Action
from ..scope import Scope, operator_access


@register_access
class PolicyAccess(AdminAccess):
    """The admins' permissions from memoryhub's policy core: the membership role in an
    org is the permission (``memoryhub.policy.ROLE_ACTIONS``); superusers may do
    everything. An action name no :class:`~memoryhub.policy.Action` carries is an error."""

    def allows(self, user: Any, action: str, org_id: int) -> bool:
        return policy.allows(policy.principal_for_user(user), Action(action), org_id=org_id)

    def allows_anywhere(self, user: Any, action: str) -> bool:
        return policy.allows_anywhere(policy.principal_for_user(user), Action(action))

    def orgs_allowing(self, user: Any, action: str) -> QuerySet[Org]:
        return policy.orgs_allowing(policy.principal_for_user(user), Action(action))


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


def principal(request: HttpRequest) -> policy.UserPrincipal:
    """Who acts through the admin: the user, named ``admin:<username>``."""
    return policy.principal_for_user(request.user, door="admin")


def actor(request: HttpRequest) -> str:
    return policy.actor_label(principal(request))


class _UniqueKeysDecoder(json.JSONDecoder):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(object_pairs_hook=boundary.unique_keys, **kwargs)


class BoundedJSONFormField(forms.JSONField):
    """Django's JSON form field inside the input boundary: JSON nested too deeply to
    parse, a key given twice, or a value no field may hold (``boundary.json_problems``)
    is a form error naming what is wrong, never a 500."""

    def __init__(self, **kwargs: Any) -> None:
        # A model's JSONField passes its own decoder, None by default: replaced too.
        if kwargs.get("decoder") is None:
            kwargs["decoder"] = _UniqueKeysDecoder
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
        except RecursionError:
            raise ValidationError(_("is nested too deeply to read."), code="invalid") from None
        except ValueError as exc:  # a key given twice
            raise ValidationError(_("Enter a valid JSON: %s.") % exc, code="invalid") from None
        problems = boundary.json_problems(converted)
        if problems:
            raise ValidationError(boundary.messages(problems), code="invalid")
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        """The value the form shows again: as typed when it cannot be read, or when it
        holds a lone surrogate (``"\\ud800"`` typed in the JSON), which no page can
        encode once parsed."""
        try:
            bound = super().bound_data(data, initial)
        except (RecursionError, ValueError):
            return forms.fields.InvalidJSONInput(data)
        if boundary.surrogate_path(bound) is not None:
            return forms.fields.InvalidJSONInput(data)
        return bound


class BoundedDatesChangeList(ChangeList):
    """Django's change list, but a date hierarchy's year past what a date holds
    (``?created_at__year=2147483648`` overflows, ``9999`` has no next year) is a wrong
    lookup (the list again, with its error mark), as a bad month already is, not a 500."""

    def get_filters(self, request: HttpRequest) -> Any:
        try:
            return super().get_filters(request)
        except (OverflowError, ValueError) as exc:
            raise IncorrectLookupParameters(exc) from exc


class OperatorAdmin(OrgRestrictedAdmin):
    """A ModelAdmin over a scoped model: views run unscoped, rows filtered by membership."""

    view_action = Action.READ
    change_action = Action.CURATE
    formfield_overrides = {models.JSONField: {"form_class": BoundedJSONFormField}}

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return BoundedDatesChangeList

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
            kwargs["queryset"] = self.editable_knowledge_bases(request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def principal(self, request: HttpRequest) -> policy.UserPrincipal:
        return policy.principal_for_user(request.user)

    def editable_knowledge_bases(self, request: HttpRequest) -> QuerySet[KnowledgeBase]:
        """Knowledge bases the user may curate (choices of forms that add records)."""
        return KnowledgeBase.unscoped.filter(
            org__in=self.orgs_for(request, Action.CURATE)
        ).select_related("domain__org")

    def domains_for(self, request: HttpRequest, action: Action = Action.READ) -> QuerySet[Domain]:
        """The domains of the orgs where the user may do ``action``."""
        return (
            Domain.objects.filter(org__in=self.orgs_for(request, action))
            .select_related("org")
            .order_by("org__slug", "slug")
        )

    def require(self, request: HttpRequest, action: Action, obj: Any = None) -> None:
        """PermissionDenied (403) unless the user may do ``action`` (in ``obj``'s org)."""
        if not self.allows(request, action, obj):
            raise PermissionDenied

    @staticmethod
    def scope_of(obj: Any) -> Scope:
        return Scope(obj.org_id, obj.domain_id)


class AuditAdmin(OperatorAdmin):
    """An append-only audit model in the admin: seen by those its ``view_action`` lets,
    never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def admin_context(model_admin: admin.ModelAdmin, request: HttpRequest, **extra: Any) -> dict:
    """What admin templates need for breadcrumbs and the sidebar."""
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "app_label": model_admin.model._meta.app_label,
        "has_view_permission": model_admin.has_view_permission(request),
        **extra,
    }


def deletion_summary(
    model_admin: OrgRestrictedAdmin, objs: Any, request: HttpRequest, *, records_of: str = ""
) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
    """``get_deleted_objects`` for an org, domain or knowledge base: counts, not rows.

    Django's version lists every related row (a million records on one page) and asks
    for delete permissions on each related model (observations are read-only, so no one
    could delete an org). Here the policy decides on the objects themselves, and their
    memory is shown as a count: ``delete_model`` erases it through the forget service
    first and answers with the erasure receipt.
    """
    opts = model_admin.model._meta
    field = records_of or opts.model_name
    to_delete: list[Any] = []
    perms_needed: set[str] = set()
    total = 0
    for obj in objs:
        if not model_admin.has_delete_permission(request, obj):
            perms_needed.add(str(opts.verbose_name))
        count = MemoryRecord.unscoped.filter(**{field: obj}).count()
        total += count
        to_delete.append(f"{capfirst(opts.verbose_name)}: {obj}")
        to_delete.append(
            [
                ngettext(
                    "%(count)d memory record, erased first (with an erasure receipt)",
                    "%(count)d memory records, erased first (with an erasure receipt)",
                    count,
                )
                % {"count": count}
            ]
        )
    model_count = {
        str(opts.verbose_name_plural): len(to_delete) // 2,
        str(_("memory records")): total,
    }
    # What else goes with them (keys, memberships, domains, ...), one level deep, counted.
    pks = [obj.pk for obj in objs]
    for relation in opts.get_fields(include_hidden=True):
        related = getattr(relation, "related_model", None)
        if (
            not (relation.auto_created and relation.one_to_many)
            or related is None
            or related is MemoryRecord
        ):
            continue
        count = related._base_manager.filter(**{f"{relation.field.name}__in": pks}).count()
        if count:
            name = str(related._meta.verbose_name_plural)
            model_count[name] = model_count.get(name, 0) + count
    return to_delete, model_count, perms_needed, []
