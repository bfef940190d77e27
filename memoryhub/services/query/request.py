"""A query as asked: validated fields (:class:`QueryRequest`) and what comes back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ...conf import MAX_HALF_LIFE_SECONDS, half_life_seconds, memoryhub_settings
from ...exceptions import ValidationFailed
from ...filters import compile_where
from ...items import MemoryItem
from ...models import (
    MemoryRecord,
)
from ...vocabulary import (
    MAX_FILTER_VALUE_LENGTH,
    MAX_FILTER_VALUES,
    MAX_TOKENS,
    MODES,
    QueryRequestSerializer,
    bounds,
    field_names,
)
from ..validation import OCCURRED_RANGE, validate_moment


@dataclass(frozen=True)
class QueryRequest:
    """A validated query. Build with :meth:`build` from raw (e.g. JSON) input: the fields
    ``memoryhub.vocabulary.QueryRequestSerializer`` declares."""

    query: str
    k: int
    sources: tuple[str, ...] | None = None
    namespaces: tuple[str, ...] = ("",)
    kinds: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    where: dict[str, Any] | None = None
    #: Only records whose key starts with it ("": the records that have a key).
    key_prefix: str | None = None
    mode: str = "hybrid"
    min_score: float | None = None
    #: Only records whose content occurred at ``occurred_after`` or later and before
    #: ``occurred_before`` (``models.occurred``), inside every leg.
    occurred_after: datetime | None = None
    occurred_before: datetime | None = None
    #: Seconds; None: ``RECENCY_HALF_LIFE``; 0: no recency boost for this query.
    recency_half_life: float | None = None
    #: Read what was valid at this moment (``models.valid_q``); None: what is valid now.
    as_of: datetime | None = None
    #: Neighbouring turns of each hit's session to return, on each side (0: none).
    context_turns: int = 0
    #: The most (estimated) tokens the answer's grounding may hold (``budget.pack``).
    max_tokens: int | None = None
    #: Return each item's rank and score in each leg (``QueryResult.legs``).
    explain: bool = False
    #: False: keep the fused order even when a reranker is configured.
    rerank: bool = True

    @classmethod
    def build(cls, /, **raw: Any) -> QueryRequest:  # noqa: C901
        """Validate raw input; raise :class:`ValidationFailed` naming each bad field."""
        limits = bounds()
        errors: dict[str, list[str]] = {}
        unknown = sorted(set(raw) - field_names(QueryRequestSerializer))
        for name in unknown:
            errors.setdefault(name, []).append("is not a query field.")
        text = raw.get("query")
        if not isinstance(text, str) or not text.strip():
            errors.setdefault("query", []).append("must be a non-empty string.")
        elif len(text) > limits.MAX_QUERY_LENGTH:
            errors.setdefault("query", []).append(
                f"is longer than {limits.MAX_QUERY_LENGTH} characters."
            )
        elif "\x00" in text:
            errors.setdefault("query", []).append("may not contain NUL characters.")
        k = raw.get("k", limits.DEFAULT_K)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= limits.MAX_K:
            errors.setdefault("k", []).append(f"must be an integer from 1 to {limits.MAX_K}.")
        mode = raw.get("mode", "hybrid")
        if mode not in MODES:
            errors.setdefault("mode", []).append(f"must be one of {', '.join(MODES)}.")
        min_score = raw.get("min_score")
        if min_score is not None and (
            isinstance(min_score, bool)
            or not isinstance(min_score, int | float)
            or not -1.0 <= float(min_score) <= 1.0
        ):
            errors.setdefault("min_score", []).append("must be a number from -1 to 1.")
        explain = raw.get("explain", False)
        if not isinstance(explain, bool):
            errors.setdefault("explain", []).append("must be true or false.")
        rerank = raw.get("rerank", True)
        if not isinstance(rerank, bool):
            errors.setdefault("rerank", []).append("must be true or false.")
        lists: dict[str, tuple[str, ...] | None] = {}
        for name in ("sources", "namespaces", "kinds", "tags"):
            lists[name] = _string_list(raw.get(name), name, errors)
        if lists["kinds"]:
            for index, kind in enumerate(lists["kinds"]):
                if kind not in MemoryRecord.Kind.values:
                    errors.setdefault(f"kinds[{index}]", []).append(
                        f"must be one of {', '.join(MemoryRecord.Kind.values)}."
                    )
        key_prefix = raw.get("key_prefix")
        if key_prefix is not None and (
            not isinstance(key_prefix, str)
            or "\x00" in key_prefix
            or len(key_prefix) > limits.MAX_KEY_LENGTH
        ):
            errors.setdefault("key_prefix", []).append(
                f"must be a string of at most {limits.MAX_KEY_LENGTH} characters."
            )
        where = raw.get("where")
        if where is not None:
            try:
                compile_where(where)
            except ValidationFailed as exc:
                for path, messages in exc.errors.items():
                    errors.setdefault(path, []).extend(messages)
        after, before = (
            validate_moment(raw[name], name, errors, bounds=OCCURRED_RANGE, dates=True)
            if raw.get(name) is not None
            else None
            for name in ("occurred_after", "occurred_before")
        )
        as_of = (
            validate_moment(raw["as_of"], "as_of", errors, bounds=OCCURRED_RANGE, dates=True)
            if raw.get("as_of") is not None
            else None
        )
        if after is not None and before is not None and before <= after:
            errors.setdefault("occurred_before", []).append("must be later than occurred_after.")
        half_life = raw.get("recency_half_life")
        try:
            # 0 (no boost) stays 0: it overrides the setting, as None does not.
            half_life = None if half_life is None else half_life_seconds(half_life) or 0.0
        except ValueError:
            errors.setdefault("recency_half_life", []).append(
                f"must be a number of seconds from 0 (no boost) to {MAX_HALF_LIFE_SECONDS}."
            )
        turns = raw.get("context_turns", 0)
        if (
            isinstance(turns, bool)
            or not isinstance(turns, int)
            or not 0 <= turns <= limits.MAX_CONTEXT_TURNS
        ):
            errors.setdefault("context_turns", []).append(
                f"must be an integer from 0 to {limits.MAX_CONTEXT_TURNS}."
            )
        max_tokens = raw.get("max_tokens")
        if max_tokens is not None and (
            isinstance(max_tokens, bool)
            or not isinstance(max_tokens, int)
            or not 1 <= max_tokens <= MAX_TOKENS
        ):
            errors.setdefault("max_tokens", []).append(
                f"must be an integer from 1 to {MAX_TOKENS}."
            )
        if errors:
            raise ValidationFailed(errors)
        return cls(
            query=text.strip(),  # type: ignore[union-attr]
            k=k,
            sources=lists["sources"],
            namespaces=lists["namespaces"] or ("",),
            kinds=lists["kinds"],
            tags=lists["tags"],
            where=where or None,
            key_prefix=key_prefix,
            mode=mode,
            min_score=None if min_score is None else float(min_score),
            occurred_after=after,
            occurred_before=before,
            as_of=as_of,
            recency_half_life=half_life,
            context_turns=turns,
            max_tokens=max_tokens,
            explain=explain,
            rerank=rerank,
        )

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
            "namespaces": sorted(self.namespaces),
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


def _string_list(value: Any, name: str, errors: dict[str, list[str]]) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple):
        errors.setdefault(name, []).append("must be a list of strings.")
        return None
    if len(value) > MAX_FILTER_VALUES:
        errors.setdefault(name, []).append(f"at most {MAX_FILTER_VALUES} values.")
        return None
    result: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            errors.setdefault(f"{name}[{index}]", []).append("must be a string.")
        elif "\x00" in item:
            errors.setdefault(f"{name}[{index}]", []).append("must not contain NUL characters.")
        elif len(item) > MAX_FILTER_VALUE_LENGTH:
            errors.setdefault(f"{name}[{index}]", []).append(
                f"must be at most {MAX_FILTER_VALUE_LENGTH} characters."
            )
        elif item not in result:
            result.append(item)
    return tuple(result)


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
