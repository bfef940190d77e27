"""memoryhub.testing, as a host project's tests would use it."""

from __future__ import annotations

import asyncio

import pytest

from memoryhub.items import MemoryItem
from memoryhub.models import MemoryRecord
from memoryhub.scope import Scope
from memoryhub.sources import MemoryContext
from memoryhub.testing import (  # noqa: F401 (fixtures, as a host's conftest imports them)
    InMemoryMemory,
    api_key,
    create_api_key,
    create_memory_scope,
    memory_client,
    memory_scope,
)


def test_the_in_memory_source_is_tenant_scoped_and_ranks_by_words() -> None:
    memory = InMemoryMemory()
    acme = MemoryContext(scope=Scope(org_id=1, domain_id=1), persist=False)
    globex = MemoryContext(scope=Scope(org_id=2, domain_id=2), persist=False)

    async def run() -> None:
        await memory.write(
            [
                MemoryItem(content="Refunds take 5 days.", source="x", metadata={"team": "a"}),
                MemoryItem(content="Refunds need a receipt over $100.", source="x"),
                MemoryItem(content="Shipping is free.", source="x"),
            ],
            ctx=acme,
        )
        hits = await memory.query("how many days do refunds take", k=5, ctx=acme)
        assert [hit.content for hit in hits] == [
            "Refunds take 5 days.",
            "Refunds need a receipt over $100.",
        ]
        assert hits[0].source == "memory" and hits[0].id
        assert await memory.query("refunds", k=5, ctx=globex) == []
        only = await memory.query("refunds", k=5, ctx=acme, where={"team": "a"})
        assert [hit.content for hit in only] == ["Refunds take 5 days."]
        assert await memory.forget(acme) == 3
        assert await memory.query("refunds", k=5, ctx=acme) == []

    asyncio.run(run())


@pytest.mark.django_db
def test_the_fixtures_give_a_working_client_of_a_new_tenant(memory_client, memory_scope):  # noqa: F811
    written = memory_client.post(
        "/api/v1/domains/support/records", {"items": [{"content": "hello"}]}, format="json"
    )
    assert written.status_code in (200, 202), written.content
    assert MemoryRecord.unscoped.get().org_id == memory_scope.org_id


@pytest.mark.django_db
def test_a_key_of_one_helper_tenant_cannot_read_another():
    from rest_framework.test import APIClient

    mine, theirs = create_memory_scope(), create_memory_scope()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {create_api_key(mine, write=False)}")
    assert client.get("/api/v1/domains/support/records").status_code == 200
    assert mine.org_id != theirs.org_id
    refused = client.post(
        "/api/v1/domains/support/records", {"items": [{"content": "x"}]}, format="json"
    )
    assert refused.status_code == 403
