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

from tenants.models import ApiKey, Domain, Membership, Org

from .. import observe
from ..models import Observation
from ..scope import Scope
from .authentication import request_api_key

READ, WRITE, FORGET = "read", "write", "forget"


class DomainNotFound(exceptions.NotFound):
    default_detail = _("No such domain.")
    default_code = "domain_not_found"


class MissingPermission(exceptions.PermissionDenied):
    default_code = "permission_denied"


def _session_orgs(request: Request) -> Any:
    return Org.objects.visible_to(request.user).filter(is_active=True)


def _session_permissions(request: Request, org: Org) -> set[str]:
    if request.user.is_superuser:
        return {READ, WRITE, FORGET}
    user_id = request.user.pk
    if user_id is None:
        return set()
    membership = Membership.objects.filter(user__pk=user_id, org=org).first()
    if membership is None:
        return set()
    if membership.role == Membership.Role.VIEWER:
        return {READ}
    return {READ, WRITE, FORGET}


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
    api_key = request_api_key(request)
    if api_key is not None:
        return f"api-key:{api_key.prefix}"
    user = getattr(request, "user", None)
    return f"user:{user.get_username()}" if user is not None and user.is_authenticated else ""


def resolve_domain(request: Request, slug: str, permission: str) -> Scope:
    """The caller's scope for domain ``slug``, checking ``permission``; 404/403 otherwise."""
    api_key = request_api_key(request)
    if api_key is not None:
        bound = api_key.domain  # loaded with the key
        if bound is not None and bound.slug == slug:
            domain: Domain | None = bound
        else:
            domain = Domain.objects.filter(org_id=api_key.org_id, slug=slug).first()
        if domain is None:
            raise _refuse(request, api_key.org_id, "not a domain of the key's org")
        if not api_key.covers_domain(domain):
            raise _refuse(request, api_key.org_id, "outside the key's domain")
        granted = set(api_key.permissions)
    else:
        org_slug = request.query_params.get("org")
        orgs = _session_orgs(request)
        if org_slug is not None:
            orgs = orgs.filter(slug=org_slug)
        candidates = list(Domain.objects.filter(org__in=orgs, slug=slug).select_related("org")[:2])
        if len(candidates) != 1:
            if len(candidates) > 1:
                raise exceptions.ValidationError(
                    {"org": ["Several of your orgs have this domain; add ?org=<slug>."]}
                )
            raise DomainNotFound()
        domain = candidates[0]
        granted = _session_permissions(request, domain.org)
    if permission not in granted:
        raise MissingPermission(f"This credential lacks the {permission} permission.")
    return Scope.for_domain(domain)


class IsApiKeyOrStaff(permissions.BasePermission):
    """An API key, or a logged-in staff user (the browsable API)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if isinstance(request.auth, ApiKey):
            return True
        user = request.user
        return bool(user and user.is_authenticated and user.is_staff)
