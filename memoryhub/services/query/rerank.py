"""Reranking: the configured reranker reorders a query's best fused candidates, or, when
it fails, the query keeps the fused order.

The reranker is sent the query and the candidates' content, nothing else (no ids,
metadata, sources or tenant); the candidates come from the query's own scope, so one
tenant's memory is never sent with another's query. Its failures never fail the query:
the items come back in the fused order with their fused scores (``reranked`` false), a
warning is logged, and a ``rerank.failed`` observation is recorded (at most one per
domain per ``FAILURE_OBSERVED_EVERY`` seconds, so an outage does not write one per
query).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from ... import cache, observe
from ...conf import memoryhub_settings
from ...items import MemoryItem
from ...models import Observation
from ...rerankers import DocumentReranker, RerankerError, checked_ranking
from ...scope import Scope
from .request import QueryRequest

logger = logging.getLogger(__name__)

#: Seconds between two ``rerank.failed`` observations of one domain.
FAILURE_OBSERVED_EVERY = 60

#: The reranker's scores of the items it kept, by item id, best first.
Scores = list[tuple[str, float]]


def reranker_for(request: QueryRequest) -> DocumentReranker | None:
    """The reranker that orders ``request``'s items: the configured one, unless the
    request opted out (``rerank: false``)."""
    return memoryhub_settings.reranker() if request.rerank else None


def candidates(request: QueryRequest, reranker: DocumentReranker | None) -> int:
    """How many of the best fused items the query keeps before the cut to k: k, or with
    a reranker ``RERANK_CANDIDATES`` (at least k)."""
    if reranker is None:
        return request.k
    return max(memoryhub_settings.RERANK_CANDIDATES, request.k)


def rerank(
    scope: Scope, reranker: DocumentReranker, request: QueryRequest, items: Sequence[MemoryItem]
) -> Scores | None:
    """The reranker's best k of ``items`` with its scores, or None when it failed (then
    logged and observed)."""
    if not items:
        return None
    documents = [item.content for item in items]
    try:
        answer = reranker.rerank(request.query, documents, top_n=request.k)
        ranking = checked_ranking(answer, len(documents), request.k)
    except Exception as exc:
        _failed(scope, reranker, exc, len(items))
        return None
    return [(str(items[index].id), score) for index, score in ranking]


def apply(items: Sequence[MemoryItem], scores: Scores) -> list[MemoryItem]:
    """``items`` in the reranker's order with its scores; items it did not keep go."""
    by_id = {str(item.id): item for item in items}
    return [dataclasses.replace(by_id[pk], score=score) for pk, score in scores if pk in by_id]


def _failed(scope: Scope, reranker: DocumentReranker, exc: Exception, sent: int) -> None:
    name = str(getattr(reranker, "name", type(reranker).__name__))
    if isinstance(exc, RerankerError):
        outcome, status, attempts = exc.outcome, exc.status, exc.attempts
        # The reason names statuses and indexes, never the query or a document.
        logger.warning(
            "reranker %s failed (%s: %s); answering in the fused order", name, outcome, exc.reason
        )
    else:
        outcome, status, attempts = "error", None, 1
        logger.warning(
            "reranker %s raised %s; answering in the fused order",
            name,
            type(exc).__name__,
            exc_info=True,
        )
    if not cache.first_within(scope, "rerank-failed", FAILURE_OBSERVED_EVERY):
        return
    observe.record_in_scope(
        Observation.Kind.RERANK_FAILED,
        scope,
        source=name[:64],
        count=1,
        payload={
            "reranker": name,
            "outcome": outcome,
            "status": status,
            "attempts": attempts,
            "candidates": sent,
            "error": type(exc).__name__,
        },
        actor=f"reranker:{name}"[:150],
    )
