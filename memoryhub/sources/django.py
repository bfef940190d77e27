"""Memory sources over memoryhub's own services: ``DjangoMemory`` and ``DjangoMemoryStore``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections

from .. import policy
from ..client import MemoryKind, StoredRecord, StoredVersion
from ..client.http import WritePolicy
from ..client.stores import search_limit, stored_content, stored_versions
from ..exceptions import WriteRefused
from ..items import MemoryItem, WriteResult, as_write_item, thaw
from ..scope import Scope, ScopeRequired
from ..services import forget as forget_service
from ..services import history as history_service
from ..services import knowledge_bases
from ..services import query as query_service
from ..services import records as records_service
from ..services import write as write_service
from .base import MemoryContext

__all__ = ["DjangoMemory", "DjangoMemoryStore"]


def _scope_for(fixed: Scope | None, ctx: MemoryContext | None) -> Scope:
    given = getattr(ctx, "scope", None)
    if fixed is not None:
        if given is not None and given != fixed:
            raise PermissionError(f"this memory is bound to {fixed}, the context is {given}")
        return fixed
    if not isinstance(given, Scope):
        raise ScopeRequired("DjangoMemory needs a scope: bind one or pass ctx.scope")
    return given


T = TypeVar("T")


def blocking(function: Callable[[], T]) -> T:
    """Run a database read from sync code, even when an event loop runs in this thread
    (Django refuses database access there): in a helper thread, waited for."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return function()

    def in_thread() -> T:
        try:
            return function()
        finally:
            connections.close_all()  # the thread's own connection ends with it

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(in_thread).result()


class DjangoMemory:
    """A MemorySource over the query and write services for knowledge bases of a scope.

    ``sources`` are the knowledge bases queried (default: all of the domain); a name
    the domain lacks raises :class:`~memoryhub.exceptions.UnknownSource`, as the
    REST API answers 400 ``unknown_source``. ``write_to`` is where writes go (default
    ``memory``), through the write service, so read-only knowledge bases refuse or
    ignore exactly as over the API. The scope is fixed at construction or taken from
    ``ctx.scope`` per call.

    Naming: ``name`` is the one queried knowledge base's name, else ``write_to``'s; the
    items a query returns always carry *their own* knowledge base's name as ``source``
    (a memory over ``handbook`` and ``memory`` is named ``memory`` and returns items
    from ``handbook`` as ``source="handbook"``), so attribution and dedupe are per
    knowledge base, never per Python object.

    ``accepts_writes`` is the write service's answer for ``write_to`` in the bound scope
    (False for a read-only knowledge base, ``refuse`` or ``ignore``), read when first
    asked and kept ``POLICY_SECONDS``; every write's outcome updates it. Unbound (scope
    per call) it is True, and the write result says what happened. The write service
    records the ``memory.written`` observation, so decorators do not record a second
    one (``observes_writes``).

    ``principal`` is who the memory acts for (``memoryhub.policy``): by default operator
    code (``SYSTEM``); an agent that holds an API key passes
    ``policy.principal_for_key(key)``, and a query then needs ``read`` and a write
    ``write``, exactly as over the REST API (``PolicyDenied`` otherwise).
    """

    observes_writes: ClassVar[bool] = True
    POLICY_SECONDS: ClassVar[float] = 30.0

    def __init__(
        self,
        scope: Scope | None = None,
        *,
        sources: Sequence[str] | None = None,
        write_to: str = "memory",
        name: str | None = None,
        mode: str = "hybrid",
        namespaces: Sequence[str] = ("",),
        principal: policy.Principal = policy.SYSTEM,
    ) -> None:
        self.scope = scope
        self.principal = principal
        self.sources = tuple(sources) if sources is not None else None
        self.write_to = write_to
        self.mode = mode
        self.namespaces = tuple(namespaces)
        self.name = name or (
            self.sources[0] if self.sources and len(self.sources) == 1 else write_to
        )
        self._policy = WritePolicy(self.POLICY_SECONDS)

    @property
    def accepts_writes(self) -> bool:
        scope, source = self.scope, self.write_to
        if scope is None:
            return True
        return self._policy.get(
            lambda: blocking(lambda: knowledge_bases.accepts_writes(scope, source))
        )

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        scope = _scope_for(self.scope, ctx)
        policy.require(self.principal, policy.Action.READ, scope)
        result = await sync_to_async(query_service.query, thread_sensitive=True)(
            scope,
            query=query,
            k=k,
            sources=list(self.sources) if self.sources is not None else None,
            namespaces=list(self.namespaces),
            where=thaw(where) if where else None,
            mode=self.mode,
        )
        return list(result.items)

    async def write(
        self, items: Sequence[MemoryItem], *, ctx: MemoryContext | None = None
    ) -> WriteResult:
        scope = _scope_for(self.scope, ctx)
        policy.require(self.principal, policy.Action.WRITE, scope)
        default = self.namespaces[0] if len(self.namespaces) == 1 else None
        raw = [as_write_item(item, default_namespace=default) for item in items]
        try:
            result = await sync_to_async(write_service.write, thread_sensitive=True)(
                scope,
                raw,
                sources=[self.write_to],
                principal=policy.AgentPrincipal(label=getattr(ctx, "actor", "") or ""),
            )
        except WriteRefused:
            self._learn(scope, accepts=False)
            raise
        self._learn(scope, accepts=self.write_to not in result.refused)
        return result

    def _learn(self, scope: Scope, *, accepts: bool) -> None:
        if scope == self.scope:
            self._policy.remember(accepts)


