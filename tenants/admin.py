"""Admin for orgs, domains, memberships and API keys, scoped to the operator's orgs."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from rest_framework_api_key.models import APIKey

from .models import ApiKey, Domain, Membership, Org

if admin.site.is_registered(APIKey):
    # The library's concrete model is unused; memoryhub's keys are tenants.ApiKey.
    admin.site.unregister(APIKey)


class OrgRestrictedAdmin(admin.ModelAdmin):
    """Shows a staff user only rows of orgs they are a member of (all for superusers)."""

    org_field = "org"

    def visible_orgs(self, request: HttpRequest) -> QuerySet[Org]:
        return Org.objects.visible_to(request.user)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.org_field}__in": self.visible_orgs(request)})

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.related_model is Org:
            kwargs["queryset"] = self.visible_orgs(request)
        elif db_field.related_model is Domain:
            kwargs["queryset"] = Domain.objects.filter(
                org__in=self.visible_orgs(request)
            ).select_related("org")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class DomainInline(admin.TabularInline):
    model = Domain
    extra = 0
    fields = ["slug", "name", "created_at"]
    readonly_fields = ["created_at"]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


@admin.register(Org)
class OrgAdmin(OrgRestrictedAdmin):
    org_field = "pk"
    list_display = ["slug", "name", "external_ref", "is_active", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["slug", "name", "external_ref"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [DomainInline, MembershipInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Org]:
        return Org.objects.visible_to(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser


@admin.register(Domain)
class DomainAdmin(OrgRestrictedAdmin):
    list_display = ["slug", "name", "org", "created_at"]
    list_filter = [("org", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["org"]
    search_fields = ["slug", "name", "org__slug"]


@admin.register(Membership)
class MembershipAdmin(OrgRestrictedAdmin):
    list_display = ["user", "org", "role", "created_at"]
    list_filter = ["role", ("org", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["user", "org"]
    raw_id_fields = ["user"]


@admin.register(ApiKey)
class ApiKeyAdmin(OrgRestrictedAdmin):
    list_display = (
        "prefix",
        "name",
        "org",
        "domain",
        "permission_list",
        "expiry_date",
        "revoked",
        "last_used_at",
        "created",
    )
    list_filter = (
        "revoked",
        "can_read",
        "can_write",
        "can_forget",
        ("org", admin.RelatedOnlyFieldListFilter),
    )
    list_select_related = ("org", "domain")
    search_fields = ("name", "prefix", "org__slug")
    fields = (
        "name",
        "org",
        "domain",
        ("can_read", "can_write", "can_forget"),
        "expiry_date",
        "revoked",
        "prefix",
        "last_used_at",
    )
    actions = ("revoke_keys",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        fields: tuple[str, ...] = ("prefix", "last_used_at")
        if obj is not None:
            fields += ("org",)
            if obj.revoked:
                fields += ("name", "domain", "revoked", "expiry_date")
        return fields

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
        count = queryset.filter(revoked=False).update(revoked=True)
        self.message_user(
            request,
            ngettext("Revoked %(count)d API key.", "Revoked %(count)d API keys.", count)
            % {"count": count},
            messages.SUCCESS,
        )
