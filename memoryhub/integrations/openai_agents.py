"""An OpenAI Agents SDK session kept in memoryhub: :class:`MemoryhubSession`.

``pip install "django-memoryhub[openai-agents]"``, then give the runner a session over
any :class:`~memoryhub.client.MemoryStore` (``DjangoMemoryStore`` in process,
``HttpMemoryStore`` over the REST API)::

    from agents import Agent, Runner
    from memoryhub.integrations.openai_agents import MemoryhubSession

    session = MemoryhubSession("chat-42", store)
    await Runner.run(agent, "What did I ask you yesterday?", session=session)

It follows the SDK's ``Session`` protocol with ``SQLiteSession``'s semantics.

Where the items live: a session is the namespace ``session:<session_id>`` of the store's
knowledge base, in the store's tenant (the ``Scope`` of a ``DjangoMemoryStore``, the API
key's org over HTTP), so two orgs' sessions of the same id never meet. Each item is one
``episodic`` record whose value is the item (a JSON object) and whose key is
``item:<call id>-<place>``: the call id of one ``add_items`` (nanoseconds since the epoch,
strictly increasing in a process, then random hex digits), then the item's place in that
call. Keys sort as the items were added: ``get_items`` returns them oldest first, one
call's items stay together and in order, and two calls that race (in one process or in
several) write different keys, so neither loses an item. The namespace is the session's:
``clear_session`` forgets all of it.

A session can live in a data subject's namespace instead: ``MemoryhubSession("chat-42",
store, namespace="user:alice")`` keys its items ``session:chat-42/item:...`` there, so
erasing ``user:alice`` erases the conversation too; ``clear_session`` then forgets the
session's items only.

Bounds: the store's ``search`` returns at most 1000 records and has no cursor, so a read
takes the session's newest records (by last write, at most ``MAX_ITEMS + 1``) and orders
them by key. A session of up to :data:`MAX_ITEMS` items is always read whole. Past that,
``get_items()`` without a limit, or with one above ``MAX_ITEMS``, raises
:class:`SessionTooLarge` rather than pass a part off as the whole conversation; a limit of
at most ``MAX_ITEMS`` (``SessionSettings(limit=...)``) still answers with the latest items.

The items are memoryhub records like any other: each has its history, expiry and
erasure apply, and the store's permissions decide (``read`` for ``get_items``, ``write``
for ``add_items``, ``forget`` for ``pop_item`` and ``clear_session``). The server's bounds
apply to each item: one whose JSON is larger than ``MAX_METADATA_BYTES`` is refused with the
store's ``ValidationFailed``, and ``add_items`` then takes back the items of the call it
had already written.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from contextlib import suppress
from secrets import token_hex
from typing import Any, cast

from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit

from ..client import MemoryKind, MemoryStore, StoredRecord
from ..exceptions import WriteRefused

__all__ = [
    "KEY_PREFIX",
    "MAX_ITEMS",
    "NAMESPACE_PREFIX",
    "InvalidSessionItems",
    "MemoryhubSession",
    "SessionTooLarge",
]

#: The most items one read returns: one fewer than the store's search returns at most, so
#: a read that gets more knows the session holds more than it can return.
MAX_ITEMS = 999
#: A session's namespace is this followed by its id.
NAMESPACE_PREFIX = "session:"
#: Every item's key starts with this; other keyed records in the namespace are not items.
KEY_PREFIX = "item:"


class InvalidSessionItems(ValueError):
    """``add_items`` was given something other than a list of JSON objects; nothing was
    written. ``errors`` maps each place (``items``, ``items[2]``) to what is wrong there."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__(
            "; ".join(f"{path}: {' '.join(messages)}" for path, messages in errors.items())
        )


class SessionTooLarge(RuntimeError):
    """The session holds more items than one read of the store returns."""


