"""``MemoryItem``, the value every memory source returns, what a write returns
(``WriteResult``), and dedupe across sources.

Shared by the query and write services, the ``memoryhub.sources`` compositions and the
HTTP client (:mod:`memoryhub.client`), so all of them merge duplicates by the same rules:
"Deduping the fan-out" of seed 000, the memory contract (the seeds are the prototype's
spec texts: see :mod:`memoryhub.sources`). Importing this module imports no Django: the
client runs without it.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NoReturn

__all__ = [
    "MOMENT_FIELDS",
    "STORED_FIELDS",
    "FrozenDict",
    "MemoryItem",
    "RecordResult",
    "Turns",
    "WriteResult",
    "as_write_item",
    "dedupe_items",
    "deep_freeze",
    "sort_by_score",
    "thaw",
]

#: The fields a record stores of what was written (history keeps them too); a write's
#: item also names its ``namespace`` and may give ``ttl_seconds`` instead of
#: ``expires_at`` (``memoryhub.vocabulary`` declares the requests).
STORED_FIELDS = (
    "content",
    "key",
    "kind",
    "tags",
    "metadata",
    "expires_at",
    "occurred_at",
    "valid_from",
    "valid_until",
)
#: Those of :data:`STORED_FIELDS` that hold a moment (text in JSON and CSV).
MOMENT_FIELDS = ("expires_at", "occurred_at", "valid_from", "valid_until")

FROZEN_MESSAGE = (
    "this payload belongs to a frozen value and cannot be mutated in place. "
    "Build a new one instead: dataclasses.replace(obj, field={**obj.field, ...})"
)


class FrozenDict(dict[str, Any]):
    """A dict that refuses mutation; prints, compares and serialises like a dict."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(FROZEN_MESSAGE)

    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self


def deep_freeze(value: Any) -> Any:
    """Copy ``value`` with every dict frozen and every list a tuple; idempotent."""
    if isinstance(value, FrozenDict):
        return value
    if isinstance(value, Mapping):
        return FrozenDict({str(key): deep_freeze(inner) for key, inner in value.items()})
    if isinstance(value, list | tuple):
        return tuple(deep_freeze(inner) for inner in value)
    return value


def thaw(value: Any) -> Any:
    """A plain, mutable, JSON-ready copy of a frozen value."""
    if isinstance(value, Mapping):
        return {key: thaw(inner) for key, inner in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(inner) for inner in value]
    return value


