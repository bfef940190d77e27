"""The key/value ``MemoryStore`` of seed 004 (the prototype's spec text for it: see
:mod:`memoryhub.sources`): the protocol, its record, and the stores over HTTP.

A store keeps :class:`StoredRecord` values under ``(scope, key)``: ``scope`` is a
namespace of the store's domain (``user:alice``), and one store reads and writes one
knowledge base (``source``, default ``memory``). Three implementations share the
contract (``tests/sources/test_store_contract.py``):

* :class:`~memoryhub.sources.DjangoMemoryStore`, in process, over the services;
* :class:`HttpMemoryStore` (async) and :class:`SyncHttpMemoryStore` (blocking), over
  the REST API, for agents in other services (the tenant is the API key's);
* :class:`~memoryhub.testing.InMemoryMemoryStore`, a dict, for unit tests.

The HTTP stores raise what the Django store raises where the server says the same
thing (:mod:`memoryhub.client.errors`): ``WriteRefused``, ``UnknownSource``,
``ValidationFailed`` and ``PolicyDenied``, each an ``HttpMemoryError`` too.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

import httpx

from .errors import error_for
from .rest import RestClient
from .retries import new_idempotency_key, send, send_async

__all__ = [
    "HttpMemoryStore",
    "MemoryKind",
    "MemoryStore",
    "StoredRecord",
    "StoredVersion",
    "SyncHttpMemoryStore",
]

#: The most records one ``search`` returns, whatever its ``limit``.
MAX_SEARCH = 1000


class MemoryKind(StrEnum):
    """What a record is (seed 004); the values of ``MemoryRecord.Kind``."""

    #: What happened: conversation turns, tool results, errors.
    EPISODIC = "episodic"
    #: What we know: stable facts about the user or the world.
    SEMANTIC = "semantic"
    #: How we did it: cached plans, approved code, tool chains that worked.
    PROCEDURAL = "procedural"


@dataclass(frozen=True)
class StoredRecord:
    """Seed 004's ``MemoryRecord``: a key/value entry in a namespace ("scope" there).

    ``kind`` takes a :class:`MemoryKind` or its string; a known string becomes the enum
    member (which still equals the string). ``value`` is any JSON value.
    """

    scope: str
    key: str
    value: Any
    kind: MemoryKind | str = MemoryKind.SEMANTIC
    tags: tuple[str, ...] = ()
    timestamp: datetime | None = None
    updated_at: datetime | None = None
    id: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind in MemoryKind._value2member_map_:
            object.__setattr__(self, "kind", MemoryKind(self.kind))
        object.__setattr__(self, "tags", tuple(self.tags))


@runtime_checkable
class MemoryStore(Protocol):
    """Seed 004's four async methods. memoryhub's stores also take
    ``forget(..., all_sources=True)``: the namespace in every knowledge base."""

    async def put(self, record: StoredRecord) -> None: ...

    async def get(self, *, scope: str, key: str) -> StoredRecord | None: ...

    async def search(
        self,
        *,
        scope: str,
        kind: MemoryKind | str | None = None,
        key_prefix: str | None = None,
        tag: str | None = None,
        limit: int = 100,
    ) -> list[StoredRecord]: ...

    async def forget(self, *, scope: str, key: str | None = None) -> int: ...


def stored_content(value: Any) -> str:
    """What a record's content is for ``value``: a string itself, anything else its JSON
    text (searchable); the value itself is kept in ``metadata["value"]``."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def search_limit(limit: int) -> int:
    """``limit`` bounded to ``0..MAX_SEARCH``."""
    return max(0, min(limit, MAX_SEARCH))


# --- the exchanges, shared by the async and the blocking store ------------------------------


@dataclass(frozen=True)
class _Call:
    """One request, relative to the domain's URL."""

    method: str
    path: str
    #: The permission the server asks of the key (a ``memoryhub.policy.Action`` value).
    action: str
    params: dict[str, Any] | None = None
    body: dict[str, Any] | None = None
    #: Sent with a call that changes memory: its retries act once.
    idempotency_key: str | None = None


T = TypeVar("T")
#: An operation as a generator: it yields the requests it needs and is sent each
#: response, then returns its result. The stores only move bytes (no I/O in here).
Exchange = Generator[_Call, httpx.Response, T]


