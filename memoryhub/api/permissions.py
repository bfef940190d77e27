"""Who may act on which domain: the API key (or a staff session) decides, never the body.

``resolve_domain`` turns the URL's domain slug into a :class:`Scope` for the caller. A
domain of another org, or outside a domain-bound key, does not exist for the caller: 404,
and a ``scope.refused`` observation for the key's org.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions, permissions
from rest_framework.request import Request

from tenants.models import ApiKey, Domain

from .. import observe, policy
from ..exceptions import PolicyDenied
from ..models import Observation
from ..scope import Scope
from .authentication import ApiKeyUser, request_api_key


class DomainNotFound(exceptions.NotFound):
    default_detail = _("No such domain.")
    default_code = "domain_not_found"


class MissingPermission(exceptions.PermissionDenied):
    default_code = "permission_denied"


def request_principal(request: Request) -> policy.Principal:
    """The policy principal of a request: its API key, or its (staff) user."""
    api_key = request_api_key(request)
    if api_key is not None:
        principal = getattr(request, "_memoryhub_principal", None)
        if principal is None:
            user = getattr(request, "user", None)
            door = user.door if isinstance(user, ApiKeyUser) else "api-key"
            principal = policy.principal_for_key(api_key, door=door)
            request._memoryhub_principal = principal  # type: ignore[attr-defined]
        return principal
    return policy.principal_for_user(request.user)


def _refuse(request: Request, org_id: int, reason: str) -> DomainNotFound:
    observe.record(
        Observation.Kind.SCOPE_REFUSED,
        org_id=org_id,
        count=1,
        payload={"path": request.path[:200], "reason": reason},
        actor=actor(request),
    )
    return DomainNotFound()


def actor(request: Request) -> str:
    """Who acts: ``api-key:<prefix>`` (``mcp:<prefix>`` through the MCP door), or
    ``user:<username>`` (:func:`memoryhub.policy.actor_label` of the request's
    principal)."""
    return policy.actor_label(request_principal(request))


def resolve_domain(request: Request, slug: str, action: policy.Action) -> Scope:
    """The caller's scope for domain ``slug``, if the policy lets the caller do ``action``
    there; 404 for a domain the caller cannot see, 403 for a missing permission."""
    api_key = request_api_key(request)
    if api_key is not None:
        return _key_scope(request, api_key, slug, action)
    org_slug = request.query_params.get("org")
    principal = request_principal(request)
    orgs = policy.orgs_allowing(principal, policy.Action.READ).active()
    if org_slug is not None:
        orgs = orgs.filter(slug=org_slug)
    candidates = list(Domain.objects.filter(org__in=orgs, slug=slug).select_related("org")[:2])
    if len(candidates) != 1:
        if len(candidates) > 1:
            raise exceptions.ValidationError(
                {"org": ["Several of your orgs have this domain; add ?org=<slug>."]}
            )
        raise DomainNotFound()
    scope = Scope.for_domain(candidates[0])
    require(request, action, scope)
    return scope


def require(request: Request, action: policy.Action, scope: Scope) -> None:
    """403 ``permission_denied`` unless the policy lets the caller do ``action`` here."""
    try:
        policy.require(request_principal(request), action, scope)
    except PolicyDenied as exc:
        raise MissingPermission(str(exc)) from None


def _key_scope(request: Request, api_key: ApiKey, slug: str, action: policy.Action) -> Scope:
    if api_key.url_domain is not None and api_key.url_domain[0] == slug:
        domain_id = api_key.url_domain[1]  # read with the key, in the same query
    else:
        domain_id = (
            Domain.objects.filter(org_id=api_key.org_id, slug=slug)
            .values_list("pk", flat=True)
            .first()
        )
    # Only the key's org's domains are looked up: another org's domain does not exist.
    if domain_id is None:
        raise _refuse(request, api_key.org_id, "not a domain of the key's org")
    if not api_key.covers_domain(api_key.org_id, domain_id):
        raise _refuse(request, api_key.org_id, "outside the key's domain")
    scope = Scope(org_id=api_key.org_id, domain_id=domain_id)
    require(request, action, scope)
    return scope


class IsApiKeyOrStaff(permissions.BasePermission):
    """An API key, or a logged-in staff user (the browsable API)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if isinstance(request.auth, ApiKey):
            return True
        user = request.user
        return bool(user and user.is_authenticated and user.is_staff)
