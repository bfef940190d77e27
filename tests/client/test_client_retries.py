"""Every client sends its writes again when it did not hear the answer, and the server
stores them once: the network drops the answer of a committed write (the request did
reach a live server and commit), or the server answers 503 while the database cancels
the write. Two orgs: the other's memory never changes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from memoryhub.client import HttpMemory, HttpMemoryStore, StoredRecord, SyncHttpMemoryStore
from memoryhub.client.retries import RetryPolicy, send
from memoryhub.integrations.langgraph import HttpMemoryhubStore
from memoryhub.items import MemoryItem
from memoryhub.models import MemoryRecord
from memoryhub.services import write
from memoryhub.services.store import transient
from tests import cluster
from tests.cancels import SHARD_GONE
from tests.factories import create_api_key

pytestmark = pytest.mark.django_db(transaction=True)


class DropsAnswers:
    """The network between client and server: the first ``drops`` answers to requests
    that change memory are lost after the server sent them (the server acted)."""

    def __init__(self, drops: int = 1) -> None:
        self.drops = drops
        self.keys: list[str | None] = []

    def lost(self, request: httpx.Request) -> bool:
        changes = request.method != "GET" and not request.url.path.endswith("/query")
        if changes:
            self.keys.append(request.headers.get("Idempotency-Key"))
        if changes and self.drops:
            self.drops -= 1
            return True
        return False


class SyncDropping(httpx.HTTPTransport):
    def __init__(self, network: DropsAnswers) -> None:
        super().__init__()
        self.network = network

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if self.network.lost(request):
            response.read()
            raise httpx.ReadError("connection reset by peer", request=request)
        return response


class AsyncDropping(httpx.AsyncHTTPTransport):
    def __init__(self, network: DropsAnswers) -> None:
        super().__init__()
        self.network = network

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if self.network.lost(request):
            await response.aread()
            raise httpx.ReadError("connection reset by peer", request=request)
        return response


@pytest.fixture
def server(live_server, tenant, other_tenant):
    write.write(other_tenant.scope, [{"content": "globex's own note"}])
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    return live_server.url, key


def contents(tenant) -> list[str]:
    return sorted(
        MemoryRecord.unscoped.filter(org_id=tenant.org.pk).values_list("content", flat=True)
    )


def assert_sent_with_one_key(network: DropsAnswers, attempts: int = 2) -> None:
    assert len(network.keys) == attempts
    assert network.keys[0] is not None and len(set(network.keys)) == 1


def test_http_memory_writes_once_when_the_answer_is_lost(server, tenant, other_tenant):
    url, key = server
    network = DropsAnswers()
    memory = HttpMemory(url, api_key=key, domain="support", transport=AsyncDropping(network))

    result = asyncio.run(memory.write([MemoryItem(content="said once", source="agent")]))

    assert result.accepted == ["memory"]
    assert contents(tenant) == ["said once"]
    assert contents(other_tenant) == ["globex's own note"]
    assert_sent_with_one_key(network)


def test_the_stores_put_and_forget_once_when_the_answer_is_lost(server, tenant, other_tenant):
    url, key = server
    network = DropsAnswers(drops=2)
    store = SyncHttpMemoryStore(url, api_key=key, domain="support", transport=SyncDropping(network))
    store.put(StoredRecord(scope="user:alice", key="currency", value="EUR"))
    assert contents(tenant) == ["EUR"]

    assert store.forget(scope="user:alice", key="currency") == 1  # the first answer's count
    assert contents(tenant) == []
    assert contents(other_tenant) == ["globex's own note"]

    network = DropsAnswers()
    async_store = HttpMemoryStore(
        url, api_key=key, domain="support", transport=AsyncDropping(network)
    )
    asyncio.run(async_store.put(StoredRecord(scope="user:bob", key="tz", value="UTC")))
    assert contents(tenant) == ["UTC"]
    assert_sent_with_one_key(network)


def test_the_langgraph_store_puts_once_when_the_answer_is_lost(server, tenant):
    url, key = server
    network = DropsAnswers()
    store = HttpMemoryhubStore(url, api_key=key, domain="support", transport=SyncDropping(network))
    try:
        store.put(("user", "alice"), "currency", {"code": "EUR"})
    finally:
        store.close()
    assert MemoryRecord.unscoped.filter(org_id=tenant.org.pk).count() == 1
    assert_sent_with_one_key(network)


@cluster.single_node("cancels with a trigger on a tenant table")
def test_a_503_is_sent_again_and_stored_once(server, tenant, cancel):
    url, key = server
    # Every attempt of the server's first answer is cancelled: it answers 503.
    cancel(MemoryRecord._meta.db_table, transient.ATTEMPTS, SHARD_GONE)
    statuses: list[int] = []

    def hook(response: httpx.Response) -> None:
        statuses.append(response.status_code)

    with httpx.Client(
        headers={"Authorization": f"Api-Key {key}"}, event_hooks={"response": [hook]}
    ) as client:
        response = send(
            client,
            "POST",
            f"{url}/api/v1/domains/support/records",
            json={"items": [{"content": "after a 503"}]},
            idempotency_key="retry-503",
            policy=RetryPolicy(backoff=0.01),
        )

    assert statuses == [503, 202]
    assert response.status_code == 202
    assert contents(tenant) == ["after a 503"]


def test_an_answer_that_is_the_requests_own_is_not_sent_again(server):
    url, key = server
    sent: list[Any] = []
    with httpx.Client(
        headers={"Authorization": f"Api-Key {key}"},
        event_hooks={"request": [sent.append]},
    ) as client:
        response = send(client, "POST", f"{url}/api/v1/domains/support/records", json={})

    assert response.status_code == 400
    assert len(sent) == 1
