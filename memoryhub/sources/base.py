"""The contract: ``MemorySource``, the context a call runs in, and the shared errors."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from asgiref.sync import sync_to_async

from ..items import MemoryItem
from ..observe import record_in_scope
from ..scope import Scope

logger = logging.getLogger(__name__)

Observer = Callable[[str, Mapping[str, Any]], Any]


@runtime_checkable
class MemorySource(Protocol):
    """Two methods and a name. Anything with these three is a memory source."""

    name: str

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]: ...

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> Any: ...


@runtime_checkable
class Reranker(Protocol):
    """Anything with ``async rerank(query, items, *, k)``; a plain callable works too."""

    async def rerank(
        self, query: str, items: Sequence[MemoryItem], *, k: int
    ) -> list[MemoryItem]: ...


@dataclass
class MemoryContext:
    """What a memory call runs in: the tenant scope and where observations go.

    ``scope`` may be ``None``, and then ``ScopedMemory`` refuses to run. Every
    observation a decorator makes is kept in ``observations``; it is also passed to
    ``observer`` if one is given, or else (with a scope, and ``persist`` on) recorded
    in the ``Observation`` table.
    """

    scope: Scope | None = None
    actor: str = ""
    observer: Observer | None = None
    persist: bool = True
    observations: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def observe(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Best-effort: a failing observer is logged, never raised into the caller."""
        self.observations.append((kind, dict(payload)))
        try:
            if self.observer is not None:
                outcome = self.observer(kind, payload)
                if inspect.isawaitable(outcome):
                    await outcome
            elif self.persist and self.scope is not None:
                await sync_to_async(_persist, thread_sensitive=True)(
                    self.scope, self.actor, kind, dict(payload)
                )
        except Exception:
            logger.exception("recording the %s observation failed", kind)


def _persist(scope: Scope, actor: str, kind: str, payload: dict[str, Any]) -> None:
    record_in_scope(
        kind,
        scope,
        source=str(payload.get("source", "")),
        count=int(payload.get("n", 0) or 0),
        payload=payload,
        actor=actor,
    )


def accepts_writes(source: Any) -> bool:
    """The marker compositions read; backends that predate it accept writes."""
    return bool(getattr(source, "accepts_writes", True))


def observes_writes(source: Any) -> bool:
    """Whether ``source`` records its own ``memory.written`` observations (memoryhub's
    write service does): a decorator then records none, so a write is observed once."""
    return bool(getattr(source, "observes_writes", False))


def refused_by_outcome(outcome: Any, name: str) -> bool:
    """A source reports a policy drop (an ``ignore`` knowledge base) by returning a
    result, an object or a mapping, that lists ``name`` refused and nothing accepted."""
    if isinstance(outcome, Mapping):
        refused, accepted = outcome.get("refused"), outcome.get("accepted")
    else:
        refused, accepted = getattr(outcome, "refused", None), getattr(outcome, "accepted", None)
    return bool(refused) and not accepted and name in (refused or ())