def _parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _record(row: dict[str, Any]) -> StoredRecord:
    metadata = row.get("metadata") or {}
    return StoredRecord(
        scope=row["namespace"],
        key=row["key"],
        value=metadata.get("value", row["content"]),
        kind=row["kind"],
        tags=tuple(row.get("tags") or ()),
        timestamp=_parse_time(row.get("created_at")),
        updated_at=_parse_time(row.get("updated_at")),
        id=str(row["id"]),
    )


@dataclass(frozen=True)
class StoredVersion:
    """One state of a key's record in its history: its value and fields then, when it
    came to be, who made the change and why (``create``, ``upsert``, ``update``, ...)."""

    version: int
    value: Any
    kind: str
    tags: tuple[str, ...]
    changed_at: datetime | None
    actor: str
    cause: str


def stored_versions(found: dict[str, Any]) -> list[StoredVersion]:
    """The store's view of a record's history (``services.history.history`` or its JSON)."""
    versions = []
    for state in found["versions"]:
        changed = state.get("changed_at")
        metadata = state.get("metadata") or {}
        versions.append(
            StoredVersion(
                version=int(state["version"]),
                value=metadata.get("value", state["content"]),
                kind=str(state["kind"]),
                tags=tuple(state.get("tags") or ()),
                changed_at=_parse_time(changed) if isinstance(changed, str) else changed,
                actor=str(state.get("actor") or ""),
                cause=str(state["cause"]),
            )
        )
    return versions


class _RestStore:
    """The request/response mapping of the HTTP stores: every operation is an
    :data:`Exchange`, driven by :class:`HttpMemoryStore` or :class:`SyncHttpMemoryStore`."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        domain: str,
        source: str = "memory",
        timeout: float = 10.0,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._rest = RestClient(
            base_url, api_key=api_key, domain=domain, timeout=timeout, transport=transport
        )
        self.base_url, self.domain = self._rest.base_url, domain
        self.source = source

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.base_url!r}, domain={self.domain!r},"
            f" source={self.source!r})"
        )

    def _check(self, response: httpx.Response, call: _Call) -> Any:
        if response.status_code >= 400:
            raise error_for(response, sources=[self.source], action=call.action)
        return response.json()

    def _exchange(self, call: _Call) -> Generator[_Call, httpx.Response, Any]:
        response = yield call
        return self._check(response, call)

    def _put(self, record: StoredRecord) -> Exchange[None]:
        item = {
            "content": stored_content(record.value),
            "key": record.key,
            "namespace": record.scope,
            "kind": str(record.kind),
            "tags": list(record.tags),
            "metadata": {"value": record.value},
        }
        body = {"source": self.source, "items": [item]}
        yield from self._exchange(
            _Call("POST", "records", "write", body=body, idempotency_key=new_idempotency_key())
        )

    def _get(self, scope: str, key: str) -> Exchange[StoredRecord | None]:
        params = {"namespace": scope, "key": key, "source": self.source, "page_size": 1}
        page = yield from self._exchange(_Call("GET", "records", "read", params))
        rows = page["results"]
        return _record(rows[0]) if rows else None

    def _history(self, scope: str, key: str) -> Exchange[list[StoredVersion]]:
        record = yield from self._get(scope, key)
        if record is None:
            return []
        call = _Call("GET", f"records/{record.id}/history", "read")
        found = yield from self._exchange(call)
        return stored_versions(found)

    def _search(
        self,
        scope: str,
        kind: MemoryKind | str | None,
        key_prefix: str | None,
        tag: str | None,
        limit: int,
    ) -> Exchange[list[StoredRecord]]:
        limit = search_limit(limit)
        params: dict[str, Any] = {
            "namespace": scope,
            "source": self.source,
            # An empty prefix still selects only records that have a key.
            "key_prefix": key_prefix or "",
            "ordering": "updated",
        }
        if kind is not None:
            params["kind"] = str(kind)
        if tag is not None:
            params["tag"] = tag
        records: list[StoredRecord] = []
        while len(records) < limit:
            params["page_size"] = min(limit - len(records), 200)
            page = yield from self._exchange(_Call("GET", "records", "read", dict(params)))
            records.extend(_record(row) for row in page["results"])
            if not page.get("next"):
                break
            # Only the cursor of the next link: its host is what the server saw.
            params["cursor"] = httpx.URL(page["next"]).params["cursor"]
        return records[:limit]

    def _forget(self, scope: str, key: str | None, all_sources: bool) -> Exchange[int]:
        body: dict[str, Any] = {"namespace": scope}
        if key is not None:
            body["key"] = key
        if not all_sources:
            body["source"] = self.source
        # An API key's forget permission grants erase_subject too: a refusal is forget's.
        call = _Call("POST", "forget", "forget", body=body, idempotency_key=new_idempotency_key())
        result = yield from self._exchange(call)
        return int(result["deleted"])


class HttpMemoryStore(_RestStore):
    """A :class:`MemoryStore` over memoryhub's REST API: one domain, one knowledge base.

    The API key decides the tenant and what is allowed (``read`` for ``get`` and
    ``search``, ``write`` for ``put``, ``forget`` for ``forget``). Same semantics as
    :class:`~memoryhub.sources.DjangoMemoryStore`; errors as the module says. A new
    connection per call (``transport`` is httpx's, for tests or proxies).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        domain: str,
        source: str = "memory",
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key=api_key,
            domain=domain,
            source=source,
            timeout=timeout,
            transport=transport,
        )

    async def _run(self, exchange: Exchange[T]) -> T:
        async with self._rest.asynchronous() as client:
            try:
                call = next(exchange)
                while True:
                    response = await send_async(
                        client,
                        call.method,
                        call.path,
                        params=call.params,
                        json=call.body,
                        idempotency_key=call.idempotency_key,
                    )
                    call = exchange.send(response)
            except StopIteration as done:
                return done.value

    async def put(self, record: StoredRecord) -> None:
        """Write or overwrite ``(record.scope, record.key)``."""
        await self._run(self._put(record))

    async def get(self, *, scope: str, key: str) -> StoredRecord | None:
        """The record, or None when there is none."""
        return await self._run(self._get(scope, key))

    async def search(
        self,
        *,
        scope: str,
        kind: MemoryKind | str | None = None,
        key_prefix: str | None = None,
        tag: str | None = None,
        limit: int = 100,
    ) -> list[StoredRecord]:
        """Newest first (by last update), filtered by kind, key prefix and tag."""
        return await self._run(self._search(scope, kind, key_prefix, tag, limit))

    async def history(self, *, scope: str, key: str) -> list[StoredVersion]:
        """The key's states, newest first (the current one first); [] when missing."""
        return await self._run(self._history(scope, key))

    async def forget(self, *, scope: str, key: str | None = None, all_sources: bool = False) -> int:
        """Hard-delete one key, or the namespace when ``key`` is None, in this store's
        knowledge base, or with ``all_sources`` in every knowledge base of the domain
        (see :meth:`DjangoMemoryStore.forget`); return how many records went."""
        return await self._run(self._forget(scope, key, all_sources))


