"""Admin for orgs, domains, memberships and API keys, scoped to the operator's orgs.

tenants stands alone: it imports no app built on it. Another app extends these admins
in two ways rather than by registering them again:

* **Access** (:class:`AdminAccess`, installed with :func:`register_access`): who may do
  an action (``view_action``, ``change_action``... of each admin) in which org. Every
  permission, row list and choice here asks it. The default is Django's superuser rule:
  an active superuser may do everything, anyone else nothing. memoryhub installs its
  policy (``memoryhub.policy``: the membership role in a row's org is the permission).
* **Extensions** (:class:`AdminExtension`, registered with :func:`extend_admin`): more
  actions and hooks around deletion for the admin of one model (memoryhub erases an
  org's or a domain's memory before deleting it).

Both are registered from the other app's ``admin`` module, so a site without the admin
never loads them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any, TypeVar

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IS_POPUP_VAR
from django.contrib.admin.views.main import SEARCH_VAR
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import smart_split
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from rest_framework_api_key.models import APIKey

from .models import ApiKey, Domain, Membership, Org

if admin.site.is_registered(APIKey):
    # The library's concrete model is unused; the keys are tenants.ApiKey.
    admin.site.unregister(APIKey)


#: A change-list search is one ILIKE per word and searched field, all ANDed: thousands
#: of words keep the database busy however few the rows. A search box needs far fewer.
MAX_SEARCH_WORDS = 32
MAX_SEARCH_LENGTH = 1000


def too_many_words(search: str) -> bool:
    """Whether an admin search is longer than a person would type (see above)."""
    if len(search) > MAX_SEARCH_LENGTH:
        return True
    return next(islice(smart_split(search), MAX_SEARCH_WORDS, None), None) is not None


def preselect_single_choice(field: Any) -> Any:
    """A required choice of rows with exactly one option starts on it, not on a blank
    (a form of the only org or domain an operator has). Returns ``field``."""
    queryset = getattr(field, "queryset", None)
    if queryset is None or not field.required or field.initial is not None:
        return field
    only = list(queryset.order_by().values_list("pk", flat=True)[:2])
    if len(only) == 1:
        field.initial = only[0]
    return field


class AdminAccess:
    """Who may do what in which org, as every admin built here asks it.

    ``action`` is the name an admin declares: ``"read"`` (seeing rows), ``"manage_org"``,
    ``"manage_members"``, ``"manage_keys"``, ``"create_org"``, ``"delete_org"``,
    ``"delete_domain"``, and whatever names an app's own admins built on
    :class:`OrgRestrictedAdmin` declare. This default is Django's superuser rule: an
    active superuser may do everything, anyone else nothing. An app that decides access
    subclasses it and installs it with :func:`register_access`.
    """

    def allows(self, user: Any, action: str, org_id: int) -> bool:
        """Whether ``user`` may do ``action`` in org ``org_id``."""
        return is_active_superuser(user)

    def allows_anywhere(self, user: Any, action: str) -> bool:
        """Whether ``user`` may do ``action`` in at least one org (the admin index, the
        add button)."""
        return is_active_superuser(user)

    def orgs_allowing(self, user: Any, action: str) -> QuerySet[Org]:
        """The orgs in which ``user`` may do ``action`` (row lists and form choices)."""
        return Org.objects.all() if is_active_superuser(user) else Org.objects.none()


def is_active_superuser(user: Any) -> bool:
    """Whether ``user`` is a signed-in, active superuser (the default access's rule)."""
    return bool(
        getattr(user, "is_superuser", False)
        and getattr(user, "is_active", False)
        and getattr(user, "is_authenticated", False)
    )


_access = AdminAccess()

AccessClass = TypeVar("AccessClass", bound=type[AdminAccess])


def register_access(access_class: AccessClass) -> AccessClass:
    """Install an :class:`AdminAccess` subclass as the one every admin here asks (a class
    decorator, like ``@admin.register``). The last one installed decides."""
    global _access
    _access = access_class()
    return access_class


def admin_access() -> AdminAccess:
    """The installed :class:`AdminAccess` (the default until an app installs its own)."""
    return _access


class AccessAdminMixin:
    """Admin permissions asked of the installed :class:`AdminAccess`.

    ``view_action`` is what seeing a row needs in its org; ``change_action`` what
    adding, changing and deleting need (``add_action``/``delete_action`` override).
    Without an object, a permission holds if the user has the action in any org (the
    admin index and the add button); with one, in that object's org.
    """

    view_action: str = "read"
    change_action: str = "manage_org"
    add_action: str | None = None
    delete_action: str | None = None

    def orgs_for(self, request: HttpRequest, action: str) -> QuerySet[Org]:
        """The orgs in which the user may do ``action``."""
        return admin_access().orgs_allowing(request.user, action)

    def org_id_of(self, obj: Any) -> int | None:
        raise NotImplementedError

    def allows(self, request: HttpRequest, action: str, obj: Any = None) -> bool:
        access = admin_access()
        if obj is None:
            return access.allows_anywhere(request.user, action)
        org_id = self.org_id_of(obj)
        return org_id is not None and access.allows(request.user, action, org_id)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.allows(request, self.view_action)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.allows(request, self.view_action, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.allows(request, self.change_action, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.allows(request, self.delete_action or self.change_action, obj)


class OrgRestrictedAdmin(AccessAdminMixin, admin.ModelAdmin):
    """Shows a staff user only rows of orgs they are a member of (all for superusers),
    and lets them act on a row as their role in its org allows."""

    org_field = "org"

    def org_id_of(self, obj: Any) -> int | None:
        return obj.pk if self.org_field == "pk" else getattr(obj, f"{self.org_field}_id", None)

    def visible_orgs(self, request: HttpRequest) -> QuerySet[Org]:
        return self.orgs_for(request, self.view_action)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.org_field}__in": self.visible_orgs(request)})

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.allows(request, self.add_action or self.change_action)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        # New and changed rows may only point into orgs where the user may change them.
        orgs = self.orgs_for(request, self.change_action)
        if db_field.related_model is Org:
            kwargs["queryset"] = orgs
        elif db_field.related_model is Domain:
            kwargs["queryset"] = Domain.objects.filter(org__in=orgs).select_related("org")
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        return preselect_single_choice(field)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        problem = self.parameter_problem(request)
        if problem is not None:
            return HttpResponseBadRequest(problem, content_type="text/plain; charset=utf-8")
        return super().changelist_view(request, extra_context)

    def parameter_problem(self, request: HttpRequest) -> str | None:
        """What makes a change-list request unfit to run, naming the parameter: a NUL
        character in a parameter, a search longer than a person types, or a selected
        row whose id is no id of this model (Django's admin would hand each to the
        database, and answer with a 500 or keep it busy for minutes). An action with one
        bad id among good ones changes nothing."""
        for source in (request.GET, request.POST):
            for name, values in source.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    shown = name.replace("\x00", "\\x00")
                    return f"{shown}: NUL characters are not allowed. Nothing was changed."
        search = request.GET.get(SEARCH_VAR, "")
        if too_many_words(search):
            return (
                f"{SEARCH_VAR}: at most {MAX_SEARCH_WORDS} words and {MAX_SEARCH_LENGTH} "
                "characters."
            )
        if "action" in request.POST:
            for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                if not self.is_valid_pk(value):
                    return (
                        f"{helpers.ACTION_CHECKBOX_NAME}: {value[:100]!r} is not the id of a "
                        f"{self.model._meta.verbose_name}. Nothing was changed."
                    )
        return None

    def is_valid_pk(self, value: str) -> bool:
        """Whether ``value`` can be compared with this model's primary key in the database
        (its type, its range, its length)."""
        field = self.model._meta.pk
        if field is None or "\x00" in value:
            return False
        try:
            field.run_validators(field.to_python(value))
        except (ValidationError, ValueError, TypeError):
            return False
        return True

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        if "\x00" in str(object_id):  # no row's id; the admin shows "does not exist"
            return None
        return super().get_object(request, object_id, from_field)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        if "\x00" in search_term or too_many_words(search_term):  # autocomplete too
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)

    def allowed_rows(
        self, request: HttpRequest, queryset: QuerySet[Any], action: str
    ) -> QuerySet[Any]:
        """The rows of ``queryset`` in orgs where the user may do ``action`` (actions)."""
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.org_field}__in": self.orgs_for(request, action)})


