"""Test helpers for host projects: an in-memory source and key/value store
(``InMemoryMemory``, ``InMemoryMemoryStore``) for unit tests that need no database, and
factories and pytest fixtures for tests that use memoryhub for real.

Unit tests (no PostgreSQL)::

    from memoryhub.items import MemoryItem
    from memoryhub.scope import Scope
    from memoryhub.sources import MemoryContext
    from memoryhub.testing import InMemoryMemory

    async def test_my_agent_grounds_its_answer():
        memory = InMemoryMemory()
        ctx = MemoryContext(scope=Scope(org_id=1, domain_id=1), persist=False)
        await memory.write([MemoryItem(content="Refunds take 5 days.", source="memory")], ctx=ctx)
        assert (await memory.query("refunds", k=1, ctx=ctx))[0].content == "Refunds take 5 days."

Tests against memoryhub itself (PostgreSQL with pgvector; pytest-django): import the
fixtures into a ``conftest.py`` (``from memoryhub.testing import memory_scope, api_key,
memory_client  # noqa: F401``) or list ``"memoryhub.testing"`` in the root conftest's
``pytest_plugins``::

    def test_my_view_writes_memory(memory_client):
        response = memory_client.post(
            "/memory/api/v1/domains/support/records",
            {"items": [{"content": "hello"}]},
            format="json",
        )
        assert response.status_code == 202
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .client import MemoryKind, StoredRecord
from .client.stores import search_limit
from .items import MemoryItem
from .scope import Scope

if TYPE_CHECKING:
    from rest_framework.test import APIClient

    from .sources import MemoryContext

__all__ = [
    "InMemoryMemory",
    "InMemoryMemoryStore",
    "api_key",
    "create_api_key",
    "create_memory_scope",
    "memory_client",
    "memory_scope",
]

_WORDS = re.compile(r"\w+")


class InMemoryMemory:
    """A :class:`memoryhub.sources.MemorySource` in a dict: per tenant (the context's
    scope), ranked by the share of the query's words an item contains, ``where`` as
    equality on metadata. For unit tests of code that takes a memory source."""

    def __init__(self, name: str = "memory") -> None:
        self.name = name
        self._items: dict[Any, list[MemoryItem]] = {}

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        words = {word.lower() for word in _WORDS.findall(query)}
        scored = []
        for item in self._items.get(ctx.scope, []):
            if where and any(item.metadata.get(key) != value for key, value in where.items()):
                continue
            found = {word.lower() for word in _WORDS.findall(item.content)}
            score = len(words & found) / len(words) if words else 0.0
            if score > 0:
                scored.append((score, item))
        scored.sort(key=lambda pair: -pair[0])
        return [
            MemoryItem(
                content=item.content,
                source=self.name,
                score=score,
                metadata=item.metadata,
                id=item.id,
            )
            for score, item in scored[:k]
        ]

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> None:
        stored = self._items.setdefault(ctx.scope, [])
        for item in items:
            stored.append(
                MemoryItem(
                    content=item.content,
                    source=self.name,
                    metadata=dict(item.metadata),
                    id=item.id or str(uuid.uuid4()),
                )
            )

    async def forget(self, ctx: MemoryContext) -> int:
        """Drop everything of the context's tenant; return how many items went."""
        return len(self._items.pop(ctx.scope, []))


