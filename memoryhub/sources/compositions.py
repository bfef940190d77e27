"""Compositions: fan out to every source (``CompositeMemory``) or try them in order
(``SequentialMemory``)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Self

from ..conf import memoryhub_settings
from ..items import DedupeMode, MemoryItem, dedupe_items, sort_by_score
from ..rerankers import DocumentReranker, RerankerError, checked_ranking
from .base import MemoryContext, accepts_writes, observes_writes, refused_by_outcome

__all__ = [
    "CompositeMemory",
    "CompositeWriteError",
    "ItemReranker",
    "SequentialMemory",
    "score_sort_rerank",
]

logger = logging.getLogger(__name__)


async def score_sort_rerank(query: str, items: Sequence[MemoryItem], *, k: int) -> list[MemoryItem]:
    """The default reranker: score descending, ``None`` last but never dropped."""
    return sort_by_score(items)[:k]


async def _rerank(reranker: Any, query: str, items: list[MemoryItem], k: int) -> list[MemoryItem]:
    call = reranker.rerank if hasattr(reranker, "rerank") else reranker
    outcome = call(query, items, k=k)
    if inspect.isawaitable(outcome):
        outcome = await outcome
    return list(outcome)[:k]


class ItemReranker:
    """A :class:`~memoryhub.rerankers.DocumentReranker` (the server's kind, e.g.
    ``HttpReranker``) as the ``Reranker`` of the seeds' memory contract (see
    :mod:`memoryhub.sources`): ``await rerank(query, items, k=k)``,
    for ``CompositeMemory(..., reranker=ItemReranker(reranker))``.

    The reranker scores the items' content in a worker thread (it is synchronous; one
    ``HttpReranker`` and its connection pool serve the server and every composite that
    wraps it), and its best k come back with its scores. When it fails, the items are
    ranked by ``fallback`` instead (score order, by default) and a warning is logged,
    as the query service falls back to the fused order; ``fallback=None`` raises.
    """

    def __init__(self, reranker: DocumentReranker, *, fallback: Any = score_sort_rerank) -> None:
        self.reranker = reranker
        self.fallback = fallback

    @classmethod
    def from_settings(cls, *, fallback: Any = score_sort_rerank) -> Self:
        """Over the reranker of ``MEMORYHUB["RERANKER"]``, the very instance the query
        service uses; ``ValueError`` when none is configured."""
        reranker = memoryhub_settings.reranker()
        if reranker is None:
            raise ValueError('MEMORYHUB["RERANKER"] is not set')
        return cls(reranker, fallback=fallback)

    def __repr__(self) -> str:
        return f"ItemReranker({self.reranker!r})"

    async def rerank(self, query: str, items: Sequence[MemoryItem], *, k: int) -> list[MemoryItem]:
        if not items or k < 1:
            return []
        documents = [item.content for item in items]
        try:
            answer = await asyncio.to_thread(self.reranker.rerank, query, documents, top_n=k)
            ranking = checked_ranking(answer, len(documents), k)
        except Exception as exc:
            if self.fallback is None:
                raise
            reason = exc.reason if isinstance(exc, RerankerError) else type(exc).__name__
            name = getattr(self.reranker, "name", type(self.reranker).__name__)
            logger.warning("reranker %s failed (%s); falling back", name, reason)
            return await _rerank(self.fallback, query, list(items), k)
        return [dataclasses.replace(items[index], score=score) for index, score in ranking]


class CompositeWriteError(Exception):
    """A broadcast write failed somewhere; says which sources did commit.

    ``accepted`` committed, ``refused`` are read-only members that wrote nothing by
    policy, ``failed`` maps a source name to its exception. ``refused`` is not a slice of
    ``accepted``: ``accepted`` is what to leave out of a replay.
    """

    def __init__(
        self, accepted: list[str], refused: list[str], failed: dict[str, BaseException]
    ) -> None:
        self.accepted = accepted
        self.refused = refused
        self.failed = failed
        failures = "; ".join(f"{name}: {type(exc).__name__}: {exc}" for name, exc in failed.items())
        message = f"CompositeMemory.write partial failure — accepted: {accepted}"
        if refused:
            message += f"; refused (read-only): {refused}"
        super().__init__(f"{message}; failed: {failures}")


class CompositeMemory:
    """Queries every source concurrently, merges and dedupes, reranks, keeps the top k.

    ``dedupe="id"`` (default) merges items sharing a non-empty id or equal stripped
    content; ``"content"`` uses content only; ``None`` concatenates. Writes broadcast to
    every source and report partial failure as :class:`CompositeWriteError`. A merged
    pool holds up to ``len(sources) * k`` items before the cut: nest composites to keep
    a wide tree's fan-out moderate.
    """

    def __init__(
        self,
        sources: Sequence[Any],
        *,
        reranker: Any = score_sort_rerank,
        dedupe: DedupeMode = "id",
        name: str = "composite",
    ) -> None:
        if dedupe not in ("id", "content", None):
            raise ValueError(f"dedupe must be 'id', 'content' or None, not {dedupe!r}")
        self.sources = list(sources)
        self.reranker = reranker
        self.dedupe: DedupeMode = dedupe
        self.name = name

    @property
    def accepts_writes(self) -> bool:
        return any(accepts_writes(source) for source in self.sources)

    @property
    def observes_writes(self) -> bool:
        return all(observes_writes(source) for source in self.sources)

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        results = await asyncio.gather(
            *(source.query(query, k=k, ctx=ctx, where=where) for source in self.sources)
        )
        pool = [item for items in results for item in items]
        merged, collapsed = dedupe_items(pool, self.dedupe)
        if collapsed:
            sources = sorted({s for item in merged for s in (item.dedupe_sources or ())})
            await ctx.observe(
                "query.deduplicated", {"n": collapsed, "sources": sources, "source": self.name}
            )
        return await _rerank(self.reranker, query, merged, k)

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> None:
        if not items:
            return
        outcomes = await asyncio.gather(
            *(source.write(items, ctx=ctx) for source in self.sources), return_exceptions=True
        )
        accepted: list[str] = []
        refused: list[str] = []
        failed: dict[str, BaseException] = {}
        for source, outcome in zip(self.sources, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                failed[source.name] = outcome
            elif not accepts_writes(source) or refused_by_outcome(outcome, source.name):
                refused.append(source.name)
            else:
                accepted.append(source.name)
        if failed:
            raise CompositeWriteError(accepted, refused, failed)


class SequentialMemory:
    """Tries sources in order and stops once ``k`` items are collected.

    Writes go to the first source only (the cache tier, in the usual setup), so
    ``accepts_writes`` is the first source's.
    """

    def __init__(self, sources: Sequence[Any], *, name: str = "sequential") -> None:
        if not sources:
            raise ValueError("SequentialMemory needs at least one source")
        self.sources = list(sources)
        self.name = name

    @property
    def accepts_writes(self) -> bool:
        return accepts_writes(self.sources[0])

    @property
    def observes_writes(self) -> bool:
        return observes_writes(self.sources[0])

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        collected: list[MemoryItem] = []
        for source in self.sources:
            collected.extend(await source.query(query, k=k - len(collected), ctx=ctx, where=where))
            if len(collected) >= k:
                break
        return collected[:k]

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> Any:
        if not items:
            return None
        return await self.sources[0].write(items, ctx=ctx)