class AdminExtension:
    """What another app adds to a tenants admin, asked at request time.

    tenants does not know what other apps keep in an org or a domain. An app that must
    act there (memoryhub erases an org's or a domain's memory, and deletes one only
    after erasing it) subclasses this and registers it with :func:`extend_admin`, so the
    admins stay the ones registered here. Every hook's default leaves the admin as it is.
    """

    def actions(self, model_admin: Any, request: HttpRequest) -> Sequence[Callable[..., Any]]:
        """More change-list actions (``@admin.action`` callables taking ``model_admin,
        request, queryset``): only those the user may run."""
        return []

    def deleted_objects(self, model_admin: Any, objs: Any, request: HttpRequest) -> Any:
        """What the deletion page lists, as ``ModelAdmin.get_deleted_objects`` returns
        it; ``None`` for the admin's own list."""
        return None

    def before_delete(self, model_admin: Any, request: HttpRequest, obj: Any) -> None:
        """Called before ``obj`` is deleted, on its own or in a bulk deletion."""

    def after_bulk_delete(self, model_admin: Any, request: HttpRequest, objs: list[Any]) -> None:
        """Called after the delete action deleted ``objs``."""

    def response_delete(
        self, model_admin: Any, request: HttpRequest, obj_display: str, obj_id: Any
    ) -> HttpResponse | None:
        """The page shown after one object was deleted; ``None`` for the admin's own."""
        return None


