"""A query as asked: validated fields (:class:`QueryRequest`) and what comes back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Self

from pydantic import model_validator

from ...conf import memoryhub_settings
from ...items import MemoryItem
from ...vocabulary import QueryBody


class QueryRequest(QueryBody):
    """A valid query: the command the query service takes (the fields and rules of
    :class:`memoryhub.vocabulary.QueryBody`; no ``namespaces`` is the shared one)."""

    @model_validator(mode="after")
    def _shared_by_default(self) -> Self:
        if not self.namespaces:
            self.__dict__["namespaces"] = ("",)
        return self

    @classmethod
    def build(cls, /, **raw: Any) -> QueryRequest:
        """Validate raw input; raise :class:`ValidationFailed` naming each bad field."""
        return cls.parse(raw)

    def half_life(self) -> float | None:
        """The recency half-life this query ranks with, in seconds (None: no boost)."""
        if self.recency_half_life is None:
            return memoryhub_settings.recency_half_life()
        return self.recency_half_life or None

    def canonical(self) -> dict[str, Any]:
        """The normalised request, for cache keys: order-insensitive lists sorted, and
        what the ranking depends on only (``context_turns`` is read after it)."""
        return {
            "query": self.query,
            "k": self.k,
            "sources": sorted(self.sources) if self.sources is not None else None,
            "namespaces": sorted(self.namespaces or ()),
            "kinds": sorted(self.kinds) if self.kinds is not None else None,
            "tags": sorted(self.tags) if self.tags is not None else None,
            "where": self.where,
            "key_prefix": self.key_prefix,
            "mode": self.mode,
            "min_score": self.min_score,
            "occurred_after": _iso(self.occurred_after),
            "occurred_before": _iso(self.occurred_before),
            "as_of": _iso(self.as_of),
            "recency_half_life": self.half_life(),
            "rerank": self.rerank,
        }


def _iso(moment: datetime | None) -> str | None:
    """A moment as a canonical string: the same instant in any offset, the same key."""
    return None if moment is None else moment.astimezone(UTC).isoformat()


#: Where an item stood in each leg of its query: ``{"vector": {"rank", "score"} | None,
#: "keyword": ...}`` (None: the leg did not find it).
Legs = dict[str, dict[str, float] | None]


@dataclass
class QueryResult:
    """The items, and how they were found: from the cache or not, the plan's strategy,
    and whether the reranker ordered them (then each score is the reranker's)."""

    items: list[MemoryItem] = field(default_factory=list)
    cached: bool = False
    strategy: str = ""
    #: With ``explain``: each item's :data:`Legs`, by item id.
    legs: dict[str, Legs] = field(default_factory=dict)
    reranked: bool = False
    #: What the answer cost and holds: ``tokens`` (estimated, of its grounding),
    #: ``items``, ``records_scanned`` (the candidates the legs returned and the ranking
    #: read), ``max_tokens`` and ``truncated`` (the budget left hits or turns out).
    usage: dict[str, Any] = field(default_factory=dict)

    def item_dicts(self) -> list[dict[str, Any]]:
        """The items as the API and MCP answer them (with ``legs`` when explained)."""
        items = [item.to_dict() for item in self.items]
        if self.legs:
            for item in items:
                item["legs"] = self.legs.get(item["id"])
        return items


# --- candidates ------------------------------------------------------------------------
