"""LangGraph's long-term memory store (``BaseStore``) kept in memoryhub.

:class:`~memoryhub.integrations.langgraph.django.MemoryhubStore` calls memoryhub's
services in this process (a Django project with memoryhub installed);
:class:`HttpMemoryhubStore` calls a memoryhub server's REST API with an API key (and
needs no Django: this module imports only :mod:`memoryhub.client`). Both keep one
knowledge base (``source``, default ``memory``) of one domain, and behave alike
(``tests/integrations/test_langgraph.py`` runs one contract against both).

How a LangGraph item is a memoryhub record:

* the namespace's first label is the record's **namespace**: a graph that puts the data
  subject first, ``("user:alice", "memories")``, keeps that person's items where
  memoryhub's erasure of ``user:alice`` finds them;
* the record's **key** is the other labels, each followed by ``/``, then ``#`` and the
  item's key (``memories/#favourite-colour``); ``%``, ``/`` and ``#`` in a label or a
  key are percent-encoded. A namespace prefix is then a key prefix, and the items of
  one namespace are one range of keys: the namespace listing
  (``GET namespaces?delimiter=#``) finds each namespace with one index seek;
* the value is the record's **metadata**, so a search's ``filter`` is memoryhub's
  ``where`` (the operators are the same);
* the record's **content**, which memoryhub embeds and ranks, is the text of the
  store's index ``fields`` (or a put's ``index=[...]``), else the value as JSON.
  memoryhub embeds every record with its own embedder: the ``embed`` and ``dims`` of
  an index config are not used, and ``index=False`` still embeds the value's JSON;
* records are tagged ``langgraph``; the store reads only records with that tag.

``put`` with ``ttl`` (minutes) sets the record's expiry; reads do not extend it
(``refresh_ttl`` is accepted and has no effect). A put of ``None`` forgets the key (the
key needs the ``forget`` permission, not ``erase_subject``).

A search without a query lists the matching items, most recently updated first; with a
query it is memoryhub's hybrid search in the namespace, the item's ``score`` the hybrid
score in [0, 1], at most ``MAX_K`` (default 100) results deep (offset included). A
query over every namespace (an empty prefix) searches each data subject by name, at
most 50.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import takewhile
from typing import Any, TypeVar
from urllib.parse import unquote

import httpx
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)
from langgraph.store.base.embed import get_text_at_path, tokenize_path

from ...client import HttpMemoryError
from ...client.errors import error_for
from ...client.rest import RestClient
from ...client.retries import new_idempotency_key, send

__all__ = [
    "TAG",
    "HttpMemoryhubStore",
    "item_address",
    "record_key",
]

#: The tag of the records a store writes, and the only ones it reads.
TAG = "langgraph"
#: Ends a key's namespace labels, before the item's key.
ITEM = "#"
#: How many distinct namespaces a query over every namespace may search.
MAX_QUERY_NAMESPACES = 50
#: Rows per request of a namespace listing.
LISTING_PAGE = 200

T = TypeVar("T")


def _encode(label: str) -> str:
    return label.replace("%", "%25").replace("/", "%2F").replace(ITEM, "%23")


def path_prefix(labels: Sequence[str]) -> str:
    """The key prefix of the items under ``labels`` (a namespace's labels after its
    first), and under any namespace below it."""
    return "".join(_encode(label) + "/" for label in labels)


def record_key(namespace: Sequence[str], key: str) -> str:
    """The memoryhub key of the item ``key`` in ``namespace``."""
    return path_prefix(namespace[1:]) + ITEM + _encode(key)


def _labels(directory: str) -> tuple[str, ...] | None:
    """The labels of a key directory (``memories/deep/``), None when it is not one."""
    if directory and not directory.endswith("/"):
        return None
    return tuple(unquote(label) for label in directory.split("/")[:-1])


def item_address(namespace: str, key: str | None) -> tuple[tuple[str, ...], str] | None:
    """The LangGraph namespace and key of a record (its namespace and key); None for a
    key the store did not make."""
    if not key or ITEM not in key:
        return None
    directory, _, item = key.partition(ITEM)
    labels = _labels(directory)
    if labels is None or ITEM in item:
        return None
    return (namespace, *labels), unquote(item)


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    ends = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(want in ("*", have) for want, have in zip(path, ends, strict=True)) if path else True


@dataclass(frozen=True)
class Row:
    """A record as a store reads it."""

    namespace: str
    key: str | None
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    score: float | None = None

    def item(self) -> SearchItem | None:
        address = item_address(self.namespace, self.key)
        if address is None:
            return None
        namespace, key = address
        return SearchItem(
            namespace=namespace,
            key=key,
            value=dict(self.value),
            created_at=self.created_at,
            updated_at=self.updated_at,
            score=self.score,
        )


class MemoryhubStoreBase(BaseStore):
    """The mapping of LangGraph's operations onto memoryhub; a subclass says how to
    reach memoryhub (the ``_get`` ... ``_directories`` primitives)."""

    supports_ttl = True
    #: The deepest a query may rank (memoryhub's ``MAX_K``).
    max_k: int = 100
    #: The most items one write sends (memoryhub's ``MAX_WRITE_ITEMS``).
    max_write_items: int = 100

    def __init__(self, *, source: str = "memory", index: IndexConfig | None = None) -> None:
        self.source = source
        self.index_config = index
        fields = (index or {}).get("fields") or ["$"]
        self._fields = list(fields)

    # --- what a backend provides ------------------------------------------------------

    def _get(self, namespace: str, key: str) -> Row | None:
        raise NotImplementedError

    def _list(
        self,
        namespace: str | None,
        key_prefix: str,
        where: dict[str, Any] | None,
        offset: int,
        limit: int,
    ) -> list[Row]:
        raise NotImplementedError

    def _query(
        self,
        namespaces: list[str],
        key_prefix: str,
        where: dict[str, Any] | None,
        query: str,
        k: int,
    ) -> list[Row]:
        raise NotImplementedError

    def _write(self, items: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def _forget(self, namespace: str, key: str) -> None:
        raise NotImplementedError

    def _directories(
        self,
        *,
        namespace: str | None,
        key_prefix: str | None,
        delimiter: str | None,
        cursor: str | None,
        limit: int,
    ) -> tuple[list[dict[str, str]], str | None]:
        raise NotImplementedError

    # --- the operations ---------------------------------------------------------------

    def _run(self, ops: Iterable[Op]) -> list[Result]:
        """The batch's results in order. Reads see the store as it was before the batch;
        its puts then apply, the last put of a key winning (as ``InMemoryStore``)."""
        ops = list(ops)
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                results.append(self._get_item(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                if not op.namespace:
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                puts[(tuple(op.namespace), op.key)] = op
                results.append(None)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        self._apply(list(puts.values()))
        return results

    def _get_item(self, op: GetOp) -> Item | None:
        if not op.namespace:
            return None
        row = self._get(op.namespace[0], record_key(op.namespace, op.key))
        found = row.item() if row is not None else None
        if found is None:
            return None
        return Item(
            value=found.value,
            key=found.key,
            namespace=found.namespace,
            created_at=found.created_at,
            updated_at=found.updated_at,
        )

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit <= 0:
            return []
        prefix = tuple(op.namespace_prefix)
        namespace = prefix[0] if prefix else None
        key_prefix = path_prefix(prefix[1:])
        where = dict(op.filter) if op.filter else None
        if op.query:
            depth = min(op.offset + op.limit, self.max_k)
            if op.offset >= depth:
                return []
            namespaces = [namespace] if namespace is not None else self._every_namespace()
            if not namespaces:
                return []
            rows = self._query(namespaces, key_prefix, where, op.query, depth)[op.offset :]
        else:
            rows = self._list(namespace, key_prefix, where, op.offset, op.limit)
        return [item for item in (row.item() for row in rows) if item is not None][: op.limit]

    def _every_namespace(self) -> list[str]:
        rows, _ = self._directories(
            namespace=None,
            key_prefix=None,
            delimiter=None,
            cursor=None,
            limit=MAX_QUERY_NAMESPACES + 1,
        )
        if len(rows) > MAX_QUERY_NAMESPACES:
            raise ValueError(
                f"A query over every namespace searches at most {MAX_QUERY_NAMESPACES} of "
                "them: give a namespace prefix (its first label)."
            )
        return [row["namespace"] for row in rows]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        """The namespaces, in the code point order of (first label, encoded key path),
        walked a page of the server's listing at a time until ``offset + limit`` are
        found. A deeper namespace shares its truncation (``max_depth``) with the
        namespaces next to it, so duplicates are adjacent."""
        if op.limit <= 0:
            return []
        conditions = tuple(op.match_conditions or ())
        prefix = next((c.path for c in conditions if c.match_type == "prefix"), ())
        fixed = tuple(takewhile(lambda label: label != "*", prefix))
        namespace = fixed[0] if fixed else None
        key_prefix = path_prefix(fixed[1:]) if fixed else None
        found: list[tuple[str, ...]] = []
        last: tuple[str, ...] | None = None
        skip = op.offset
        cursor: str | None = None
        while True:
            rows, cursor = self._directories(
                namespace=namespace,
                key_prefix=key_prefix,
                delimiter=ITEM,
                cursor=cursor,
                limit=LISTING_PAGE,
            )
            for row in rows:
                labels = _labels(row["key_prefix"][: -len(ITEM)])
                if labels is None:
                    continue
                full = (row["namespace"], *labels)
                if not all(_matches(condition, full) for condition in conditions):
                    continue
                shown = full[: op.max_depth] if op.max_depth is not None else full
                if shown == last:
                    continue
                last = shown
                if skip:
                    skip -= 1
                    continue
                found.append(shown)
                if len(found) == op.limit:
                    return found
            if cursor is None:
                return found

    def _text(self, op: PutOp) -> str:
        """What memoryhub embeds for the put: its index fields' text, else the value's
        JSON."""
        value = op.value or {}
        whole = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        fields = self._fields if op.index is None else (op.index or [])
        texts: list[str] = []
        for path in fields:
            if path == "$":
                texts.append(whole)
            else:
                texts.extend(str(text) for text in get_text_at_path(value, tokenize_path(path)))
        return "\n".join(text for text in texts if text.strip()) or whole

    def _apply(self, puts: list[PutOp]) -> None:
        items = []
        for op in puts:
            namespace, key = op.namespace, record_key(op.namespace, op.key)
            if op.value is None:
                self._forget(namespace[0], key)
                continue
            item: dict[str, Any] = {
                "namespace": namespace[0],
                "key": key,
                "content": self._text(op),
                "metadata": dict(op.value),
                "tags": [TAG],
            }
            if op.ttl is not None:
                item["ttl_seconds"] = max(1, math.ceil(op.ttl * 60))
            items.append(item)
        for start in range(0, len(items), self.max_write_items):
            self._write(items[start : start + self.max_write_items])


def listing_parameters(
    source: str,
    namespace: str | None,
    key_prefix: str | None,
    delimiter: str | None,
    cursor: str | None,
    limit: int,
) -> dict[str, Any]:
    raw: dict[str, Any] = {"source": source, "limit": limit}
    if namespace is not None:
        raw["namespace"] = namespace
    if key_prefix and namespace is not None:
        raw["key_prefix"] = key_prefix
    if delimiter is not None:
        raw["delimiter"] = delimiter
    if cursor is not None:
        raw["cursor"] = cursor
    return raw


# --- over HTTP ----------------------------------------------------------------------------


class HttpMemoryhubStore(MemoryhubStoreBase):
    """A LangGraph store over a memoryhub server's REST API, in one domain.

    ``api_key`` needs ``read`` for reads, ``write`` for puts and ``forget`` for deletes.
    An error answer raises :class:`~memoryhub.client.HttpMemoryError` (``status``,
    its JSON ``code``, and ``errors`` naming the field). The async methods run the same
    requests in a worker thread. ``max_k`` and ``max_write_items`` are the server's
    ``MAX_K`` and ``MAX_WRITE_ITEMS`` (defaults 100).
    """

    def __init__(  # noqa: PLR0913
        self,
        base_url: str,
        *,
        api_key: str,
        domain: str,
        source: str = "memory",
        index: IndexConfig | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        max_k: int = 100,
        max_write_items: int = 100,
    ) -> None:
        super().__init__(source=source, index=index)
        self._rest = RestClient(
            base_url, api_key=api_key, domain=domain, timeout=timeout, transport=transport
        )
        self.base_url, self.domain = self._rest.base_url, domain
        self.max_k = max_k
        self.max_write_items = max_write_items
        self._client = self._rest.blocking()

    def __repr__(self) -> str:
        return f"HttpMemoryhubStore({self.base_url!r}, domain={self.domain!r})"

    def close(self) -> None:
        """Close the store's connections."""
        self._client.close()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._run(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self._run, list(ops))

    def _url(self, path: str) -> str:
        return self._rest.url(path)

    def _call(self, method: str, url: str, **kwargs: Any) -> Any:
        changes = method != "GET" and not url.endswith("/query")
        response = send(
            self._client,
            method,
            url,
            idempotency_key=new_idempotency_key() if changes else None,
            **kwargs,
        )
        if response.status_code >= 400:
            action = (
                "read"
                if method == "GET" or url.endswith("/query")
                else "forget"
                if url.endswith("/forget")
                else "write"
            )
            raise error_for(response, sources=[self.source], action=action)
        return response.json()

    def _reading(self, method: str, url: str, empty: T, **kwargs: Any) -> Any:
        """A read, where a knowledge base not made yet (no put so far) holds nothing."""
        try:
            return self._call(method, url, **kwargs)
        except HttpMemoryError as exc:
            if exc.code == "unknown_source":
                return empty
            raise

    @staticmethod
    def _row(record: Mapping[str, Any], score: float | None = None) -> Row:
        return Row(
            record["namespace"],
            record.get("key"),
            dict(record.get("metadata") or {}),
            datetime.fromisoformat(record["created_at"]),
            datetime.fromisoformat(record["updated_at"]),
            score,
        )

    def _records(self, params: dict[str, Any], offset: int, limit: int) -> list[Row]:
        wanted = offset + limit
        query = {
            "source": self.source,
            "tag": TAG,
            "ordering": "updated",
            "page_size": min(wanted, LISTING_PAGE),
            **params,
        }
        page = self._reading("GET", self._url("records"), {"results": []}, params=query)
        found = list(page["results"])
        while len(found) < wanted and page.get("next"):
            # Only the next link's cursor: its host is what the server was told, and the
            # key goes nowhere but base_url.
            query["cursor"] = httpx.URL(page["next"]).params["cursor"]
            page = self._call("GET", self._url("records"), params=query)
            found.extend(page["results"])
        return [self._row(record) for record in found[offset:wanted]]

    def _get(self, namespace: str, key: str) -> Row | None:
        rows = self._records({"namespace": namespace, "key": key}, 0, 1)
        return rows[0] if rows else None

    def _list(
        self,
        namespace: str | None,
        key_prefix: str,
        where: dict[str, Any] | None,
        offset: int,
        limit: int,
    ) -> list[Row]:
        params: dict[str, Any] = {"key_prefix": key_prefix}
        if namespace is not None:
            params["namespace"] = namespace
        if where:
            params["where"] = json.dumps(where)
        return self._records(params, offset, limit)

    def _query(
        self,
        namespaces: list[str],
        key_prefix: str,
        where: dict[str, Any] | None,
        query: str,
        k: int,
    ) -> list[Row]:
        body: dict[str, Any] = {
            "query": query,
            "k": k,
            "sources": [self.source],
            "namespaces": namespaces,
            "key_prefix": key_prefix,
            "tags": [TAG],
        }
        if where:
            body["where"] = where
        answer = self._reading("POST", self._url("query"), {"items": []}, json=body)
        rows = []
        for hit in answer["items"]:
            # A query's items say when a record was created, not when it last changed.
            try:
                record = self._call("GET", self._url(f"records/{hit['id']}"))
            except HttpMemoryError as exc:
                if exc.status == 404:
                    continue  # forgotten since it was ranked
                raise
            rows.append(self._row(record, hit.get("score")))
        return rows

    def _write(self, items: list[dict[str, Any]]) -> None:
        self._call("POST", self._url("records"), json={"source": self.source, "items": items})

    def _forget(self, namespace: str, key: str) -> None:
        body = {"namespace": namespace, "key": key, "source": self.source}
        self._reading("POST", self._url("forget"), None, json=body)

    def _directories(
        self,
        *,
        namespace: str | None,
        key_prefix: str | None,
        delimiter: str | None,
        cursor: str | None,
        limit: int,
    ) -> tuple[list[dict[str, str]], str | None]:
        params = listing_parameters(self.source, namespace, key_prefix, delimiter, cursor, limit)
        page = self._reading(
            "GET", self._url("namespaces"), {"results": [], "next": None}, params=params
        )
        return page["results"], page["next"]