class _CallIds:
    """Ids for ``add_items`` calls that sort in the order they were taken: nanoseconds
    since the epoch, strictly increasing in this process even when the wall clock steps
    back, then random digits that keep two processes' ids of the same instant apart."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> str:
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            stamp = self._last
        return f"{stamp:020d}-{token_hex(4)}"


_call_ids = _CallIds()


def _json_objects(items: object) -> list[dict[str, Any]]:
    """``items`` as JSON objects (a round trip through JSON text, so what is stored is what
    a read returns), or :class:`InvalidSessionItems` naming every bad one."""
    if not isinstance(items, list | tuple):
        raise InvalidSessionItems(
            {"items": [f"must be a list of items (JSON objects), not {type(items).__name__}."]}
        )
    if len(items) > MAX_ITEMS:
        raise InvalidSessionItems({"items": [f"at most {MAX_ITEMS} items in one call."]})
    errors: dict[str, list[str]] = {}
    objects: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            errors[f"items[{index}]"] = [f"must be a JSON object, not {type(item).__name__}."]
            continue
        try:
            objects.append(json.loads(json.dumps(dict(item), allow_nan=False)))
        except (TypeError, ValueError) as error:
            errors[f"items[{index}]"] = [f"is not JSON: {error}."]
    if errors:
        raise InvalidSessionItems(errors)
    return objects


class MemoryhubSession:
    """The conversation ``session_id``, kept in ``store`` (see the module for where and how).

    ``session_settings`` (a ``SessionSettings`` or its dict) gives the default ``limit`` of
    ``get_items``, as for the SDK's own sessions.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: MemoryStore,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        namespace: str | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string.")
        if namespace is not None and not isinstance(namespace, str):
            raise ValueError("namespace must be a string.")
        self.session_id = session_id
        self.store = store
        self.own_namespace = namespace is None
        if namespace is None:
            self.namespace = f"{NAMESPACE_PREFIX}{session_id}"
            self.key_prefix = KEY_PREFIX
        else:
            self.namespace = namespace
            # "/" ends the session's id: one in the id itself is escaped, so session "a"
            # never reads session "a/item:b".
            escaped = session_id.replace("%", "%25").replace("/", "%2F")
            self.key_prefix = f"{NAMESPACE_PREFIX}{escaped}/{KEY_PREFIX}"
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.session_id!r}, {self.store!r})"

    async def _read(self) -> tuple[list[StoredRecord], bool]:
        """The newest items (at most ``MAX_ITEMS + 1`` records) oldest first, and whether
        they are all of the session's."""
        records = await self.store.search(
            scope=self.namespace,
            kind=MemoryKind.EPISODIC,
            key_prefix=self.key_prefix,
            limit=MAX_ITEMS + 1,
        )
        complete = len(records) <= MAX_ITEMS
        # A record put in the namespace by other code is not an item unless it is one.
        items = [record for record in records if isinstance(record.value, dict)]
        items.sort(key=lambda record: record.key)
        return items, complete

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit`` (or the settings' limit) the
        latest ``limit`` of them, still oldest first. As for ``SQLiteSession``, a limit of 0
        returns nothing and a negative one everything. :class:`SessionTooLarge` when the
        session holds more than ``MAX_ITEMS`` items and more than that are asked for."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted < 0:
            wanted = None
        if wanted == 0:
            return []
        records, complete = await self._read()
        if not complete and (wanted is None or wanted > MAX_ITEMS):
            raise SessionTooLarge(
                f"session {self.session_id!r} holds more than {MAX_ITEMS} items, more than"
                f" one read returns: ask for at most {MAX_ITEMS} (get_items(limit=...) or"
                " SessionSettings(limit=...)), or clear the session."
            )
        if wanted is not None:
            records = records[-wanted:]
        return [cast(TResponseInputItem, record.value) for record in records]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (JSON objects) in order, or none of them:
        :class:`InvalidSessionItems` before anything is written; when the store fails on
        one, the items of this call it had written are forgotten again and its error is
        raised."""
        values = _json_objects(items)
        if not values:
            return
        call = _call_ids.next()
        written: list[str] = []
        try:
            for place, value in enumerate(values):
                key = f"{self.key_prefix}{call}-{place:06d}"
                await self.store.put(
                    StoredRecord(
                        scope=self.namespace, key=key, value=value, kind=MemoryKind.EPISODIC
                    )
                )
                written.append(key)
        except BaseException:
            for key in written:
                # The store's own error is the one to raise; a failed take-back leaves the
                # item in the session, as if the call had stopped there.
                with suppress(Exception):
                    await self.store.forget(scope=self.namespace, key=key)
            raise

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item, or None when the session is empty. Two pops
        that race return two different items."""
        kept: str | None = None
        while True:
            records, _ = await self._read()
            if not records:
                return None
            latest = records[-1]
            if await self.store.forget(scope=self.namespace, key=latest.key):
                return cast(TResponseInputItem, latest.value)
            if latest.key == kept:  # still there after a forget: the store keeps it
                raise WriteRefused(getattr(self.store, "source", ""), 1)
            # Another caller took it first: the session has one item fewer, read again.
            kept = latest.key

    async def clear_session(self) -> None:
        """Forget the session: its own namespace in the store's knowledge base (its items,
        and anything else written there), or, in a namespace given to it, its items one by
        one. A namespace with no keyed record is left alone, so clearing a session that
        was never written to does nothing (a forget would be refused in a domain whose
        knowledge base has not been written to yet)."""
        if self.own_namespace:
            if await self.store.search(scope=self.namespace, limit=1):
                await self.store.forget(scope=self.namespace)
            return
        while records := await self.store.search(
            scope=self.namespace, key_prefix=self.key_prefix, limit=MAX_ITEMS + 1
        ):
            forgotten = 0
            for record in records:
                forgotten += await self.store.forget(scope=self.namespace, key=record.key)
            if not forgotten:  # the store keeps them (a read-only knowledge base)
                raise WriteRefused(getattr(self.store, "source", ""), len(records))
