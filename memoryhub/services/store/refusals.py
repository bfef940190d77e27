"""The read-only rule applied: :func:`memoryhub.policy.refuses_change` decides whether a
change reaches a read-only knowledge base; the store counts the refusal (the knowledge
base's ``refused_writes`` and a ``memory.write_refused`` observation) and refuses it."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from ... import observe, policy
from ...exceptions import WriteRefused
from ...models import KnowledgeBase, MemoryRecord, Observation
from ...scope import Scope

__all__ = ["count_refusal", "refuse", "refuse_record_change"]


def count_refusal(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    n: int,
    principal: policy.Principal,
    *,
    change: str = "write",
) -> None:
    """Count a read-only knowledge base's refusal of an agent's ``change`` (write,
    update, forget): its ``refused_writes`` counter and a ``memory.write_refused``
    observation."""
    KnowledgeBase.unscoped.filter(pk=knowledge_base.pk).update(
        refused_writes=F("refused_writes") + 1
    )
    observe.record_in_scope(
        Observation.Kind.MEMORY_WRITE_REFUSED,
        scope,
        source=knowledge_base.name,
        count=n,
        payload={
            "source": knowledge_base.name,
            "n": n,
            "policy": knowledge_base.on_write,
            "change": change,
        },
        actor=policy.actor_label(principal),
    )


def refuse(
    scope: Scope,
    knowledge_base: KnowledgeBase,
    n: int,
    principal: policy.Principal,
    *,
    change: str = "write",
) -> WriteRefused | None:
    """Count a read-only knowledge base's refusal of an agent's ``change`` of ``n``
    records; ``None`` when it ignores the change (``on_write="ignore"``: reported as
    refused, not an error), else the :class:`WriteRefused` that refuses it."""
    count_refusal(scope, knowledge_base, n, principal, change=change)
    if knowledge_base.on_write == KnowledgeBase.OnWrite.IGNORE:
        return None
    return WriteRefused(knowledge_base.name, n)


def refuse_record_change(
    scope: Scope, record: MemoryRecord, *, change: str, principal: policy.Principal
) -> None:
    """Whether ``principal`` may ``change`` ``record`` by id (update, forget): a record of
    a read-only knowledge base is refused whatever its ``on_write`` (``WriteRefused``,
    counted) unless the policy lets ``principal`` curate there."""
    knowledge_base = record.knowledge_base
    if policy.refuses_change([knowledge_base], principal=principal):
        with transaction.atomic():
            count_refusal(scope, knowledge_base, 1, principal, change=change)
        raise WriteRefused(knowledge_base.name, 1)
