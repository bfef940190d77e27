"""REST API views. Thin: parse, call one service, shape the response."""

from __future__ import annotations

from .base import (
    DOMAIN,
    ERRORS,
    IDEMPOTENCY_KEY,
    KEY_REUSED,
    UPDATED,
    Action,
    MemoryAPIView,
    PinnedAPIView,
    answered_once,
    errors_except,
)
from .memory import ErasureReceiptView, ForgetView, QueryView, SourcesView, SubjectExportView
from .records import (
    DECIMAL,
    WHOLE,
    NamespacePageSerializer,
    NamespacesView,
    RecordCursor,
    RecordDetailView,
    RecordHistoryView,
    RecordsView,
    RecordTimelineView,
)
from .site import HealthSerializer, HealthView, NotFoundView, WhoAmISerializer, WhoAmIView

__all__ = [
    "DECIMAL",
    "DOMAIN",
    "ERRORS",
    "IDEMPOTENCY_KEY",
    "KEY_REUSED",
    "UPDATED",
    "WHOLE",
    "Action",
    "ErasureReceiptView",
    "ForgetView",
    "HealthSerializer",
    "HealthView",
    "MemoryAPIView",
    "NamespacePageSerializer",
    "NamespacesView",
    "NotFoundView",
    "PinnedAPIView",
    "QueryView",
    "RecordCursor",
    "RecordDetailView",
    "RecordHistoryView",
    "RecordTimelineView",
    "RecordsView",
    "SourcesView",
    "SubjectExportView",
    "WhoAmISerializer",
    "WhoAmIView",
    "answered_once",
    "errors_except",
]
