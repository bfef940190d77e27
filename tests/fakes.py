"""Test doubles for the seeds' examples (the seeds: ``test_sources_seeds.py``): an
in-memory source that records its calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memoryhub.items import MemoryItem
from memoryhub.sources import MemoryContext


class FakeMemory:
    """Returns its ``items`` (restamped with its name) for every query; records writes."""

    def __init__(self, name: str, items: Sequence[MemoryItem] = ()) -> None:
        self.name = name
        self.items = list(items)
        self.queries: list[tuple[str, int]] = []
        self.writes: list[list[MemoryItem]] = []

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        self.queries.append((query, k))
        return [
            MemoryItem(
                content=i.content, source=self.name, score=i.score, metadata=i.metadata, id=i.id
            )
            for i in self.items[:k]
        ]

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> None:
        self.writes.append(list(items))
