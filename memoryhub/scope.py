"""The tenant scope of every memory read and write, and the guard that enforces it.

A :class:`Scope` is an ``(org, domain)`` pair, both required. ``0`` is a valid id;
``None`` (and anything that is not an integer id) is refused here, before it can reach
django-scopes, where a ``None`` dimension would silently mean "every tenant".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from django_scopes import scope as _django_scope
from django_scopes import scopes_disabled

if TYPE_CHECKING:
    from tenants.models import Domain

__all__ = ["Scope", "ScopeRequired", "operator_access", "tenant_scope"]


class ScopeRequired(PermissionError):
    """Raised when memory is touched without a complete tenant scope."""


@dataclass(frozen=True, slots=True)
class Scope:
    """An org and one of its domains: the tenant boundary of memory."""

    org_id: int
    domain_id: int

    def __post_init__(self) -> None:
        for field_name in ("org_id", "domain_id"):
            value = getattr(self, field_name)
            if value is None:
                raise ScopeRequired(f"Scope.{field_name} is required (got None).")
            if isinstance(value, bool) or not isinstance(value, int):
                raise ScopeRequired(
                    f"Scope.{field_name} must be an integer id, not {type(value).__name__}."
                )

    @classmethod
    def for_domain(cls, domain: Domain) -> Self:
        return cls(org_id=domain.org_id, domain_id=domain.pk)

    def key(self) -> str:
        """A stable string for cache keys and logs: ``org<id>:dom<id>``."""
        return f"org{self.org_id}:dom{self.domain_id}"

    def __str__(self) -> str:
        return self.key()


@contextmanager
def tenant_scope(scope: Scope) -> Iterator[Scope]:
    """Activate ``scope`` for the scoped managers of memoryhub's models.

    Inside, ``MemoryRecord.objects`` (and the other scoped managers) see only this org
    and domain; outside any scope they raise ``django_scopes.ScopeError``.
    """
    if not isinstance(scope, Scope):
        raise ScopeRequired(f"tenant_scope() needs a Scope, not {type(scope).__name__}.")
    with _django_scope(org=scope.org_id, domain=scope.domain_id):
        yield scope


def operator_access() -> scopes_disabled:
    """The explicit unscoped path for operator code (admin, erasure, sweeper).

    A context manager and decorator (django-scopes' ``scopes_disabled``).
    """
    return scopes_disabled()
