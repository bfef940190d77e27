"""KnowledgeBase, MemoryRecord and Observation: memory and its operator timeline.

Every tenant-scoped model derives from :class:`TenantScopedModel` and so has two
managers:

* ``objects`` is scoped by django-scopes on ``(org, domain)``: outside an active
  :func:`memoryhub.scope.tenant_scope` every query raises ``ScopeError`` rather than
  returning every tenant's rows;
* ``unscoped`` is the explicit operator path (admin, erasure, sweeper), and the base
  manager, so related lookups such as ``record.knowledge_base`` keep working.
"""

from __future__ import annotations

from .archives import ArchiveJob
from .audit import ErasureReceipt, Observation
from .expressions import (
    LIVE_SQL,
    OCCURRED_SQL,
    SESSION_KEY,
    SESSION_MAX_LENGTH,
    SESSION_SQL,
    TURN_SQL,
    adjacent_turn_sql,
    live_q,
    occurred,
    session,
    valid_q,
)
from .imports import ImportChunk, ImportJob
from .knowledge_bases import KnowledgeBase, KnowledgeBaseQuerySet
from .operations import IdempotentRequest, WorkerHeartbeat
from .records import MemoryRecord, MemoryRecordManager, MemoryRecordQuerySet, RecordVersion
from .statistics import WordFrequency, WordStatistics
from .tenancy import (
    TenantForeignKey,
    TenantScopedModel,
    domain_key,
    org_key,
    scoped_manager,
)
from .text import (
    COMPOUND,
    HOLDS_COMPOUND,
    JOINERS,
    SEARCH_CONFIG,
    TAG,
    content_hash,
    normalize_content,
    search_vector,
)

__all__ = [
    "COMPOUND",
    "HOLDS_COMPOUND",
    "JOINERS",
    "LIVE_SQL",
    "OCCURRED_SQL",
    "SEARCH_CONFIG",
    "SESSION_KEY",
    "SESSION_MAX_LENGTH",
    "SESSION_SQL",
    "TAG",
    "TURN_SQL",
    "ArchiveJob",
    "ErasureReceipt",
    "IdempotentRequest",
    "ImportChunk",
    "ImportJob",
    "KnowledgeBase",
    "KnowledgeBaseQuerySet",
    "MemoryRecord",
    "MemoryRecordManager",
    "MemoryRecordQuerySet",
    "Observation",
    "RecordVersion",
    "TenantForeignKey",
    "TenantScopedModel",
    "WordFrequency",
    "WordStatistics",
    "WorkerHeartbeat",
    "adjacent_turn_sql",
    "content_hash",
    "domain_key",
    "live_q",
    "normalize_content",
    "occurred",
    "org_key",
    "scoped_manager",
    "search_vector",
    "session",
    "valid_q",
]
