"""``ToolMemory``: any tool (a search function, an API client) adapted into a source."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..items import MemoryItem
from .base import MemoryContext

__all__ = ["ToolMemory", "default_parse"]

CONTENT_KEYS = ("content", "text", "snippet")


def default_parse(result: Any, source: str) -> list[MemoryItem]:
    """Four shapes, and nothing clever beyond them.

    * a dict with a ``"results"`` list: unwrap and recurse;
    * a list of dicts ``{content|text|snippet, score?, metadata?, ...}``: every other key
      is kept as metadata;
    * a list of strings: one item each;
    * a string: split on blank lines.

    Anything else is one item holding ``str(result)``.
    """
    if isinstance(result, Mapping) and isinstance(result.get("results"), list):
        return default_parse(result["results"], source)
    if isinstance(result, str):
        parts = [part.strip() for part in result.split("\n\n")]
        return [MemoryItem(content=part, source=source) for part in parts if part]
    if isinstance(result, list) and all(isinstance(entry, str) for entry in result):
        return [MemoryItem(content=entry, source=source) for entry in result]
    if isinstance(result, list) and all(isinstance(entry, Mapping) for entry in result):
        items = []
        for entry in result:
            content_key = next((key for key in CONTENT_KEYS if key in entry), None)
            if content_key is None:
                items.append(MemoryItem(content=str(dict(entry)), source=source))
                continue
            metadata = dict(entry.get("metadata") or {})
            metadata.update(
                {
                    key: value
                    for key, value in entry.items()
                    if key not in (content_key, "score", "metadata", "id")
                }
            )
            item_id = entry.get("id")
            items.append(
                MemoryItem(
                    content=str(entry[content_key]),
                    source=source,
                    score=entry.get("score"),
                    metadata=metadata,
                    id=str(item_id) if item_id not in (None, "") else None,
                )
            )
        return items
    return [MemoryItem(content=str(result), source=source)]


class ToolMemory:
    """Calls ``tool(**{query_arg: query, "limit": k, **where})``; writes are a no-op.

    ``where`` keys merge last, so a caller's ``limit`` overrides ``k``. The tool may be a
    plain or async callable, or an object with ``run``. A tool that mutates the world
    stays a tool: this adapter never writes through it.
    """

    accepts_writes = False

    def __init__(
        self,
        tool: Any,
        *,
        name: str,
        query_arg: str = "query",
        result_to_items: Callable[[Any, str], list[MemoryItem]] = default_parse,
    ) -> None:
        self.tool = tool
        self.name = name
        self.query_arg = query_arg
        self.result_to_items = result_to_items

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        call = self.tool.run if hasattr(self.tool, "run") else self.tool
        result = call(**{self.query_arg: query, "limit": k, **(where or {})})
        if inspect.isawaitable(result):
            result = await result
        return self.result_to_items(result, self.name)

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> None:
        return None
