"""Who may do what in the tenants admins, and how another app extends them: the access rule
(AdminAccess, register_access), the org-restricted base admin every admin here and
memoryhub's derive from, and admin extensions (extend_admin)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any, TypeVar

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.options import IS_POPUP_VAR
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils.text import smart_split

from ..models import Domain, Org

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
