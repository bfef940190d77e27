"""``{% memoryhub_home %}``: the operator's home on the admin index and memoryhub's app page."""

from __future__ import annotations

from typing import Any

from django import template

from .. import policy
from ..scope import operator_access
from ..services.overview import overview

register = template.Library()


@register.inclusion_tag("admin/memoryhub/includes/home.html", takes_context=True)
def memoryhub_home(context: dict[str, Any]) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_active or not user.is_staff:
        return {"show": False}
    principal = policy.principal_for_user(user)
    if not policy.allows_anywhere(principal, policy.Action.READ):
        return {"show": False}
    with operator_access():
        return {"show": True, **overview(principal)}
