"""The seeds' async memory contract, over memoryhub.

One protocol, :class:`MemorySource` (``name``, ``query``, ``write``), many backends and
decorators that nest::

    from memoryhub.sources import (
        CachedMemory, CompositeMemory, DjangoMemory, MemoryContext, ReadOnlyMemory,
        ScopedMemory, as_grounder,
    )

    memory = ScopedMemory(CompositeMemory([
        ReadOnlyMemory(DjangoMemory(sources=["handbook"])),
        DjangoMemory(sources=["memory"]),
    ]))
    items = await memory.query("how long do refunds take", k=5, ctx=MemoryContext(scope))

and seed 004's key/value :class:`~memoryhub.client.MemoryStore` (``put``, ``get``,
``search``, ``forget`` of :class:`~memoryhub.client.StoredRecord` values):
:class:`DjangoMemoryStore` in process. Over the REST API, :class:`~memoryhub.client.HttpMemory`,
:class:`~memoryhub.client.HttpMemoryStore` and :class:`~memoryhub.client.SyncHttpMemoryStore`
live in :mod:`memoryhub.client`, which needs no Django; they compose with everything here.

"The seeds" are the three texts of the prototype memoryhub carries over, written there
under other names: seed 000, the memory contract (``MemorySource``, the compositions
and the decorators); seed 003, grounding (``as_grounder``, the "Relevant context:"
block); seed 004, the key/value ``MemoryStore``. What their examples print is
memoryhub's behaviour spec: ``tests/sources/test_sources_seeds.py`` reproduces every printed
output under memoryhub's names.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..items import MemoryItem, grounding_lines
from .base import MemoryContext, MemorySource, Reranker, accepts_writes
from .compositions import (
    CompositeMemory,
    CompositeWriteError,
    ItemReranker,
    SequentialMemory,
    score_sort_rerank,
)
from .decorators import CachedMemory, CompactedMemory, ReadOnlyMemory, ScopedMemory, require_scope
from .django import DjangoMemory, DjangoMemoryStore
from .tools import ToolMemory, default_parse


def as_grounder(
    memory: Any,
    *,
    k: int = 5,
    where: Mapping[str, Any] | None = None,
    format: Callable[[Sequence[MemoryItem]], str] | None = None,
) -> Callable[[MemoryContext, str], Any]:
    """An async ``(ctx, task) -> str`` that retrieves for ``task`` and renders the lines.

    The default rendering is one ``[source] content`` line per item; ``""`` means
    nothing was found (a caller omits the "Relevant context:" block then, see
    :func:`memoryhub.services.query.render_grounding`). The query is the task, verbatim.
    """

    async def grounder(ctx: MemoryContext, task: str) -> str:
        items = await memory.query(task, k=k, ctx=ctx, where=where)
        if not items:
            return ""
        if format is not None:
            return format(items)
        return grounding_lines(items)

    return grounder


__all__ = [
    "CachedMemory",
    "CompactedMemory",
    "CompositeMemory",
    "CompositeWriteError",
    "DjangoMemory",
    "DjangoMemoryStore",
    "ItemReranker",
    "MemoryContext",
    "MemorySource",
    "ReadOnlyMemory",
    "Reranker",
    "ScopedMemory",
    "SequentialMemory",
    "ToolMemory",
    "accepts_writes",
    "as_grounder",
    "default_parse",
    "require_scope",
    "score_sort_rerank",
]