_extensions: defaultdict[type[Model], list[AdminExtension]] = defaultdict(list)

ExtensionClass = TypeVar("ExtensionClass", bound=type[AdminExtension])


def extend_admin(*models: type[Model]) -> Callable[[ExtensionClass], ExtensionClass]:
    """Register an :class:`AdminExtension` subclass for the admins of ``models``, as
    ``@admin.register`` registers a ModelAdmin (from the app's ``admin`` module, so a
    site without the admin never loads it)."""

    def register(extension_class: ExtensionClass) -> ExtensionClass:
        extension = extension_class()
        for model in models:
            _extensions[model].append(extension)
        return extension_class

    return register


class ExtensibleAdmin:
    """A tenants ModelAdmin that asks the extensions registered for its model.

    With an extension, the delete action deletes its rows one by one, so each row's
    ``before_delete`` runs as it does when a row is deleted from its own page.
    """

    def extensions(self) -> list[AdminExtension]:
        return _extensions.get(self.model, [])  # type: ignore[attr-defined]

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions: dict[str, Any] = super().get_actions(request)  # type: ignore[misc]
        if self.actions is None or IS_POPUP_VAR in request.GET:  # type: ignore[attr-defined]
            return actions  # no actions at all, as Django's own
        for extension in self.extensions():
            for function in extension.actions(self, request):
                action = self.get_action(function)  # type: ignore[attr-defined]
                actions[action[1]] = action
        return actions

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        for extension in self.extensions():
            listed = extension.deleted_objects(self, objs, request)
            if listed is not None:
                return listed
        return super().get_deleted_objects(objs, request)  # type: ignore[misc]

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        for extension in self.extensions():
            extension.before_delete(self, request, obj)
        super().delete_model(request, obj)  # type: ignore[misc]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        extensions = self.extensions()
        if not extensions:
            super().delete_queryset(request, queryset)  # type: ignore[misc]
            return
        objs = list(queryset)
        for obj in objs:
            self.delete_model(request, obj)
        for extension in extensions:
            extension.after_bulk_delete(self, request, objs)

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> Any:
        for extension in self.extensions():
            response = extension.response_delete(self, request, obj_display, obj_id)
            if response is not None:
                return response
        return super().response_delete(request, obj_display, obj_id)  # type: ignore[misc]


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