@dataclass(frozen=True, eq=True)
class MemoryItem:
    """One recalled item. ``content`` is what the agent reads; ``source`` names the backend.

    ``metadata`` is frozen deeply at construction, and the hash covers ``(content,
    source, score)`` only, so two copies of one passage with different chunk ids land in
    one bucket and ``__eq__`` (which compares metadata) tells them apart. Everything
    after ``id`` is keyword-only: memoryhub's record fields, and the per-query dedupe
    stamps, which are never stored.
    """

    content: str
    source: str
    score: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=FrozenDict)
    _: dataclasses.KW_ONLY
    id: str | None = None
    key: str | None = None
    kind: str | None = None
    namespace: str | None = None
    tags: tuple[str, ...] = ()
    created_at: datetime | None = None
    #: When the content happened or was said (memoryhub's records: their ``occurred_at``,
    #: else their ``created_at``).
    occurred_at: datetime | None = None
    dedupe_count: int | None = None
    dedupe_sources: tuple[str, ...] | None = None
    #: A consolidated fact's sources: the ids of the episodic records it came from.
    derived_from: tuple[str, ...] = ()
    #: When what it says became true and stopped being true (None: unbounded), and the
    #: record that superseded it (services/supersession.py).
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    superseded_by: str | None = None
    #: The neighbouring turns of its conversation, when the query asked for them
    #: (``context_turns``); never stored.
    context: Turns | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", deep_freeze(self.metadata or {}))
        object.__setattr__(self, "tags", tuple(self.tags))
        object.__setattr__(self, "derived_from", tuple(str(pk) for pk in self.derived_from))
        if self.dedupe_sources is not None:
            object.__setattr__(self, "dedupe_sources", tuple(self.dedupe_sources))

    def __hash__(self) -> int:
        return hash((self.content, self.source, self.score))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the dedupe stamps only when the item is a merge."""
        data: dict[str, Any] = {
            "id": self.id,
            "content": self.content,
            "source": self.source,
            "score": self.score,
            "metadata": thaw(self.metadata),
            "key": self.key,
            "kind": self.kind,
            "namespace": self.namespace,
            "tags": list(self.tags),
            "created_at": self.created_at,
            "occurred_at": self.occurred_at,
            "derived_from": list(self.derived_from),
            "valid_from": self.valid_from,
            "valid_until": self.valid_until,
            "superseded_by": self.superseded_by,
        }
        if self.dedupe_count is not None:
            data["dedupe_count"] = self.dedupe_count
            data["dedupe_sources"] = list(self.dedupe_sources or ())
        if self.context is not None:
            data["context"] = {
                "before": [turn.to_dict() for turn in self.context.before],
                "after": [turn.to_dict() for turn in self.context.after],
            }
        return data


@dataclass(frozen=True)
class Turns:
    """The turns of an item's conversation around it, oldest first: up to N ``before``
    and N ``after`` it."""

    before: tuple[MemoryItem, ...] = ()
    after: tuple[MemoryItem, ...] = ()


@dataclass(frozen=True, slots=True)
class RecordResult:
    """One written item's record: its id and key, its status, whether the item merged
    into an existing record (``deduplicated``), and its knowledge base (``source``)."""

    id: str
    key: str | None
    status: str
    deduplicated: bool
    source: str


@dataclass(slots=True)
class WriteResult:
    """Per-KB outcome: ``refused`` is not a slice of ``accepted`` (as the seeds'
    ``CompositeMemory`` reports a partial write)."""

    accepted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    records: list[RecordResult] = field(default_factory=list)

    @property
    def record_ids(self) -> list[str]:
        return [record.id for record in self.records]


DedupeMode = Literal["id", "content"] | None


def _identity_id(item: MemoryItem) -> str | None:
    return item.id if item.id else None  # "" is not an identity


def _identity_content(item: MemoryItem) -> str | None:
    stripped = item.content.strip()
    return stripped or None  # blank content is not an identity


def _score_key(item: MemoryItem) -> float:
    return float("-inf") if item.score is None else item.score


def dedupe_items(
    items: Iterable[MemoryItem], mode: DedupeMode = "id"
) -> tuple[list[MemoryItem], int]:
    """Merge duplicates; return the survivors (first-seen order) and how many merged away.

    ``mode="id"`` unions two relations: a shared non-empty id, or equal stripped
    non-blank content. ``mode="content"`` uses content only; ``None`` keeps everything.
    The higher score survives, stamped with ``dedupe_count`` (copies collapsed, across
    nesting) and ``dedupe_sources`` (every leaf source that agreed).
    """
    items = list(items)
    if mode is None or len(items) < 2:
        return items, 0
    if mode not in ("id", "content"):
        raise ValueError(f"dedupe must be 'id', 'content' or None, not {mode!r}")
    merged_away = 0
    survivors: list[tuple[int, MemoryItem]] = []
    for root, members in _duplicate_groups(items, mode).items():
        if len(members) == 1:
            survivors.append((root, items[root]))
            continue
        merged_away += len(members) - 1
        survivors.append((root, _merged([items[i] for i in members])))
    survivors.sort(key=lambda pair: pair[0])
    return [item for _, item in survivors], merged_away


def _duplicate_groups(items: list[MemoryItem], mode: DedupeMode) -> dict[int, list[int]]:
    """The indexes of ``items`` grouped by duplication, keyed by each group's first index:
    a union-find over the identities (id, content) that ``mode`` compares."""
    parent = list(range(len(items)))

    def find(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    def union(left: int, right: int) -> None:
        root_left, root_right = find(left), find(right)
        if root_left != root_right:
            parent[max(root_left, root_right)] = min(root_left, root_right)

    seen: dict[tuple[str, str], int] = {}
    for index, item in enumerate(items):
        identities = []
        if mode == "id" and (item_id := _identity_id(item)) is not None:
            identities.append(("id", item_id))
        if (content := _identity_content(item)) is not None:
            identities.append(("content", content))
        for identity in identities:
            if identity in seen:
                union(seen[identity], index)
            else:
                seen[identity] = index

    groups: dict[int, list[int]] = {}
    for index in range(len(items)):
        groups.setdefault(find(index), []).append(index)
    return groups


def _merged(group: list[MemoryItem]) -> MemoryItem:
    """A group of duplicates as one item: the best scored, stamped with the copies it
    stands for and every leaf source that agreed."""
    best = max(group, key=_score_key)
    count = sum(item.dedupe_count or 1 for item in group)
    sources: list[str] = []
    for item in group:
        for source in item.dedupe_sources or (item.source,):
            if source not in sources:
                sources.append(source)
    return dataclasses.replace(best, dedupe_count=count, dedupe_sources=tuple(sources))


def sort_by_score(items: Sequence[MemoryItem]) -> list[MemoryItem]:
    """Score descending, ``None`` last but never dropped; stable otherwise."""
    return sorted(items, key=lambda item: (item.score is None, -(item.score or 0.0)))


#: Per-query annotations of a deduped fan-out, never persisted.
TRANSIENT_METADATA = ("dedupe_count", "dedupe_sources")


def as_write_item(item: MemoryItem, *, default_namespace: str | None = None) -> dict[str, Any]:
    """The write-service (and REST) shape of an item.

    A stable ``metadata["id"]`` doubles as the key, so re-writing it replaces rather
    than duplicates, and, unlike the seed's ``VectorMemory``, it stays in the metadata.
    The item's ``source`` is not sent: the backend that stores it stamps its own.
    """
    metadata = {k: v for k, v in thaw(item.metadata).items() if k not in TRANSIENT_METADATA}
    raw: dict[str, Any] = {"content": item.content, "metadata": metadata}
    key = item.key or (str(metadata["id"]) if metadata.get("id") not in (None, "") else None)
    if key is not None:
        raw["key"] = key
    if item.kind:
        raw["kind"] = item.kind
    namespace = item.namespace if item.namespace is not None else default_namespace
    if namespace is not None:
        raw["namespace"] = namespace
    if item.tags:
        raw["tags"] = list(item.tags)
    if item.occurred_at is not None:
        raw["occurred_at"] = item.occurred_at.isoformat()
    return raw


#: The line of an item in a grounding block, unless ``MEMORYHUB["GROUNDING_FORMAT"]`` says
#: otherwise: ``[source] content``, the line of seed 003's grounding block.
DEFAULT_GROUNDING_FORMAT = "[{source}] {content}"
#: What a grounding format may name: ``occurred`` is when the content happened (else
#: when it was written), ``created`` when it was written; both are datetimes
#: (``{occurred:%Y-%m-%d}``).
GROUNDING_FIELDS: tuple[str, ...] = (
    *("source", "content", "id", "key", "kind", "namespace", "score"),
    *("occurred", "created"),
)


def _grounding_values(item: MemoryItem) -> dict[str, Any]:
    return {
        "source": item.source,
        "content": item.content,
        "id": item.id,
        "key": item.key,
        "kind": item.kind,
        "namespace": item.namespace,
        "score": item.score,
        "occurred": item.occurred_at or item.created_at,
        "created": item.created_at,
    }


def grounding_fields(line_format: Any) -> tuple[str, ...]:
    """The fields ``line_format`` names; raise ``ValueError`` saying what is wrong with it
    (not a string, no ``{content}``, a field it may not name, attribute or index access,
    a nested field, a format spec that does not apply to its value)."""
    if not isinstance(line_format, str):
        raise ValueError(f"must be a format string, not {line_format!r}")
    try:
        parsed = list(string.Formatter().parse(line_format))
    except ValueError as exc:
        raise ValueError(f"{line_format!r} is not a format string: {exc}") from None
    names: list[str] = []
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        if name not in GROUNDING_FIELDS:
            raise ValueError(
                f"{{{name}}} is not a grounding field; use {', '.join(GROUNDING_FIELDS)}"
            )
        if spec and "{" in spec:
            raise ValueError(f"the format of {{{name}}} may not name other fields")
        names.append(name)
    if "content" not in names:
        raise ValueError("must show the {content}")
    sample = MemoryItem(
        "content", "source", 0.5, id="id", key="key", kind="semantic", namespace="",
        created_at=datetime(2000, 1, 1, tzinfo=UTC), occurred_at=datetime(2000, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    try:
        line_format.format_map(_grounding_values(sample))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{line_format!r} cannot render an item: {exc}") from None
    return tuple(names)


def grounding_lines(items: Sequence[MemoryItem], line_format: str | None = None) -> str:
    """A grounding block's lines (as seed 003 prints them): one line per item,
    ``[source] content`` unless ``line_format`` (default:
    ``MEMORYHUB["GROUNDING_FORMAT"]``) says otherwise (the one spelling of them:
    ``as_grounder`` and ``render_grounding`` both use it).

    An item that lacks a value the format names (a record without a key, an item of a
    source that keeps no dates) gets the default line. An item with conversation turns
    (``context``) comes with them, in order; a turn already shown is not shown again.
    """
    if line_format is None:
        # Django's settings only here: the HTTP client imports this module without Django.
        from .conf import memoryhub_settings

        line_format = memoryhub_settings.GROUNDING_FORMAT
    names = grounding_fields(line_format)
    with_turns = any(item.context is not None for item in items)
    shown: set[str] = set()
    lines: list[str] = []
    for item in items:
        context = item.context or Turns()
        for each in (*context.before, item, *context.after):
            if with_turns and each.id:
                if each.id in shown:
                    continue
                shown.add(each.id)
            values = _grounding_values(each)
            if any(values[name] is None for name in names):
                lines.append(DEFAULT_GROUNDING_FORMAT.format_map(values))
            else:
                lines.append(line_format.format_map(values))
    return "\n".join(lines)
