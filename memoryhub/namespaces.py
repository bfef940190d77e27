"""Namespaces of a host project's own users: one rule, used by the host's code and by
the admin, so a person's memory is always found (and erased) under the same name."""

from __future__ import annotations

from typing import Any

from .conf import memoryhub_settings

__all__ = ["for_user"]


def for_user(user: Any) -> str:
    """The namespace of ``user``'s memory: ``MEMORYHUB["USER_NAMESPACE"]`` formatted
    with the user's ``pk`` and ``username`` (default ``"user:{pk}"``)."""
    template = memoryhub_settings.USER_NAMESPACE
    return str(template).format(pk=user.pk, username=user.get_username())
