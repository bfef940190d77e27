"""Decorators: each is a MemorySource wrapping another, single-purpose and stackable."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from ..exceptions import WriteRefused
from ..items import MemoryItem
from .base import (
    MemoryContext,
    accepts_writes,
    observes_writes,
    refused_by_outcome,
)

__all__ = ["CachedMemory", "CompactedMemory", "ReadOnlyMemory", "ScopedMemory", "require_scope"]

logger = logging.getLogger(__name__)


def require_scope(ctx: MemoryContext) -> bool:
    """The default tenant policy: both org and domain set (``0`` is a valid id)."""
    scope = getattr(ctx, "scope", None)
    return (
        scope is not None
        and getattr(scope, "org_id", None) is not None
        and getattr(scope, "domain_id", None) is not None
    )


class _Wrapper:
    """A decorator over one source: same name, same ``accepts_writes`` (the nesting table
    of seed 000, the memory contract: see :mod:`memoryhub.sources`) and
    ``observes_writes``."""

    inner: Any

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def accepts_writes(self) -> bool:
        return accepts_writes(self.inner)

    @property
    def observes_writes(self) -> bool:
        return observes_writes(self.inner)


class ScopedMemory(_Wrapper):
    """Fail-loud tenant guard: runs ``enforce(ctx)`` before every query and write.

    A falsy answer or an exception from ``enforce`` becomes ``PermissionError`` and the
    inner source is never touched. The name mirrors the inner source, so attribution
    is the same with and without the guard. A write records a ``memory.written``
    observation, unless the inner source records its own (``observes_writes``: memoryhub's
    write service does, behind ``DjangoMemory`` and ``HttpMemory``), does not accept
    writes, or reports the write refused (an ``ignore`` knowledge base): one observation
    per write, and none where nothing was written.
    """

    def __init__(self, inner: Any, *, enforce: Callable[[MemoryContext], Any] = require_scope):
        self.inner = inner
        self.enforce = enforce

    async def _check(self, ctx: MemoryContext) -> None:
        try:
            allowed = self.enforce(ctx)
            if inspect.isawaitable(allowed):
                allowed = await allowed
        except Exception as exc:
            raise PermissionError(f"{self.name}: tenant check failed: {exc}") from exc
        if not allowed:
            raise PermissionError(f"{self.name}: refused an unscoped or foreign-tenant call")

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        await self._check(ctx)
        return await self.inner.query(query, k=k, ctx=ctx, where=where)

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> Any:
        await self._check(ctx)
        outcome = await self.inner.write(items, ctx=ctx)
        if (
            not self.observes_writes
            and self.accepts_writes
            and not refused_by_outcome(outcome, self.name)
        ):
            await ctx.observe("memory.written", {"n": len(items), "source": self.name})
        return outcome


def _canonical(where: Mapping[str, Any] | None) -> str:
    return json.dumps(where or {}, sort_keys=True, separators=(",", ":"), default=str)


class CachedMemory(_Wrapper):
    """A TTL cache over identical queries, keyed by (scope, query, k, canonical where).

    The scope is part of the key, so a cache stacked under a tenant guard never serves
    one tenant's items to another. A context without a scope shares the ``unscoped``
    bucket, and the first such call logs a warning; ``strict_scope=True`` refuses it
    instead (``PermissionError``). A write through this decorator
    clears the cache; a write that reaches the backend another way does not (the TTL
    bounds staleness). ``DjangoMemory`` needs no ``CachedMemory``: the query service
    caches per domain generation, which every write path invalidates.
    """

    def __init__(self, inner: Any, *, ttl_seconds: float = 60.0, strict_scope: bool = False):
        self.inner = inner
        self.ttl_seconds = ttl_seconds
        self.strict_scope = strict_scope
        self._warned = False
        self._entries: dict[tuple[str, str, int, str], tuple[float, list[MemoryItem]]] = {}

    def _scope_key(self, ctx: MemoryContext) -> str:
        scope = getattr(ctx, "scope", None)
        if scope is None:
            if self.strict_scope:
                raise PermissionError(f"{self.name}: CachedMemory needs a scoped context")
            if not self._warned:
                # Once per instance: a single-tenant app that means it is told, not spammed.
                self._warned = True
                logger.warning(
                    "CachedMemory over %r runs unscoped: every unscoped call shares one "
                    "cache bucket. Wrap it in ScopedMemory, or pass strict_scope=True.",
                    self.name,
                )
            return "unscoped"
        return f"org{scope.org_id}:dom{scope.domain_id}"

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        key = (self._scope_key(ctx), query, k, _canonical(where))
        now = time.monotonic()
        entry = self._entries.get(key)
        if entry is not None and entry[0] > now:
            return list(entry[1])
        items = await self.inner.query(query, k=k, ctx=ctx, where=where)
        self._entries[key] = (now + self.ttl_seconds, list(items))
        return items

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> Any:
        self._entries.clear()
        return await self.inner.write(items, ctx=ctx)


class CompactedMemory(_Wrapper):
    """Shrinks each item's content through a compactor, optionally capping the count.

    ``compactor`` is a callable ``str -> str`` (sync or async) or an object with
    ``compact(text)``.
    """

    def __init__(self, inner: Any, compactor: Any, *, max_items: int | None = None):
        self.inner = inner
        self.compactor = compactor
        self.max_items = max_items

    async def _compact(self, text: str) -> str:
        call = self.compactor.compact if hasattr(self.compactor, "compact") else self.compactor
        outcome = call(text)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        return str(outcome)

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        items = await self.inner.query(query, k=k, ctx=ctx, where=where)
        if self.max_items is not None:
            items = items[: self.max_items]
        return [
            dataclasses.replace(item, content=await self._compact(item.content)) for item in items
        ]

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> Any:
        return await self.inner.write(items, ctx=ctx)


class ReadOnlyMemory:
    """Refuses (or deliberately drops) writes to a source that is read-only by policy.

    ``query`` is a total pass-through: same name, same items. ``on_write="refuse"``
    (default) raises ``WriteRefused(source, n)``, even for an empty write;
    ``"ignore"`` returns having written nothing. Both count ``refused_writes`` and
    record a ``memory.write_refused`` observation with source, n and policy.
    """

    accepts_writes: ClassVar[bool] = False
    POLICIES = ("refuse", "ignore")

    def __init__(self, inner: Any, *, on_write: str = "refuse") -> None:
        if on_write not in self.POLICIES:
            raise ValueError(f"on_write must be 'refuse' or 'ignore', not {on_write!r}")
        self.inner = inner
        self.on_write = on_write
        self.refused_writes = 0

    @property
    def name(self) -> str:
        return str(self.inner.name)

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        return await self.inner.query(query, k=k, ctx=ctx, where=where)

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> None:
        self.refused_writes += 1
        await ctx.observe(
            "memory.write_refused",
            {"source": self.name, "n": len(items), "policy": self.on_write},
        )
        if self.on_write == "refuse":
            raise WriteRefused(self.name, len(items))