class InMemoryMemoryStore:
    """A :class:`memoryhub.client.MemoryStore` in a dict, for unit tests of code that
    takes a store: the semantics of ``DjangoMemoryStore`` (and the HTTP stores) with no
    tenant, policy or validation.

    ``source`` names the knowledge base it reads and writes; :meth:`with_source` gives a
    store of another knowledge base over the same dict (one domain's), so
    ``forget(..., all_sources=True)`` reaches it. Values are kept as their JSON (a tuple
    comes back a list, as from the database). No knowledge base is read-only.
    """

    def __init__(
        self,
        source: str = "memory",
        *,
        _records: dict[tuple[str, str, str], StoredRecord] | None = None,
    ) -> None:
        self.source = source
        self._records: dict[tuple[str, str, str], StoredRecord] = (
            {} if _records is None else _records
        )

    def with_source(self, source: str) -> InMemoryMemoryStore:
        """A store of knowledge base ``source`` sharing this store's records."""
        return InMemoryMemoryStore(source, _records=self._records)

    def _now(self) -> datetime:
        # Strictly increasing, so newest-first never depends on the clock's resolution.
        latest = max((r.updated_at for r in self._records.values() if r.updated_at), default=None)
        now = datetime.now(UTC)
        return latest + timedelta(microseconds=1) if latest and now <= latest else now

    async def put(self, record: StoredRecord) -> None:
        now = self._now()
        identity = (self.source, record.scope, record.key)
        existing = self._records.get(identity)
        self._records[identity] = dataclasses.replace(
            record,
            value=json.loads(json.dumps(record.value)),
            timestamp=existing.timestamp if existing is not None else now,
            updated_at=now,
            id=existing.id if existing is not None else str(uuid.uuid4()),
        )

    async def get(self, *, scope: str, key: str) -> StoredRecord | None:
        return self._records.get((self.source, scope, key))

    async def search(
        self,
        *,
        scope: str,
        kind: MemoryKind | str | None = None,
        key_prefix: str | None = None,
        tag: str | None = None,
        limit: int = 100,
    ) -> list[StoredRecord]:
        found = [
            record
            for (source, namespace, key), record in self._records.items()
            if source == self.source
            and namespace == scope
            and (kind is None or record.kind == kind)
            and key.startswith(key_prefix or "")
            and (tag is None or tag in record.tags)
        ]
        found.sort(key=lambda record: (record.updated_at, record.timestamp), reverse=True)
        return found[: search_limit(limit)]

    async def forget(self, *, scope: str, key: str | None = None, all_sources: bool = False) -> int:
        if scope == "" and key is None and all_sources:
            raise ValueError('forgetting the shared namespace ("") needs a knowledge base.')
        doomed = [
            identity
            for identity in self._records
            if (all_sources or identity[0] == self.source)
            and identity[1] == scope
            and (key is None or identity[2] == key)
        ]
        for identity in doomed:
            del self._records[identity]
        return len(doomed)


def create_memory_scope(org: str | None = None, domain: str = "support") -> Scope:
    """A new org (``org`` or a random slug) with one domain; its scope."""
    from tenants.models import Domain, Org

    slug = org or f"test-{uuid.uuid4().hex[:8]}"
    created = Org.objects.create(slug=slug, name=slug)
    return Scope.for_domain(Domain.objects.create(org=created, slug=domain))


def create_api_key(
    scope: Scope,
    *,
    read: bool = True,
    write: bool = True,
    forget: bool = False,
    export: bool = False,
) -> str:
    """A new API key of the scope's org, bound to its domain; its plaintext."""
    from tenants.models import ApiKey

    _, key = ApiKey.objects.create_key(
        name="test key",
        org_id=scope.org_id,
        domain_id=scope.domain_id,
        can_read=read,
        can_write=write,
        can_forget=forget,
        can_export=export,
    )
    return str(key)


def _client(key: str) -> APIClient:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


try:
    import pytest
except ImportError:  # pragma: no cover - the fixtures are for pytest users
    pass
else:

    @pytest.fixture
    def memory_scope(db: None) -> Scope:
        """A new org with a ``support`` domain (needs pytest-django's ``db``)."""
        return create_memory_scope()

    @pytest.fixture
    def api_key(memory_scope: Scope) -> str:
        """A read/write API key of ``memory_scope``."""
        return create_api_key(memory_scope)

    @pytest.fixture
    def memory_client(api_key: str) -> APIClient:
        """A DRF test client that sends ``api_key``."""
        return _client(api_key)
