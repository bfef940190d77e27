"""Forgetting memory (GDPR Article 17): hard deletes with an audit trail of counts only.

Rows are deleted (the vectors live in them), the domain's cache generation is bumped and
its cached query results are deleted, queued indexing tasks for the erased ids find
nothing and do nothing, and one ``memory.forgotten`` observation records counts per
knowledge base and a salted hash of the selector, never the content or the namespace in
clear.
"""

from __future__ import annotations

from .erasure import forget, forget_org, forget_record, preview, preview_org
from .knowledge_base_deletion import (
    delete_knowledge_base,
    deletions_for_sweep,
    enqueue_knowledge_base_deletion,
    forget_knowledge_base,
    schedule_knowledge_base_deletion,
)
from .receipts import ERASURE_REGISTRY, get_receipt, receipts_for_namespace
from .request import ForgetRequest, ForgetResult, NothingToForget, salted_hash
from .undo import enqueue_undo, finish_undo, undo_job, undoing_for_sweep
from .vacuum import ERASED_TABLES, VACUUM_KEY, schedule_vacuum, vacuum_erased_tables

__all__ = [
    "ERASED_TABLES",
    "ERASURE_REGISTRY",
    "VACUUM_KEY",
    "ForgetRequest",
    "ForgetResult",
    "NothingToForget",
    "delete_knowledge_base",
    "deletions_for_sweep",
    "enqueue_knowledge_base_deletion",
    "enqueue_undo",
    "finish_undo",
    "forget",
    "forget_knowledge_base",
    "forget_org",
    "forget_record",
    "get_receipt",
    "preview",
    "preview_org",
    "receipts_for_namespace",
    "salted_hash",
    "schedule_knowledge_base_deletion",
    "schedule_vacuum",
    "undo_job",
    "undoing_for_sweep",
    "vacuum_erased_tables",
]
