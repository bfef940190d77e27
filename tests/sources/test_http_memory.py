"""HttpMemory end to end: an agent in another service composes remote memory over HTTP
(a live server on the test database) exactly like local memory."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from memoryhub.client import HttpMemory, HttpMemoryError
from memoryhub.exceptions import WriteRefused
from memoryhub.items import MemoryItem
from memoryhub.services import knowledge_bases
from memoryhub.sources import CompositeMemory, MemoryContext, MemorySource, as_grounder
from tests.factories import create_api_key
from tests.fakes import FakeMemory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def remote(live_server, tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    return live_server.url, key


def test_http_memory_writes_queries_and_grounds(remote, other_tenant):
    url, key = remote
    memory = HttpMemory(url, api_key=key, domain="support", namespaces=["user:alice"])
    assert isinstance(memory, MemorySource)
    ctx = MemoryContext()

    async def main():
        outcome = await memory.write(
            [
                MemoryItem(
                    content="Alice prefers EUR.",
                    source="agent",
                    metadata={"id": "currency"},
                    occurred_at=datetime(2025, 3, 1, 9, 30, tzinfo=UTC),
                ),
                MemoryItem(content="Alice lives in Lyon.", source="agent"),
            ],
            ctx=ctx,
        )
        items = await memory.query("what currency does Alice prefer", k=1, ctx=ctx)
        composite = CompositeMemory([memory, FakeMemory("notes", [MemoryItem("note", "notes")])])
        mixed = await composite.query("currency", k=5, ctx=ctx)
        grounding = await as_grounder(memory, k=1)(ctx, "currency EUR")
        return outcome, items, mixed, grounding

    outcome, items, mixed, grounding = asyncio.run(main())
    assert outcome.accepted == ["memory"]
    [item] = items
    assert (item.content, item.source, item.key, item.namespace) == (
        "Alice prefers EUR.",
        "memory",
        "currency",
        "user:alice",
    )
    assert item.created_at is not None
    assert item.occurred_at == datetime(2025, 3, 1, 9, 30, tzinfo=UTC)  # written, read back
    assert [i.source for i in mixed] == ["memory", "memory", "notes"]
    assert grounding == "[memory] Alice prefers EUR."


def test_http_memory_maps_errors(remote):
    url, key = remote
    ctx = MemoryContext()
    read_only = HttpMemory(url, api_key=key, domain="support", write_to="handbook")
    with pytest.raises(WriteRefused) as refused:
        asyncio.run(read_only.write([MemoryItem("guess", "agent")], ctx=ctx))
    assert (refused.value.source, refused.value.n) == ("handbook", 1)
    elsewhere = HttpMemory(url, api_key=key, domain="no-such-domain")
    with pytest.raises(HttpMemoryError) as missing:
        asyncio.run(elsewhere.query("x", k=1, ctx=ctx))
    assert (missing.value.status, missing.value.code) == (404, "domain_not_found")
    bad_key = HttpMemory(url, api_key="nope.nope", domain="support")
    with pytest.raises(HttpMemoryError) as unauthorized:
        asyncio.run(bad_key.query("x", k=1, ctx=ctx))
    assert unauthorized.value.status == 401
    with pytest.raises(HttpMemoryError) as invalid:
        asyncio.run(HttpMemory(url, api_key=key, domain="support").query("x", k=0, ctx=ctx))
    assert invalid.value.errors == {"k": ["must be an integer from 1 to 100."]}


def test_another_tenants_key_sees_nothing_over_http(remote, other_tenant):
    url, key = remote
    _, other_key = create_api_key(org=other_tenant.org, can_read=True, can_write=True)
    ctx = MemoryContext()
    mine = HttpMemory(url, api_key=key, domain="support")
    theirs = HttpMemory(url, api_key=other_key, domain="support")
    asyncio.run(mine.write([MemoryItem("acme confidential plan", "x")], ctx=ctx))
    assert asyncio.run(theirs.query("confidential plan", k=5, ctx=ctx)) == []
    assert [i.content for i in asyncio.run(mine.query("confidential plan", k=5, ctx=ctx))] == [
        "acme confidential plan"
    ]
