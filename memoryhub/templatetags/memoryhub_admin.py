"""``{% memoryhub_home %}``: the operator's home on the admin index and memoryhub's app
page; ``|when``: the one way memoryhub's admin pages show a date and time."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from django import template
from django.template.defaultfilters import date as date_filter
from django.utils.html import format_html

from .. import policy
from ..scope import operator_access
from ..services.overview import overview

register = template.Library()


@register.inclusion_tag("admin/memoryhub/includes/home.html", takes_context=True)
def memoryhub_home(context: dict[str, Any]) -> dict[str, Any]:
    """The operator home, once per page: memoryhub's app page shows it and then renders
    the index template, which may show it too (the site's own index does)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_active or not user.is_staff:
        return {"show": False}
    if getattr(request, "_memoryhub_home_shown", False):
        return {"show": False}
    principal = policy.principal_for_user(user)
    if not policy.allows_anywhere(principal, policy.Action.READ):
        return {"show": False}
    request._memoryhub_home_shown = True  # type: ignore[union-attr]
    with operator_access():
        return {"show": True, **overview(principal)}


@register.filter(expects_localtime=True)
def when_wrapped(value: datetime | None) -> str:
    """:func:`when` for a narrow column: its date and its time each kept on one line
    (the text is the same), so it takes two lines at most, not three."""
    if value in (None, ""):
        return ""
    return format_html(
        '<span class="mh-nowrap">{},</span> <span class="mh-nowrap">{}</span>',
        date_filter(value, "DATE_FORMAT"),
        date_filter(value, "TIME_FORMAT"),
    )


@register.filter(expects_localtime=True)
def when(value: datetime | date | None) -> str:
    """A date and time as Django's admin shows them in its lists and forms
    (``DATETIME_FORMAT``; a date alone in ``DATE_FORMAT``), so every page agrees."""
    if value in (None, ""):
        return ""
    if isinstance(value, datetime):
        return date_filter(value, "DATETIME_FORMAT")
    return date_filter(value, "DATE_FORMAT")
