"""Who may do what to which scope: the one place memoryhub decides access.

Every door asks this module: the REST API (``api/permissions.py``), every admin view,
action, inline and custom page (``tenants/admin.py``, ``memoryhub/admin/``), the
management commands, and the services for the read-only rule. Nothing else decides.

Principals
    * :class:`KeyPrincipal`: an API key, bound to its org (and optionally one domain),
      with the ``read`` / ``write`` / ``forget`` permissions it was given.
    * :class:`UserPrincipal`: a staff user of the admin (or a browsable-API session).
      A superuser may do everything; anyone else has, per org, the actions of their
      membership role (:data:`ROLE_ACTIONS`): the role *is* the permission, no Django
      model permissions need to be granted by hand.
    * :data:`SYSTEM`: operator code (management commands, the sweeper, a shell), and a
      worker's task acting for whoever queued it (:func:`principal_for_task`).
    * :class:`AgentPrincipal`: an agent acting through the host's own code
      (``memoryhub.sources``, consolidation's extractor, a direct call of a service:
      :data:`AGENT`); what it may do was decided by the code acting for it.

Every door passes its principal to the services, which name it in observations, history
rows and receipts by :func:`actor_label` (``api-key:<prefix>``, ``mcp:<prefix>``,
``user:<name>``, ``admin:<name>``, ``system``, ...), the one place that name is made.

Read-only knowledge bases are a second rule, about the target rather than the actor:
:func:`refuses_change` says whether a change reaches a read-only knowledge base. Agents
(API keys, ``memoryhub.sources``) may not write, update, delete or forget in one, except
for a data subject's erasure (a subject's namespace, :func:`is_subject_erasure`), which
reaches every knowledge base: personal data in a curated knowledge base is still the
subject's. Whoever may curate in the knowledge base's org is not bound
(:func:`may_bypass_read_only`): operators and owners (in the admin), superusers and
operator code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from tenants.models import Membership, Org

from .conf import memoryhub_settings
from .exceptions import PolicyDenied

if TYPE_CHECKING:
    from datetime import datetime

    from tenants.models import ApiKey, OrgQuerySet

    from .models import KnowledgeBase
    from .scope import Scope

__all__ = [
    "AGENT",
    "KEY_ACTIONS",
    "ROLE_ACTIONS",
    "SYSTEM",
    "Action",
    "AgentPrincipal",
    "KeyPrincipal",
    "Principal",
    "SystemPrincipal",
    "UserPrincipal",
    "actor_label",
    "allows",
    "allows_anywhere",
    "ends_life_early",
    "is_subject_erasure",
    "may_bypass_read_only",
    "orgs_allowing",
    "principal_for_key",
    "principal_for_task",
    "principal_for_user",
    "refuses_change",
    "require",
    "require_forget_to_expire",
]


class Action(StrEnum):
    """What a principal may ask to do."""

    #: Query, list and get records, list knowledge bases, export, playground, observations.
    READ = "read"
    #: Write items (upsert by key, dedupe by content).
    WRITE = "write"
    #: Change one record by id.
    UPDATE = "update"
    #: Forget by id, key, knowledge base, the shared namespace, or the whole domain.
    FORGET = "forget"
    #: Erase a data subject: forget a non-shared namespace (GDPR Art. 17).
    ERASE_SUBJECT = "erase_subject"
    #: Curate knowledge bases in the admin (read-only ones included) and their records.
    CURATE = "curate"
    #: Import a file into a knowledge base, or an org's archive.
    IMPORT = "import"
    #: Export memory whole: a data subject's access export, an org's archive.
    EXPORT = "export"
    #: Send records back to be embedded again.
    REEMBED = "reembed"
    #: Create, change and revoke the org's API keys.
    MANAGE_KEYS = "manage_keys"
    #: Add, change and remove the org's members and their roles.
    MANAGE_MEMBERS = "manage_members"
    #: Change the org's name and settings; add and rename its domains.
    MANAGE_ORG = "manage_org"
    #: Delete a domain (its memory is erased first).
    DELETE_DOMAIN = "delete_domain"
    #: Delete the org (its memory is erased first).
    DELETE_ORG = "delete_org"
    #: Create a new org (superusers only: an org has no members before it exists).
    CREATE_ORG = "create_org"


#: What each API key permission grants.
KEY_ACTIONS: dict[str, frozenset[Action]] = {
    "read": frozenset({Action.READ}),
    "write": frozenset({Action.WRITE, Action.UPDATE}),
    "forget": frozenset({Action.FORGET, Action.ERASE_SUBJECT}),
    "export": frozenset({Action.EXPORT}),
}

_VIEWER = frozenset({Action.READ})
_OPERATOR = _VIEWER | {
    Action.WRITE,
    Action.UPDATE,
    Action.FORGET,
    Action.ERASE_SUBJECT,
    Action.CURATE,
    Action.IMPORT,
    Action.EXPORT,
    Action.REEMBED,
    Action.MANAGE_KEYS,
}
_OWNER = _OPERATOR | {
    Action.MANAGE_MEMBERS,
    Action.MANAGE_ORG,
    Action.DELETE_DOMAIN,
    Action.DELETE_ORG,
}
#: What each membership role grants in its org (``tenants.Membership.Role`` values).
ROLE_ACTIONS: dict[str, frozenset[Action]] = {
    "viewer": _VIEWER,
    "operator": _OPERATOR,
    "owner": _OWNER,
}
_EVERYTHING = frozenset(Action)
#: What an agent acting through the host's code may do: what all of a key's permissions
#: grant.
_AGENT = frozenset().union(*KEY_ACTIONS.values())


@dataclass(frozen=True, slots=True)
class KeyPrincipal:
    """An API key: its org, its bound domain (``None``: every domain) and permissions."""

    org_id: int
    domain_id: int | None
    permissions: frozenset[str]
    label: str = ""

    def actions(self, org_id: int, domain_id: int | None = None) -> frozenset[Action]:
        if org_id != self.org_id:
            return frozenset()
        if self.domain_id is not None and domain_id is not None and domain_id != self.domain_id:
            return frozenset()
        granted: set[Action] = set()
        for permission in self.permissions:
            granted |= KEY_ACTIONS.get(permission, frozenset())
        return frozenset(granted)


@dataclass(slots=True)
class UserPrincipal:
    """A Django user; their roles are read once (one query) and kept for the request.
    ``door`` names them as an actor: ``user:<name>`` (the API's sessions),
    ``admin:<name>`` (the admin)."""

    user: Any
    _roles: dict[int, str] | None = field(default=None, repr=False)
    door: str = "user"

    @property
    def is_superuser(self) -> bool:
        return bool(getattr(self.user, "is_superuser", False)) and self._is_active

    @property
    def _is_active(self) -> bool:
        return bool(getattr(self.user, "is_active", False)) and bool(
            getattr(self.user, "is_authenticated", False)
        )

    @property
    def label(self) -> str:
        if not getattr(self.user, "is_authenticated", False):
            return ""
        return f"{self.door}:{self.user.get_username()}"

    def roles(self) -> dict[int, str]:
        """``{org id: role}`` of the user's memberships (of active users only)."""
        if self._roles is None:
            if not self._is_active or getattr(self.user, "pk", None) is None:
                self._roles = {}
            else:
                self._roles = dict(
                    Membership.objects.filter(user_id=self.user.pk).values_list("org_id", "role")
                )
        return self._roles

    def actions(self, org_id: int, domain_id: int | None = None) -> frozenset[Action]:
        if self.is_superuser:
            return _EVERYTHING
        return ROLE_ACTIONS.get(self.roles().get(org_id, ""), frozenset())

    def org_ids_allowing(self, action: Action) -> list[int]:
        return [
            org_id
            for org_id, role in self.roles().items()
            if action in ROLE_ACTIONS.get(role, frozenset())
        ]


@dataclass(frozen=True, slots=True)
class SystemPrincipal:
    """Operator code run by whoever runs the process: commands, tasks, a shell."""

    label: str = "system"

    def actions(self, org_id: int, domain_id: int | None = None) -> frozenset[Action]:
        return _EVERYTHING


@dataclass(frozen=True, slots=True)
class AgentPrincipal:
    """An agent acting through the host's own code: bound by the read-only rule, with
    the actions of a key that has every permission, in any org (the code acting for it
    checked what it may do)."""

    label: str = ""

    def actions(self, org_id: int, domain_id: int | None = None) -> frozenset[Action]:
        return _AGENT


Principal = KeyPrincipal | UserPrincipal | SystemPrincipal | AgentPrincipal
SYSTEM = SystemPrincipal()
#: An unnamed agent: who acts when a service is called without a principal.
AGENT = AgentPrincipal()


def principal_for_key(api_key: ApiKey, *, door: str = "api-key") -> KeyPrincipal:
    """The key's principal, named ``<door>:<prefix>`` (``api-key``, or ``mcp``)."""
    return KeyPrincipal(
        org_id=api_key.org_id,
        domain_id=api_key.domain_id,
        permissions=frozenset(api_key.permissions),
        label=f"{door}:{api_key.prefix}",
    )


def principal_for_user(user: Any, *, door: str = "user") -> UserPrincipal:
    """The user's principal, cached on the user object (one membership query a request,
    whichever door names them)."""
    cached = getattr(user, "_memoryhub_principal", None)
    if not isinstance(cached, UserPrincipal) or cached.user is not user:
        cached = None
    if cached is not None and cached.door == door:
        return cached
    principal = UserPrincipal(user, door=door)
    if cached is not None:
        principal._roles = cached._roles
    with contextlib.suppress(AttributeError):  # an object that refuses attributes
        user._memoryhub_principal = principal
    return principal


def actor_label(principal: Principal) -> str:
    """How ``principal`` is named where memoryhub records who acted (observations,
    history rows, receipts, import jobs, signals)."""
    return principal.label


def principal_for_task(label: str) -> SystemPrincipal:
    """Who a worker's task acts for: the principal that queued it, by its
    :func:`actor_label` (a task's arguments are plain values). The task runs as operator
    code under that name: queueing it was the decision, made by a principal the door
    authorised (an operator deleting a knowledge base, undoing or running an import)."""
    return SystemPrincipal(label=label)


def allows(
    principal: Principal, action: Action, *, org_id: int, domain_id: int | None = None
) -> bool:
    """Whether ``principal`` may do ``action`` in this org (and domain, if given)."""
    return action in principal.actions(org_id, domain_id)


def require(principal: Principal, action: Action, scope: Scope) -> None:
    """Raise :class:`~memoryhub.exceptions.PolicyDenied` unless ``principal`` may do
    ``action`` in ``scope``."""
    if not allows(principal, action, org_id=scope.org_id, domain_id=scope.domain_id):
        raise PolicyDenied(action)


def orgs_allowing(principal: Principal, action: Action) -> OrgQuerySet:
    """The orgs in which ``principal`` may do ``action`` (for admin lists and choices)."""
    if isinstance(principal, SystemPrincipal):
        return Org.objects.all()
    if isinstance(principal, AgentPrincipal):
        return Org.objects.all() if action in _AGENT else Org.objects.none()
    if isinstance(principal, KeyPrincipal):
        allowed = action in principal.actions(principal.org_id)
        return Org.objects.filter(pk=principal.org_id) if allowed else Org.objects.none()
    if principal.is_superuser:
        return Org.objects.all()
    return Org.objects.filter(pk__in=principal.org_ids_allowing(action))


def allows_anywhere(principal: Principal, action: Action) -> bool:
    """Whether ``principal`` may do ``action`` in at least one org."""
    if isinstance(principal, SystemPrincipal):
        return True
    if isinstance(principal, AgentPrincipal):
        return action in _AGENT
    if isinstance(principal, KeyPrincipal):
        return action in principal.actions(principal.org_id)
    return principal.is_superuser or bool(principal.org_ids_allowing(action))


# --- what a change does ---------------------------------------------------------------


def ends_life_early(current: datetime | None, new: datetime | None) -> bool:
    """Whether setting an existing record's expiry from ``current`` to ``new`` ends its
    life sooner (an expiry where it had none, or an earlier one): the sweeper then
    deletes it, so the change is a forget, whatever the door calls it."""
    return new is not None and (current is None or new < current)


def require_forget_to_expire(
    principal: Principal,
    scope: Scope,
    current: datetime | None,
    new: datetime | None,
    *,
    field: str = "expires_at",
) -> None:
    """Raise :class:`~memoryhub.exceptions.PolicyDenied` when a change of an existing
    record's expiry ends its life early (:func:`ends_life_early`) and ``principal`` may
    not forget in ``scope``. A write may set an expiry only on the records it creates."""
    if not ends_life_early(current, new):
        return
    if not allows(principal, Action.FORGET, org_id=scope.org_id, domain_id=scope.domain_id):
        raise PolicyDenied(
            Action.FORGET,
            f"Shortening a record's life ({field}) forgets it: this credential lacks the"
            " forget permission.",
        )


# --- the read-only rule -------------------------------------------------------------------


def is_subject_erasure(*, namespace: str | None, key: str | None, everything: bool) -> bool:
    """A forget that erases a data subject: a whole namespace (not one key of it) that
    starts with one of ``SUBJECT_NAMESPACE_PREFIXES`` (``None``: any non-shared one).

    The prefixes keep curated content that an operator filed under a namespace of its
    own (``faq``) out of an agent's reach, while ``user:alice`` is erased everywhere.
    """
    if namespace is None or namespace == "" or key is not None or everything:
        return False
    prefixes = memoryhub_settings.SUBJECT_NAMESPACE_PREFIXES
    return prefixes is None or namespace.startswith(tuple(prefixes))


def may_bypass_read_only(principal: Principal, org_id: int) -> bool:
    """Whether the read-only rule leaves ``principal`` free in org ``org_id``: whoever
    may curate there (the operator and owner roles, superusers, operator code); never
    an API key or an agent."""
    return Action.CURATE in principal.actions(org_id)


def refuses_change(
    knowledge_bases: Iterable[KnowledgeBase],
    *,
    principal: Principal,
    subject_erasure: bool = False,
) -> list[KnowledgeBase]:
    """The read-only knowledge bases among ``knowledge_bases`` that refuse this change
    by ``principal``.

    Whoever may curate in a knowledge base's org is not bound
    (:func:`may_bypass_read_only`); a data subject's erasure reaches every knowledge
    base.
    """
    if subject_erasure:
        return []
    return [
        knowledge_base
        for knowledge_base in knowledge_bases
        if knowledge_base.read_only and not may_bypass_read_only(principal, knowledge_base.org_id)
    ]
