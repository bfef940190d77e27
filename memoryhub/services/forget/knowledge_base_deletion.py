"""Deleting a knowledge base: its records erased (in the background when it is large), then
the knowledge base itself."""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial

from django.db import transaction
from django.utils import timezone

from ... import policy
from ...conf import memoryhub_settings
from ...models import (
    KnowledgeBase,
)
from ...scope import Scope
from ..dispatch import send
from ..distribution import org_of
from .erasure import forget
from .request import ForgetRequest, ForgetResult

logger = logging.getLogger(__name__)


def forget_knowledge_base(scope: Scope, name: str, *, principal: policy.Principal) -> ForgetResult:
    """Erase a knowledge base's records (before the knowledge base itself is deleted)."""
    return forget(scope, ForgetRequest(source=name), principal=principal)


def schedule_knowledge_base_deletion(
    knowledge_base: KnowledgeBase, *, principal: policy.Principal
) -> None:
    """Mark the knowledge base as being deleted (it takes no writes from now) and let a
    worker erase its records and then delete it: a million records is minutes of work,
    never a request's. In eager mode (no broker) it runs when the transaction commits."""
    KnowledgeBase.unscoped.filter(pk=knowledge_base.pk, deleting_since__isnull=True).update(
        deleting_since=timezone.now()
    )
    transaction.on_commit(
        partial(enqueue_knowledge_base_deletion, knowledge_base.pk, principal=principal)
    )


def enqueue_knowledge_base_deletion(knowledge_base_id: int, *, principal: policy.Principal) -> None:
    """Send the deletion to a worker, which acts for ``principal``
    (:func:`memoryhub.policy.principal_for_task`)."""
    send(
        "delete_knowledge_base",
        knowledge_base_id,
        policy.actor_label(principal),
        what=f"deletion of knowledge base {knowledge_base_id}",
        left="left marked for the sweeper",
    )


def delete_knowledge_base(
    knowledge_base_id: int, *, principal: policy.Principal
) -> ForgetResult | None:
    """Erase a knowledge base marked for deletion (with a receipt), then delete it."""
    with transaction.atomic():
        knowledge_base = (
            KnowledgeBase.unscoped.select_for_update()
            .filter(org_id__in=org_of(KnowledgeBase, knowledge_base_id))
            .filter(pk=knowledge_base_id, deleting_since__isnull=False)
            .first()
        )
        if knowledge_base is None:  # already gone, or not marked
            return None
        scope = Scope(knowledge_base.org_id, knowledge_base.domain_id)
        result = forget_knowledge_base(scope, knowledge_base.name, principal=principal)
        knowledge_base.delete()
    return result


def deletions_for_sweep(older_than: timedelta | None = None) -> list[int]:
    """Knowledge bases marked for deletion whose message never arrived."""
    if older_than is None:
        older_than = timedelta(seconds=memoryhub_settings.SWEEP_PENDING_AFTER)
    return list(
        KnowledgeBase.unscoped.filter(deleting_since__lte=timezone.now() - older_than).values_list(
            "pk", flat=True
        )[:100]
    )
