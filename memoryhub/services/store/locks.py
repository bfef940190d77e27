"""Advisory locks: how writers and erasures of the same data serialise.

PostgreSQL's two-key advisory locks take two ``int4``: the first key is a lock's class
(a negative constant such as :data:`DOMAIN_LOCK_CLASS`, or a knowledge base's id, which
is positive), the second an id of the thing locked.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from ...models import KnowledgeBase
from ...scope import Scope

__all__ = ["DOMAIN_LOCK_CLASS", "INT4_MAX", "int4_key", "lock_domain", "lock_namespaces"]

INT4_MAX = 2_147_483_647

#: The first key of the domain-wide writer lock (namespace locks use knowledge base ids,
#: which are positive, so the two never meet).
DOMAIN_LOCK_CLASS = -1


def int4_key(pk: int) -> int:
    """``pk`` (a ``bigint`` id) as an ``int4`` advisory-lock key. Two ids that fold to
    the same key share one lock: they wait for each other more than they need to, never
    less."""
    return pk % INT4_MAX


def lock_domain(scope: Scope, *, exclusive: bool = False) -> None:
    """The domain's writer lock: writes and namespace erasures take it shared, erasures
    of whole knowledge bases or of the domain exclusively (before any namespace lock)."""
    function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s, %s)", [DOMAIN_LOCK_CLASS, int4_key(scope.domain_id)])


def lock_namespaces(knowledge_base: KnowledgeBase, namespaces: Iterable[str]) -> None:
    """Serialise writers (and erasures) of the same (KB, namespace), so dedupe, upsert
    and erasure cannot race. Take several in knowledge base id order."""
    with connection.cursor() as cursor:
        for namespace in sorted(set(namespaces)):
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                [int4_key(knowledge_base.pk), namespace],
            )
