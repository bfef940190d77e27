"""The HTTP memory stores against a live server: the errors they share with
``DjangoMemoryStore``, read-only knowledge bases, paging, tenancy, and the blocking twin.
(The contract both stores keep is ``test_store_contract.py``.)"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from memoryhub import policy
from memoryhub.client import (
    HttpMemoryError,
    HttpMemoryStore,
    MemoryKind,
    StoredRecord,
    SyncHttpMemoryStore,
)
from memoryhub.exceptions import PolicyDenied, UnknownSource, ValidationFailed, WriteRefused
from memoryhub.models import MemoryRecord
from memoryhub.services import knowledge_bases, write
from memoryhub.sources import DjangoMemoryStore
from tests.factories import create_api_key

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")
EVERYTHING = {"can_read": True, "can_write": True, "can_forget": True}


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    async def main() -> T:
        try:
            return await coroutine
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


@pytest.fixture
def curated(tenant):
    """A read-only ``handbook`` (refuse) and ``digest`` (ignore), each holding a record
    of user:alice keyed ``profile``."""
    for name, on_write in (("handbook", "refuse"), ("digest", "ignore")):
        knowledge_bases.ensure_knowledge_base(tenant.scope, name, read_only=True, on_write=on_write)
        write.write(
            tenant.scope,
            [{"content": f"{name} about Alice", "key": "profile", "namespace": "user:alice"}],
            sources=[name],
            principal=policy.SYSTEM,
        )
    return tenant


@pytest.fixture(params=["django", "http"])
def make_store(request, tenant):
    """``make_store(source="memory", **key permissions)``: the Django store acting for a
    new API key of acme, or the HTTP store sending it."""

    def make(source: str = "memory", **permissions: bool) -> Any:
        api_key, plaintext = create_api_key(org=tenant.org, **(permissions or EVERYTHING))
        if request.param == "django":
            principal = policy.principal_for_key(api_key)
            return DjangoMemoryStore(tenant.scope, source=source, principal=principal)
        url = request.getfixturevalue("live_server").url
        return HttpMemoryStore(url, api_key=plaintext, domain="support", source=source)

    return make


def alice(key: str = "currency", value: Any = "EUR") -> StoredRecord:
    return StoredRecord(scope="user:alice", key=key, value=value)


def test_a_read_only_knowledge_base_refuses_a_put(curated, make_store):
    with pytest.raises(WriteRefused) as refused:
        run(make_store("handbook").put(alice()))
    assert (refused.value.source, refused.value.n) == ("handbook", 1)
    run(make_store("digest").put(alice()))  # ignore: accepted and dropped, as the API does
    assert not MemoryRecord.unscoped.filter(knowledge_base__name="digest", key="currency")


def test_an_unknown_knowledge_base_is_unknown_source(tenant, make_store):
    with pytest.raises(UnknownSource) as unknown:
        run(make_store("no-such-kb").put(alice()))
    assert unknown.value.name == "no-such-kb"
    assert run(make_store("no-such-kb").get(scope="user:alice", key="currency")) is None


def test_invalid_input_is_validation_failed(tenant, make_store):
    with pytest.raises(ValidationFailed) as invalid:
        run(make_store().put(alice(value="   ")))
    assert invalid.value.errors == {"items[0].content": ["may not be blank."]}
    with pytest.raises(ValidationFailed):
        run(make_store().search(scope="user:alice", kind="dream"))


@pytest.mark.parametrize(
    ("permissions", "call", "action"),
    [
        ({**EVERYTHING, "can_write": False}, lambda store: store.put(alice()), "write"),
        (
            {**EVERYTHING, "can_read": False},
            lambda store: store.get(scope="user:alice", key="k"),
            "read",
        ),
        ({**EVERYTHING, "can_read": False}, lambda store: store.search(scope="user:alice"), "read"),
        (
            {**EVERYTHING, "can_forget": False},
            lambda store: store.forget(scope="user:alice"),
            "forget",
        ),
    ],
    ids=["put", "get", "search", "forget"],
)
def test_a_missing_permission_is_policy_denied(tenant, make_store, permissions, call, action):
    store = make_store(**permissions)
    with pytest.raises(PolicyDenied) as denied:
        run(call(store))
    assert denied.value.action == action


def test_forget_of_a_namespace_in_all_sources_reaches_read_only_knowledge_bases(
    curated, make_store
):
    store = make_store()
    run(store.put(alice()))
    # A data subject's erasure: every knowledge base, read-only ones included.
    assert run(store.forget(scope="user:alice", all_sources=True)) == 3
    assert not MemoryRecord.unscoped.filter(namespace="user:alice").exists()


def test_forget_of_a_key_in_all_sources_is_refused_by_a_read_only_knowledge_base(
    curated, make_store
):
    store = make_store()
    run(store.put(alice("profile", "memory about Alice")))
    with pytest.raises(WriteRefused) as refused:
        run(store.forget(scope="user:alice", key="profile", all_sources=True))
    assert refused.value.source == "handbook"
    assert MemoryRecord.unscoped.filter(key="profile").count() == 3  # nothing deleted
    MemoryRecord.unscoped.filter(knowledge_base__name="handbook").delete()
    # digest ignores: it keeps its record, which is not counted.
    assert run(store.forget(scope="user:alice", key="profile", all_sources=True)) == 1
    assert [r.knowledge_base.name for r in MemoryRecord.unscoped.filter(key="profile")] == [
        "digest"
    ]


def test_the_django_store_asks_for_erase_subject_to_forget_a_namespace(tenant):
    """As the API's forget does. (A key's forget permission grants both actions, so
    this needs a principal that has forget alone.)"""

    class ForgetOnly:
        label = "forget-only"

        def actions(self, org_id: int, domain_id: int | None = None) -> frozenset[Any]:
            return frozenset({policy.Action.FORGET})

    store = DjangoMemoryStore(tenant.scope, principal=ForgetOnly())
    run(DjangoMemoryStore(tenant.scope).put(alice()))
    with pytest.raises(PolicyDenied) as denied:
        run(store.forget(scope="user:alice"))
    assert denied.value.action == "erase_subject"
    assert run(store.forget(scope="user:alice", key="currency")) == 1


def test_the_shared_namespace_is_forgotten_in_one_knowledge_base_only(tenant, make_store):
    store = make_store()
    run(store.put(StoredRecord(scope="", key="greeting", value="hello")))
    with pytest.raises(ValidationFailed):
        run(store.forget(scope="", all_sources=True))
    assert run(store.forget(scope="")) == 1


@pytest.fixture
def remote(live_server, tenant):
    _, key = create_api_key(org=tenant.org, **EVERYTHING)
    return live_server.url, key


def test_a_domain_the_key_cannot_see_is_a_plain_404(remote):
    url, key = remote
    store = HttpMemoryStore(url, api_key=key, domain="legal")
    with pytest.raises(HttpMemoryError) as missing:
        run(store.get(scope="user:alice", key="currency"))
    assert (missing.value.status, missing.value.code) == (404, "domain_not_found")
    assert not isinstance(missing.value, PolicyDenied | ValidationFailed)
    with pytest.raises(HttpMemoryError) as unknown_key:
        run(HttpMemoryStore(url, api_key="nope", domain="support").search(scope="user:alice"))
    assert unknown_key.value.status == 401


def test_the_errors_a_store_shares_with_django_are_http_memory_errors_too(remote, tenant):
    url, key = remote
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    for source, status, code in (
        ("nope", 400, "unknown_source"),
        ("handbook", 403, "write_refused"),
    ):
        with pytest.raises(HttpMemoryError) as error:
            run(HttpMemoryStore(url, api_key=key, domain="support", source=source).put(alice()))
        assert (error.value.status, error.value.code) == (status, code)


def test_search_pages_through_the_api_up_to_the_limit(remote, tenant):
    url, key = remote
    for start in (0, 100, 200):  # at most 100 items per write
        write.write(
            tenant.scope,
            [
                {"content": f"note {n}", "key": f"k{n:03}", "namespace": "user:alice"}
                for n in range(start, min(start + 100, 205))
            ],
        )
    expected = [f"k{n:03}" for n in range(204, 0, -1)]
    store = HttpMemoryStore(url, api_key=key, domain="support")
    assert [r.key for r in run(store.search(scope="user:alice", limit=204))] == expected
    assert len(run(store.search(scope="user:alice", limit=5000))) == 205
    django_store = DjangoMemoryStore(tenant.scope)
    assert [r.key for r in run(django_store.search(scope="user:alice", limit=204))] == expected


def test_another_orgs_key_neither_reads_nor_forgets_the_first_orgs_keys(
    live_server, tenant, other_tenant
):
    run(DjangoMemoryStore(tenant.scope).put(alice()))
    _, foreign_key = create_api_key(org=other_tenant.org, **EVERYTHING)
    foreign = HttpMemoryStore(live_server.url, api_key=foreign_key, domain="support")
    assert run(foreign.get(scope="user:alice", key="currency")) is None
    assert run(foreign.search(scope="user:alice")) == []
    # Its own domain has no knowledge base "memory" yet: a 400, as in process.
    with pytest.raises(UnknownSource):
        run(foreign.forget(scope="user:alice", key="currency"))
    assert run(foreign.forget(scope="user:alice", all_sources=True)) == 0
    run(foreign.put(alice("timezone", "Asia/Tokyo")))
    assert run(foreign.forget(scope="user:alice", key="currency")) == 0
    assert run(foreign.forget(scope="user:alice")) == 1
    assert run(DjangoMemoryStore(tenant.scope).get(scope="user:alice", key="currency")).value == (
        "EUR"
    )


def test_the_sync_store_keeps_the_same_contract(remote, tenant):
    url, key = remote
    knowledge_bases.ensure_knowledge_base(tenant.scope, "notes")
    store = SyncHttpMemoryStore(url, api_key=key, domain="support")
    notes = SyncHttpMemoryStore(url, api_key=key, domain="support", source="notes")
    store.put(
        StoredRecord(scope="user:alice", key="plan", value={"steps": [1, 2]}, kind="procedural")
    )
    store.put(StoredRecord(scope="user:alice", key="currency", value="EUR", tags=("pref",)))
    first = store.get(scope="user:alice", key="currency")
    store.put(StoredRecord(scope="user:alice", key="currency", value="USD", tags=("pref",)))
    notes.put(StoredRecord(scope="user:alice", key="note", value="likes tea"))
    currency = store.get(scope="user:alice", key="currency")
    assert (currency.value, currency.timestamp) == ("USD", first.timestamp)
    assert currency.updated_at > first.updated_at
    assert store.get(scope="user:alice", key="nope") is None
    assert store.get(scope="user:alice", key="plan").value == {"steps": [1, 2]}
    assert [r.key for r in store.search(scope="user:alice")] == ["currency", "plan"]
    assert [r.key for r in store.search(scope="user:alice", kind=MemoryKind.PROCEDURAL)] == ["plan"]
    assert [r.key for r in store.search(scope="user:alice", tag="pref", limit=1)] == ["currency"]
    assert [r.key for r in store.search(scope="user:alice", key_prefix="pl")] == ["plan"]
    assert store.forget(scope="user:alice", key="plan") == 1
    assert store.forget(scope="user:alice") == 1
    assert notes.get(scope="user:alice", key="note") is not None
    assert store.forget(scope="user:alice", all_sources=True) == 1
    with pytest.raises(UnknownSource):
        SyncHttpMemoryStore(url, api_key=key, domain="support", source="nope").put(alice())


def test_the_sync_store_takes_an_httpx_transport(tenant):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, str(request.url), request.headers["Authorization"]))
        return httpx.Response(200, json={"next": None, "previous": None, "results": []})

    store = SyncHttpMemoryStore(
        "http://memory.test/",
        api_key="k-123",
        domain="support",
        transport=httpx.MockTransport(handler),
    )
    assert store.get(scope="user:alice", key="currency") is None
    [(method, url, auth)] = seen
    assert (method, auth) == ("GET", "Api-Key k-123")
    assert url.startswith("http://memory.test/api/v1/domains/support/records?")
    assert "namespace=user%3Aalice" in url and "key=currency" in url and "source=memory" in url
    seen.clear()
    assert store.search(scope="user:alice", limit=3) == []
    [(_, url, _)] = seen
    assert "page_size=3" in url  # no more rows than asked for
