"""The admins of orgs, domains, memberships and API keys, registered on the default admin
site."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from rest_framework_api_key.models import APIKey

from ..models import ApiKey, Domain, Membership, Org
from .access import AccessAdminMixin, ExtensibleAdmin, OrgRestrictedAdmin, admin_access

if admin.site.is_registered(APIKey):
    # The library's concrete model is unused; the keys are tenants.ApiKey.
    admin.site.unregister(APIKey)


class OrgInline(AccessAdminMixin, admin.TabularInline):
    """An inline on the org page: permissions from the role in that org.

    Shown while the org has at most ``max_rows`` of them: an inline form holds every
    row (thousands of rows are a page no one can save); past that the org page links to
    their own change list instead.
    """

    max_rows = 100

    def org_id_of(self, obj: Any) -> int | None:
        return getattr(obj, "pk", None)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.allows(request, self.add_action or self.change_action, obj)


class DomainInline(OrgInline):
    model = Domain
    extra = 0
    fields = ["slug", "name", "created_at"]
    readonly_fields = ["created_at"]
    change_action = "manage_org"
    # A domain is deleted from its own page, through the erasure path, never here.
    can_delete = False


class MembersOnlyRawIdWidget(ForeignKeyRawIdWidget):
    """A raw-id user field that names only users its queryset holds: a form posted back
    with another user's id (an error re-render) shows the id, never that user's name."""

    def __init__(self, rel: Any, admin_site: Any, allowed: QuerySet[Any], **kwargs: Any) -> None:
        super().__init__(rel, admin_site, **kwargs)
        self.allowed = allowed

    def label_and_url_for_value(self, value: Any) -> tuple[str, str]:
        try:
            shown = value is not None and self.allowed.filter(pk=value).exists()
        except (ValueError, TypeError, ValidationError):
            shown = False
        return super().label_and_url_for_value(value) if shown else ("", "")


class MemberChoices:
    """A membership's user is chosen among the users of the orgs where the requester
    manages members and the users of no org yet (a newcomer the site made an account
    for); every user, for a superuser. An owner never learns the names of another org's
    users, by the form, its widget or its errors, nor makes them members."""

    def member_choices(self, request: HttpRequest) -> QuerySet[Any]:
        users = get_user_model()._default_manager.all()
        if request.user.is_superuser:
            return users
        orgs = admin_access().orgs_allowing(request.user, "manage_members")
        return users.filter(Q(memberships__org__in=orgs) | Q(memberships__isnull=True)).distinct()

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "user":
            allowed = self.member_choices(request)
            kwargs["queryset"] = allowed
            kwargs["widget"] = MembersOnlyRawIdWidget(db_field.remote_field, admin.site, allowed)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]


class MembershipInline(MemberChoices, OrgInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]
    change_action = "manage_members"


@admin.register(Org)
class OrgAdmin(ExtensibleAdmin, OrgRestrictedAdmin):
    org_field = "pk"
    list_display = ["slug", "name", "external_ref", "is_active", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["slug", "name", "external_ref"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [DomainInline, MembershipInline]

    change_action = "manage_org"
    add_action = "create_org"
    delete_action = "delete_org"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Org]:
        return self.visible_orgs(request)

    def get_inlines(self, request: HttpRequest, obj: Any) -> list[Any]:
        """The inlines small enough to edit on this page (``OrgInline.max_rows``)."""
        return [inline for inline in self.inlines if obj is None or not self._too_many(inline, obj)]

    @staticmethod
    def _too_many(inline: Any, org: Org) -> bool:
        rows = inline.model._default_manager.filter(org=org)
        return bool(rows[: inline.max_rows + 1].count() > inline.max_rows)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        org = self.get_object(request, object_id)
        listed = []
        for inline in self.inlines:
            if org is not None and self._too_many(inline, org):
                opts = inline.model._meta
                url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
                listed.append((opts.verbose_name_plural, f"{url}?org__id__exact={org.pk}"))
        extra_context = {**(extra_context or {}), "listed_elsewhere": listed}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and not self.allows(request, "create_org"):
            # Suspending an org and linking it to the host's customer id are the site's
            # decisions (superusers), not the org owner's.
            fields += ["is_active", "external_ref"]
        return fields


@admin.register(Domain)
class DomainAdmin(ExtensibleAdmin, OrgRestrictedAdmin):
    list_display = ["slug", "name", "org", "created_at"]
    list_filter = [("org", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["org"]
    search_fields = ["slug", "name", "org__slug"]
    change_action = "manage_org"
    delete_action = "delete_domain"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None:
            fields.append("org")  # its memory stays in its org: a domain never moves
        return fields


@admin.register(Membership)
class MembershipAdmin(MemberChoices, ExtensibleAdmin, OrgRestrictedAdmin):
    list_display = ["user", "org", "role", "created_at"]
    list_filter = ["role", ("org", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["user", "org"]
    raw_id_fields = ["user"]
    change_action = "manage_members"


class KeyStateFilter(admin.SimpleListFilter):
    """Active keys (neither revoked nor expired), revoked keys, expired keys."""

    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("active", _("Active")), ("revoked", _("Revoked")), ("expired", _("Expired"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> QuerySet[ApiKey]:
        now = timezone.now()
        unexpired = Q(expiry_date__isnull=True) | Q(expiry_date__gt=now)
        if self.value() == "active":
            return queryset.filter(unexpired, revoked=False)
        if self.value() == "revoked":
            return queryset.filter(revoked=True)
        if self.value() == "expired":
            return queryset.filter(revoked=False, expiry_date__lte=now)
        return queryset


@admin.register(ApiKey)
class ApiKeyAdmin(ExtensibleAdmin, OrgRestrictedAdmin):
    list_display = (
        "prefix",
        "name_and_scope",
        "permission_list",
        "is_active",
        "expiry_date",
        "last_used_at",
    )
    list_filter = (
        KeyStateFilter,
        "can_read",
        "can_write",
        "can_forget",
        "can_export",
        ("org", admin.RelatedOnlyFieldListFilter),
    )
    list_select_related = ("org", "domain")
    search_fields = ("name", "prefix", "org__slug")
    fields = (
        "name",
        "org",
        "domain",
        ("can_read", "can_write", "can_forget", "can_export"),
        "expiry_date",
        "revoked",
        "prefix",
        "last_used_at",
    )
    actions = ("revoke_keys",)
    change_action = "manage_keys"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        fields: tuple[str, ...] = ("prefix", "last_used_at")
        if obj is not None:
            fields += ("org",)
            if obj.revoked:
                fields += ("name", "domain", "revoked", "expiry_date")
        return fields

    @admin.display(description=_("active"), boolean=True, ordering="-revoked")
    def is_active(self, obj: ApiKey) -> bool:
        """Whether the key still opens the API: neither revoked nor expired (a red
        "revoked: ✗" read as a fault for what is the good state)."""
        return not obj.revoked and not obj.has_expired

    @admin.display(description=_("name"), ordering="name")
    def name_and_scope(self, obj: ApiKey) -> str:
        """The key's name, and under it the org and domain it opens."""
        domain = obj.domain.slug if obj.domain is not None else _("every domain")
        return format_html(
            '{}<div class="mh-details">{} / {}</div>', obj.name, obj.org.slug, domain
        )

    @admin.display(description=_("permissions"))
    def permission_list(self, obj: ApiKey) -> str:
        return ", ".join(obj.permissions) or "—"

    def save_model(
        self, request: HttpRequest, obj: Any, form: Any = None, change: bool = False
    ) -> None:
        if change:
            obj.save()
            return
        key = ApiKey.objects.assign_key(obj)
        obj.save()
        messages.warning(
            request,
            format_html(
                "The API key for <strong>{}</strong> is "
                '<code id="new-api-key">{}</code> '
                '<button type="button" class="button" '
                "onclick=\"navigator.clipboard.writeText(document.getElementById('new-api-key')"
                '.textContent)">Copy</button> '
                "Store it now: it is shown only once.",
                obj.name,
                key,
            ),
        )

    @admin.action(description=_("Revoke selected API keys"), permissions=["change"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        queryset = self.allowed_rows(request, queryset, "manage_keys")
        count = queryset.filter(revoked=False).update(revoked=True)
        self.message_user(
            request,
            ngettext("Revoked %(count)d API key.", "Revoked %(count)d API keys.", count)
            % {"count": count},
            messages.SUCCESS,
        )
