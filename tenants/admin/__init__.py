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

from .access import (
    MAX_SEARCH_LENGTH,
    MAX_SEARCH_WORDS,
    AccessAdminMixin,
    AccessClass,
    AdminAccess,
    AdminExtension,
    ExtensibleAdmin,
    ExtensionClass,
    OrgRestrictedAdmin,
    admin_access,
    extend_admin,
    is_active_superuser,
    preselect_single_choice,
    register_access,
    too_many_words,
)
from .admins import (
    ApiKeyAdmin,
    DomainAdmin,
    DomainInline,
    KeyStateFilter,
    MemberChoices,
    MembershipAdmin,
    MembershipInline,
    MembersOnlyRawIdWidget,
    OrgAdmin,
    OrgInline,
)

__all__ = [
    "MAX_SEARCH_LENGTH",
    "MAX_SEARCH_WORDS",
    "AccessAdminMixin",
    "AccessClass",
    "AdminAccess",
    "AdminExtension",
    "ApiKeyAdmin",
    "DomainAdmin",
    "DomainInline",
    "ExtensibleAdmin",
    "ExtensionClass",
    "KeyStateFilter",
    "MemberChoices",
    "MembersOnlyRawIdWidget",
    "MembershipAdmin",
    "MembershipInline",
    "OrgAdmin",
    "OrgInline",
    "OrgRestrictedAdmin",
    "admin_access",
    "extend_admin",
    "is_active_superuser",
    "preselect_single_choice",
    "register_access",
    "too_many_words",
]