class SyncHttpMemoryStore(_RestStore):
    """:class:`HttpMemoryStore`, blocking (``httpx.Client``): the same methods, requests
    and errors, for code without an event loop."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        domain: str,
        source: str = "memory",
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key=api_key,
            domain=domain,
            source=source,
            timeout=timeout,
            transport=transport,
        )

    def _run(self, exchange: Exchange[T]) -> T:
        with self._rest.blocking() as client:
            try:
                call = next(exchange)
                while True:
                    response = send(
                        client,
                        call.method,
                        call.path,
                        params=call.params,
                        json=call.body,
                        idempotency_key=call.idempotency_key,
                    )
                    call = exchange.send(response)
            except StopIteration as done:
                return done.value

    def put(self, record: StoredRecord) -> None:
        """Write or overwrite ``(record.scope, record.key)``."""
        self._run(self._put(record))

    def get(self, *, scope: str, key: str) -> StoredRecord | None:
        """The record, or None when there is none."""
        return self._run(self._get(scope, key))

    def search(
        self,
        *,
        scope: str,
        kind: MemoryKind | str | None = None,
        key_prefix: str | None = None,
        tag: str | None = None,
        limit: int = 100,
    ) -> list[StoredRecord]:
        """Newest first (by last update), filtered by kind, key prefix and tag."""
        return self._run(self._search(scope, kind, key_prefix, tag, limit))

    def history(self, *, scope: str, key: str) -> list[StoredVersion]:
        """As :meth:`HttpMemoryStore.history`."""
        return self._run(self._history(scope, key))

    def forget(self, *, scope: str, key: str | None = None, all_sources: bool = False) -> int:
        """As :meth:`HttpMemoryStore.forget`."""
        return self._run(self._forget(scope, key, all_sources))
