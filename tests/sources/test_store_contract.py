"""The key/value ``MemoryStore`` contract of seed 004 (the seeds: the prototype texts
whose printed outputs are the behaviour spec, ``test_sources_seeds.py``), once, for
every implementation.

The same tests run against ``DjangoMemoryStore`` (the services, in process),
``HttpMemoryStore`` (the REST API of a live server, with a real API key) and the test
double ``InMemoryMemoryStore``. Each store comes with a second store of another
knowledge base (``notes``) of the same domain.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from memoryhub.client import HttpMemoryStore, MemoryKind, MemoryStore, StoredRecord
from memoryhub.services import knowledge_bases
from memoryhub.sources import DjangoMemoryStore
from memoryhub.testing import InMemoryMemoryStore
from tests.factories import create_api_key

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine, then close the DB connection its ORM calls opened in the
    sync_to_async worker thread (else the test database cannot be dropped)."""

    async def main() -> T:
        try:
            return await coroutine
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


@pytest.fixture(params=["django", "http", "in_memory"])
def stores(request, tenant):
    """(a store of ``memory``, a store of ``notes``) of one domain."""
    if request.param == "in_memory":
        memory = InMemoryMemoryStore()
        return memory, memory.with_source("notes")
    knowledge_bases.ensure_knowledge_base(tenant.scope, "notes")
    if request.param == "django":
        return DjangoMemoryStore(tenant.scope), DjangoMemoryStore(tenant.scope, source="notes")
    url = request.getfixturevalue("live_server").url
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    return (
        HttpMemoryStore(url, api_key=key, domain="support"),
        HttpMemoryStore(url, api_key=key, domain="support", source="notes"),
    )


@pytest.fixture
def store(stores):
    return stores[0]


def put(store: Any, scope: str, key: str, value: Any, **fields: Any) -> None:
    run(store.put(StoredRecord(scope=scope, key=key, value=value, **fields)))


def keys(records: list[StoredRecord]) -> list[str]:
    return [record.key for record in records]


def test_every_store_is_a_memory_store(store):
    assert isinstance(store, MemoryStore)


def test_put_then_get_returns_the_record(store):
    put(store, "user:alice", "currency", "EUR", kind=MemoryKind.EPISODIC, tags=["a", "b"])
    record = run(store.get(scope="user:alice", key="currency"))
    assert (record.scope, record.key, record.value) == ("user:alice", "currency", "EUR")
    assert record.kind is MemoryKind.EPISODIC
    assert record.tags == ("a", "b")
    assert record.timestamp is not None
    assert record.updated_at >= record.timestamp
    assert record.id


def test_a_kind_given_as_a_string_comes_back_as_the_enum(store):
    put(store, "user:alice", "plan", "step one", kind="procedural")
    record = run(store.get(scope="user:alice", key="plan"))
    assert record.kind is MemoryKind.PROCEDURAL
    assert record.kind == "procedural"


def test_overwriting_a_key_moves_updated_at_and_keeps_the_timestamp(store):
    put(store, "user:alice", "currency", "EUR", tags=["old"])
    first = run(store.get(scope="user:alice", key="currency"))
    put(store, "user:alice", "currency", "USD", kind=MemoryKind.EPISODIC, tags=["new"])
    second = run(store.get(scope="user:alice", key="currency"))
    assert (second.value, second.kind, second.tags) == ("USD", "episodic", ("new",))
    assert second.timestamp == first.timestamp
    assert second.updated_at > first.updated_at
    assert second.id == first.id
    assert keys(run(store.search(scope="user:alice"))) == ["currency"]


def test_get_of_a_missing_key_is_none(stores):
    store, notes = stores
    put(store, "user:alice", "currency", "EUR")
    put(notes, "user:alice", "timezone", "Europe/Berlin")
    assert run(store.get(scope="user:alice", key="nope")) is None
    assert run(store.get(scope="user:bob", key="currency")) is None
    assert run(store.get(scope="user:alice", key="timezone")) is None  # notes' key


@pytest.mark.parametrize(
    "value",
    [
        {"steps": [1, 2], "ok": True, "ratio": 1.5, "none": None},
        [1, "two", None, {"three": 3}],
        42,
        3.25,
        True,
        None,
        "42",  # a string that looks like JSON stays a string
    ],
    ids=["object", "list", "int", "float", "bool", "null", "json-looking-string"],
)
def test_json_values_round_trip(store, value):
    put(store, "user:alice", "value", value)
    assert run(store.get(scope="user:alice", key="value")).value == value
    [found] = run(store.search(scope="user:alice"))
    assert found.value == value
    assert type(found.value) is type(value)


