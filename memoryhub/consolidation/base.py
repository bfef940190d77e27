"""What an extractor reads, what it answers, and the rules every answer must keep.

Consolidation turns a namespace's new episodic turns (:class:`Episode`) into changes to
its semantic facts (:class:`Fact`): each :class:`Operation` adds a fact, updates one,
deletes one, or leaves one as it is. An :class:`Extractor` proposes the operations;
:func:`validate_operations` refuses any proposal that breaks the invariants below before
it can reach the write path. Nothing here touches the database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, Self, runtime_checkable

from memoryhub.items import FrozenDict, deep_freeze

__all__ = [
    "MAX_FACT_CHARS",
    "MAX_KEY_CHARS",
    "OPERATIONS",
    "Episode",
    "ExtractionError",
    "Extractor",
    "ExtractorUnavailable",
    "Fact",
    "MalformedAnswer",
    "Operation",
    "OperationName",
    "chronological",
    "validate_operations",
]

OperationName = Literal["add", "update", "supersede", "delete", "none"]
OPERATIONS: tuple[OperationName, ...] = ("add", "update", "supersede", "delete", "none")
#: The operations that write a fact's content.
WRITES: tuple[OperationName, ...] = ("add", "update", "supersede")

#: The longest fact content an operation may carry.
MAX_FACT_CHARS = 2_000
#: The longest key an ``add`` may carry (a record's ``key`` column holds 255).
MAX_KEY_CHARS = 255


class ExtractionError(RuntimeError):
    """An extractor produced no usable operations; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MalformedAnswer(ExtractionError):
    """A model answered, but not with valid operations (bad JSON, schema, invariants)."""


