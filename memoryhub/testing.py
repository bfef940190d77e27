"""Test helpers for host projects: an in-memory source for unit tests that need no
database, and factories and pytest fixtures for tests that use memoryhub for real.

Unit tests (no PostgreSQL)::

    from memoryhub.scope import Scope
    from memoryhub.sources import MemoryContext, MemoryItem
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

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .items import MemoryItem

if TYPE_CHECKING:
    from rest_framework.test import APIClient

    from .scope import Scope
    from .sources import MemoryContext

__all__ = [
    "InMemoryMemory",
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


def create_memory_scope(org: str | None = None, domain: str = "support") -> Scope:
    """A new org (``org`` or a random slug) with one domain; its scope."""
    from tenants.models import Domain, Org

    from .scope import Scope

    slug = org or f"test-{uuid.uuid4().hex[:8]}"
    created = Org.objects.create(slug=slug, name=slug)
    return Scope.for_domain(Domain.objects.create(org=created, slug=domain))


def create_api_key(
    scope: Scope, *, read: bool = True, write: bool = True, forget: bool = False
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