class DjangoMemoryStore:
    """The key/value ``MemoryStore`` of seed 004 (see :mod:`memoryhub.sources`) over the
    same services and tables.

    Its ``scope`` strings (``user:alice``) are namespaces inside the domain this store is
    bound to; ``(scope, key)`` is the identity. Values are JSON; strings are stored as
    the record's content (searchable), anything else as its JSON text. It reads and
    writes one knowledge base, ``source``; records without a key are not its.

    ``principal`` is who the store acts for, as for :class:`DjangoMemory`: ``put`` needs
    ``write``, ``get`` and ``search`` ``read``, ``forget`` ``forget`` (and
    ``erase_subject`` for a whole namespace), or :class:`~memoryhub.exceptions.PolicyDenied`.
    """

    def __init__(
        self,
        scope: Scope,
        *,
        source: str = "memory",
        principal: policy.Principal = policy.SYSTEM,
    ) -> None:
        self.tenant = scope
        self.source = source
        self.principal = principal

    def _require(self, action: policy.Action) -> None:
        policy.require(self.principal, action, self.tenant)

    async def put(self, record: StoredRecord) -> None:
        """Write or overwrite ``(record.scope, record.key)`` through the write service: a
        read-only knowledge base refuses (``WriteRefused``) or ignores it by its policy."""
        self._require(policy.Action.WRITE)
        item = {
            "content": stored_content(record.value),
            "key": record.key,
            "namespace": record.scope,
            "kind": str(record.kind),
            "tags": list(record.tags),
            "metadata": {"value": record.value},
        }
        await sync_to_async(write_service.write, thread_sensitive=True)(
            self.tenant, [item], sources=[self.source]
        )

    def _select(self, scope: str, **filters: str) -> Any:
        # The records list of the REST API, so both stores select and order alike; an
        # empty key prefix selects the records that have a key.
        filters.setdefault("key_prefix", "")
        return records_service.list_records(
            self.tenant, {"namespace": scope, "source": self.source, **filters}, ordering="updated"
        )

    @staticmethod
    def _to_record(row: Any) -> StoredRecord:
        return StoredRecord(
            scope=row.namespace,
            key=row.key,
            value=row.metadata.get("value", row.content),
            kind=row.kind,
            tags=tuple(row.tags),
            timestamp=row.created_at,
            updated_at=row.updated_at,
            id=str(row.pk),
        )

    async def get(self, *, scope: str, key: str) -> StoredRecord | None:
        """The record, or None when there is none."""
        self._require(policy.Action.READ)

        def fetch() -> StoredRecord | None:
            row = self._select(scope, key=key).first()
            return self._to_record(row) if row is not None else None

        return await sync_to_async(fetch, thread_sensitive=True)()

    async def history(self, *, scope: str, key: str) -> list[StoredVersion]:
        """The key's states, newest first (the current one first); [] when missing."""
        self._require(policy.Action.READ)

        def fetch() -> list[StoredVersion]:
            row = self._select(scope, key=key).first()
            if row is None:
                return []
            return stored_versions(history_service.history(self.tenant, row.pk))

        return await sync_to_async(fetch, thread_sensitive=True)()

    async def search(
        self,
        *,
        scope: str,
        kind: MemoryKind | str | None = None,
        key_prefix: str | None = None,
        tag: str | None = None,
        limit: int = 100,
    ) -> list[StoredRecord]:
        """Newest first (by last update), filtered by kind, key prefix and tag; at most
        ``limit`` (and never more than 1000) records."""
        self._require(policy.Action.READ)
        filters = {"kind": kind, "key_prefix": key_prefix, "tag": tag}
        given = {name: str(value) for name, value in filters.items() if value is not None}

        def fetch() -> list[StoredRecord]:
            rows = self._select(scope, **given)[: search_limit(limit)]
            return [self._to_record(row) for row in rows]

        return await sync_to_async(fetch, thread_sensitive=True)()

    async def forget(self, *, scope: str, key: str | None = None, all_sources: bool = False) -> int:
        """Hard-delete one key, or the whole namespace when ``key`` is None; return how
        many records went.

        By default only in this store's knowledge base (the one ``get`` and ``search``
        read). With ``all_sources`` in every knowledge base of the domain, as the forget
        service erases: a namespace (a data subject's erasure) reaches read-only
        knowledge bases too; one key does not, and a read-only knowledge base holding it
        refuses the whole forget (``WriteRefused``, nothing deleted) or, when its policy
        is ``ignore``, keeps its record (not counted). The shared namespace ``""`` can
        only be forgotten key by key, or in one knowledge base.
        """
        self._require(policy.Action.FORGET)
        request = forget_service.ForgetRequest(
            namespace=scope, key=key, source=None if all_sources else self.source
        )
        if request.is_subject_erasure:
            self._require(policy.Action.ERASE_SUBJECT)
        # The store's changes are an agent's, read-only knowledge bases included (as put);
        # its principal says what it may do, asked above.
        result = await sync_to_async(forget_service.forget, thread_sensitive=True)(
            self.tenant, request
        )
        return result.deleted