class ExtractorUnavailable(ExtractionError):
    """The extractor could not be reached or refused to work for now (429, 5xx, timeout).

    ``retry_after`` is the delay in seconds the server asked for, when it asked.
    """

    def __init__(self, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Episode:
    """One new episodic turn of a namespace."""

    id: str
    content: str
    created_at: datetime | None = None
    metadata: Mapping[str, Any] = field(default_factory=FrozenDict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", deep_freeze(self.metadata))


@dataclass(frozen=True)
class Fact:
    """An existing semantic fact of the namespace, as similar to the episodes as found.

    ``derived_from`` names the episodes the fact came from; ``key`` is the record's key,
    when it has one.
    """

    id: str
    content: str
    metadata: Mapping[str, Any] = field(default_factory=FrozenDict, hash=False)
    derived_from: tuple[str, ...] = ()
    key: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", deep_freeze(self.metadata))
        object.__setattr__(self, "derived_from", tuple(self.derived_from))


@dataclass(frozen=True)
class Operation:
    """One proposed change to the facts.

    * ``add``: a new fact with ``content`` (and ``key``, or ``None``), derived from
      ``sources``.
    * ``update``: fact ``fact_id`` now reads ``content`` (a correction or an
      enrichment: what it said was never true, or is still true and more is known). The
      new content may still carry what the old one said, so the caller should add
      ``sources`` to the fact's ``derived_from`` rather than replace it: erasing any of
      those episodes must find the fact.
    * ``supersede``: fact ``fact_id`` (or, with ``fact_id`` None, the fact an earlier
      ``add`` or ``supersede`` of the same answer wrote under ``key``) was true and
      stopped being true when ``sources`` were first said; ``content`` is what is true
      since. The caller closes the old fact (kept, with its validity and a link to its
      successor) and adds the new one under the same key, derived from ``sources``.
    * ``delete``: fact ``fact_id`` is contradicted or retracted by ``sources`` (which may
      be empty).
    * ``none``: fact ``fact_id`` keeps its content; ``sources`` (possibly empty) are new
      episodes that restate it.

    ``sources`` are ids of the episodes given to the extractor. ``metadata`` is merged
    into the fact's metadata (the built-in extractor keeps ``count`` there). Use the
    class methods to build one.
    """

    op: OperationName
    content: str = ""
    fact_id: str | None = None
    sources: tuple[str, ...] = ()
    key: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=FrozenDict, hash=False)

    def __post_init__(self) -> None:
        if self.op not in OPERATIONS:
            raise ValueError(f"op must be one of {', '.join(OPERATIONS)}, not {self.op!r}")
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "metadata", deep_freeze(self.metadata))

    @classmethod
    def add(
        cls,
        content: str,
        sources: Sequence[str],
        *,
        key: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Self:
        return cls("add", content=content, sources=tuple(sources), key=key, metadata=metadata or {})

    @classmethod
    def update(
        cls,
        fact_id: str,
        content: str,
        sources: Sequence[str],
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> Self:
        return cls(
            "update",
            content=content,
            fact_id=fact_id,
            sources=tuple(sources),
            metadata=metadata or {},
        )

    @classmethod
    def supersede(
        cls,
        fact_id: str | None,
        content: str,
        sources: Sequence[str],
        *,
        key: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Self:
        """Supersede fact ``fact_id``, or (``fact_id`` None) the fact an earlier operation
        of the same answer wrote under ``key``: a value that changed twice in one batch
        of episodes."""
        return cls(
            "supersede",
            content=content,
            fact_id=fact_id,
            sources=tuple(sources),
            key=key,
            metadata=metadata or {},
        )

    @classmethod
    def delete(cls, fact_id: str, sources: Sequence[str] = ()) -> Self:
        return cls("delete", fact_id=fact_id, sources=tuple(sources))

    @classmethod
    def none(
        cls,
        fact_id: str,
        sources: Sequence[str] = (),
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> Self:
        return cls("none", fact_id=fact_id, sources=tuple(sources), metadata=metadata or {})


@runtime_checkable
class Extractor(Protocol):
    """Proposes operations on ``facts`` from new ``episodes``.

    ``name`` and ``model`` identify the extractor in observations (``model`` is ``""``
    for one that uses no model). ``extract`` is synchronous, since a worker calls it, and
    raises :class:`ExtractionError` (or a subclass) when it cannot answer.
    """

    name: str
    model: str

    def extract(self, episodes: Sequence[Episode], facts: Sequence[Fact]) -> list[Operation]:
        """Operations that keep :func:`validate_operations`'s invariants."""
        ...


def validate_operations(  # noqa: C901
    operations: Sequence[Operation], episodes: Sequence[Episode], facts: Sequence[Fact]
) -> list[Operation]:
    """Return ``operations`` as a list if they are safe to apply, else raise.

    Every operation must keep these rules, or :class:`ExtractionError` names the first
    it breaks:

    * ``add``, ``update`` and ``supersede`` carry content (not blank, at most
      :data:`MAX_FACT_CHARS`) and at least one source; ``delete`` and ``none`` carry no
      content;
    * every operation but ``add`` names a fact of ``facts``; ``add`` names none; a
      ``supersede`` may instead name the key of an earlier ``add``, or of a fact an
      earlier operation named (but did not delete);
    * every source is the id of one of ``episodes``;
    * only ``add`` (and a ``supersede`` naming no fact) carries a key, not blank and at
      most :data:`MAX_KEY_CHARS`;
    * no two operations name the same fact, and no two ``add`` carry the same key.
    """
    episode_ids = {episode.id for episode in episodes}
    fact_ids = {fact.id for fact in facts}
    facts_named: set[str] = set()
    keys_added: set[str] = set()
    for position, operation in enumerate(operations):
        where = f"operation {position} ({getattr(operation, 'op', '?')})"
        if not isinstance(operation, Operation) or operation.op not in OPERATIONS:
            raise ExtractionError(f"{where}: not an Operation")
        writes = operation.op in WRITES
        if writes:
            if not operation.content.strip():
                raise ExtractionError(f"{where}: content is empty")
            if len(operation.content) > MAX_FACT_CHARS:
                raise ExtractionError(
                    f"{where}: content is {len(operation.content)} characters, "
                    f"at most {MAX_FACT_CHARS} allowed"
                )
            if not operation.sources:
                raise ExtractionError(f"{where}: no source episodes")
        elif operation.content:
            raise ExtractionError(f"{where}: carries content")
        unknown_sources = [source for source in operation.sources if source not in episode_ids]
        if unknown_sources:
            raise ExtractionError(f"{where}: unknown source episode {unknown_sources[0]!r}")
        if operation.op == "add":
            if operation.fact_id is not None:
                raise ExtractionError(f"{where}: an add names no fact")
            if operation.key is not None:
                if not operation.key.strip() or len(operation.key) > MAX_KEY_CHARS:
                    raise ExtractionError(f"{where}: key is blank or too long")
                if operation.key in keys_added:
                    raise ExtractionError(f"{where}: key {operation.key!r} added twice")
                keys_added.add(operation.key)
            continue
        if operation.op == "supersede" and operation.fact_id is None:
            if operation.key not in keys_added:
                raise ExtractionError(
                    f"{where}: names no fact, and no earlier operation wrote key {operation.key!r}"
                )
            continue
        if operation.key is not None:
            raise ExtractionError(f"{where}: only an add carries a key")
        if operation.fact_id not in fact_ids:
            raise ExtractionError(f"{where}: unknown fact {operation.fact_id!r}")
        if operation.fact_id in facts_named:
            raise ExtractionError(f"{where}: fact {operation.fact_id!r} named twice")
        facts_named.add(operation.fact_id)
        if operation.op != "delete":
            # The fact (or its successor) still holds its key: a later supersede may name it.
            keyed = next((fact.key for fact in facts if fact.id == operation.fact_id), None)
            if keyed:
                keys_added.add(keyed)
    return list(operations)


def chronological(episodes: Sequence[Episode]) -> list[Episode]:
    """``episodes`` oldest first: by ``created_at`` when every episode has one (ties keep
    their order), else in the order given."""
    if all(episode.created_at is not None for episode in episodes):
        try:
            return sorted(episodes, key=lambda episode: episode.created_at)  # type: ignore[arg-type,return-value]
        except TypeError:  # naive and aware datetimes do not compare
            pass
    return list(episodes)
