"""Knowledge bases as writes meet them: created on first use (the default ``memory``),
resolved by name in a scope, and whether a write to one would commit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import boundary, policy
from ..cache import bump_generation_on_commit
from ..exceptions import UnknownSource, ValidationFailed
from ..models import KnowledgeBase
from ..scope import Scope, tenant_scope

__all__ = [
    "accepts_writes",
    "ensure_knowledge_base",
    "name_problem",
    "resolve_sources",
    "save_knowledge_base",
    "source_names",
]


def save_knowledge_base(knowledge_base: KnowledgeBase) -> KnowledgeBase:
    """Save an operator's change to a knowledge base (its org is its domain's): a
    rename or a new policy changes what queries select and what writes do, so the
    domain's cached plans and results go when it commits."""
    knowledge_base.org_id = knowledge_base.domain.org_id
    knowledge_base.save()
    bump_generation_on_commit(Scope(knowledge_base.org_id, knowledge_base.domain_id))
    return knowledge_base


def ensure_knowledge_base(
    scope: Scope,
    name: str,
    *,
    read_only: bool = False,
    on_write: str = KnowledgeBase.OnWrite.REFUSE,
    description: str = "",
) -> KnowledgeBase:
    """Get the knowledge base ``name`` of the scope, creating it with these settings."""
    with tenant_scope(scope):
        knowledge_base, _ = KnowledgeBase.objects.get_or_create(
            name=name,
            defaults={
                "org_id": scope.org_id,
                "domain_id": scope.domain_id,
                "read_only": read_only,
                "on_write": on_write,
                "description": description,
            },
        )
    return knowledge_base


def resolve_sources(scope: Scope, names: Sequence[str]) -> list[KnowledgeBase]:
    with tenant_scope(scope):
        # A knowledge base being deleted takes no writes (its records are being erased).
        found = {
            kb.name: kb
            for kb in KnowledgeBase.objects.filter(name__in=names, deleting_since__isnull=True)
        }
    resolved = []
    for name in names:
        if name not in found:
            if name != KnowledgeBase.DEFAULT_NAME or _being_deleted(scope, name):
                raise UnknownSource(name)
            found[name] = ensure_knowledge_base(scope, name)
        resolved.append(found[name])
    return resolved


def accepts_writes(scope: Scope, source: str = KnowledgeBase.DEFAULT_NAME) -> bool:
    """Whether an agent's write to ``source`` would commit: not for a read-only knowledge
    base (whatever its ``on_write``), one being deleted, or one the domain lacks (the
    default ``memory`` excepted: the first write creates it)."""
    with tenant_scope(scope):
        knowledge_base = KnowledgeBase.objects.filter(name=source).first()
    if knowledge_base is None:
        return source == KnowledgeBase.DEFAULT_NAME
    if knowledge_base.deleting_since is not None:
        return False
    return not policy.refuses_change([knowledge_base], principal=policy.AGENT)


def _being_deleted(scope: Scope, name: str) -> bool:
    with tenant_scope(scope):
        return KnowledgeBase.objects.filter(name=name, deleting_since__isnull=False).exists()


def name_problem(name: Any) -> str | None:
    """What is wrong with ``name`` as a knowledge base's name, wherever it is given (a
    write's sources, the admin's form); None when nothing is."""
    if not isinstance(name, str) or not name or len(name) > 64 or "\x00" in name:
        return "must be a knowledge base name."
    if boundary.has_invisible(name):
        return boundary.INVISIBLE
    return None


def source_names(sources: Any) -> list[str]:
    if sources is None:
        return [KnowledgeBase.DEFAULT_NAME]
    if isinstance(sources, str) or not isinstance(sources, list | tuple):
        raise ValidationFailed({"sources": ["must be a list of knowledge base names."]})
    if not sources:
        raise ValidationFailed({"sources": ["name at least one knowledge base."]})
    names: list[str] = []
    for index, name in enumerate(sources):
        problem = name_problem(name)
        if problem is not None:
            raise ValidationFailed({f"sources[{index}]": [problem]})
        if name not in names:
            names.append(name)
    return names


# --- the write ------------------------------------------------------------------------