def test_search_is_newest_first_by_last_update(store):
    for key in ("a", "b", "c"):
        put(store, "user:alice", key, key)
    put(store, "user:alice", "a", "a again")
    assert keys(run(store.search(scope="user:alice"))) == ["a", "c", "b"]


def test_search_filters_by_kind_key_prefix_and_tag(store):
    put(store, "user:alice", "plan:q1", "q1", kind=MemoryKind.PROCEDURAL, tags=["plan"])
    put(store, "user:alice", "plan:q2", "q2", kind="procedural")
    put(store, "user:alice", "currency", "EUR", tags=["preference", "plan"])
    put(store, "user:alice", "said", "hello", kind=MemoryKind.EPISODIC)
    search = store.search
    assert keys(run(search(scope="user:alice", kind=MemoryKind.PROCEDURAL))) == [
        "plan:q2",
        "plan:q1",
    ]
    assert keys(run(search(scope="user:alice", kind="episodic"))) == ["said"]
    assert keys(run(search(scope="user:alice", kind="semantic"))) == ["currency"]
    assert keys(run(search(scope="user:alice", key_prefix="plan:"))) == ["plan:q2", "plan:q1"]
    assert keys(run(search(scope="user:alice", key_prefix="nothing"))) == []
    assert keys(run(search(scope="user:alice", tag="plan"))) == ["currency", "plan:q1"]
    assert keys(run(search(scope="user:alice", tag="preference", key_prefix="plan"))) == []
    assert keys(run(search(scope="user:alice", tag="plan", kind="procedural"))) == ["plan:q1"]


def test_search_returns_at_most_limit_records_newest_first(store):
    for n in range(5):
        put(store, "user:alice", f"k{n}", n)
    assert keys(run(store.search(scope="user:alice", limit=2))) == ["k4", "k3"]
    assert keys(run(store.search(scope="user:alice", limit=0))) == []
    assert len(run(store.search(scope="user:alice", limit=100))) == 5


def test_search_stays_in_its_namespace_and_knowledge_base(stores):
    store, notes = stores
    put(store, "user:alice", "currency", "EUR")
    put(store, "user:bob", "currency", "GBP")
    put(notes, "user:alice", "note", "likes tea")
    assert keys(run(store.search(scope="user:alice"))) == ["currency"]
    assert keys(run(notes.search(scope="user:alice"))) == ["note"]
    assert run(store.search(scope="user:carol")) == []


def test_forget_a_key_deletes_it_and_returns_one(store):
    put(store, "user:alice", "currency", "EUR")
    put(store, "user:alice", "timezone", "Europe/Berlin")
    assert run(store.forget(scope="user:alice", key="currency")) == 1
    assert run(store.get(scope="user:alice", key="currency")) is None
    assert keys(run(store.search(scope="user:alice"))) == ["timezone"]
    assert run(store.forget(scope="user:alice", key="currency")) == 0


def test_forget_a_scope_drops_the_namespace_of_this_knowledge_base_only(stores):
    store, notes = stores
    put(store, "user:alice", "currency", "EUR")
    put(store, "user:alice", "timezone", "Europe/Berlin")
    put(store, "user:bob", "currency", "GBP")
    put(notes, "user:alice", "note", "likes tea")
    assert run(store.forget(scope="user:alice")) == 2
    assert run(store.search(scope="user:alice")) == []
    assert run(store.get(scope="user:bob", key="currency")).value == "GBP"
    assert run(notes.get(scope="user:alice", key="note")).value == "likes tea"
    assert run(store.forget(scope="user:alice")) == 0


def test_forget_all_sources_drops_the_namespace_in_every_knowledge_base(stores):
    store, notes = stores
    put(store, "user:alice", "currency", "EUR")
    put(notes, "user:alice", "note", "likes tea")
    put(notes, "user:alice", "currency", "EUR, noted")
    put(notes, "user:bob", "note", "likes coffee")
    assert run(store.forget(scope="user:alice", key="currency", all_sources=True)) == 2
    assert run(notes.get(scope="user:alice", key="note")).value == "likes tea"
    assert run(store.forget(scope="user:alice", all_sources=True)) == 1
    assert run(notes.search(scope="user:alice")) == []
    assert run(notes.get(scope="user:bob", key="note")).value == "likes coffee"


def test_memory_kind_names_the_kinds_a_record_may_have():
    from memoryhub.models import MemoryRecord

    assert [kind.value for kind in MemoryKind] == MemoryRecord.Kind.values
