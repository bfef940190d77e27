"""memoryhub as a LangGraph store: one contract (InMemoryStore's behaviour, ported: the
installed langgraph ships no store conformance tests) run against the in-process store
and the HTTP store on a live server; two orgs; erasure; a real graph.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from typing_extensions import TypedDict

from memoryhub import policy
from memoryhub.client import HttpMemoryError
from memoryhub.exceptions import ValidationFailed
from memoryhub.integrations.langgraph import HttpMemoryhubStore, item_address, record_key
from memoryhub.integrations.langgraph.django import MemoryhubStore
from memoryhub.models import MemoryRecord
from memoryhub.services import forget
from tests.factories import create_api_key
from tests.programs import database_url

pytestmark = pytest.mark.django_db(transaction=True)

EVERYTHING = {"can_read": True, "can_write": True, "can_forget": True}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["services", "http"])
def make_store(request):
    """``make_store(tenant, **key permissions)``: a store of the tenant's domain acting
    for a new API key of its org, in this process or over HTTP to a live server."""
    made: list[HttpMemoryhubStore] = []

    def make(tenant: Any, index: Any = None, **permissions: bool) -> BaseStore:
        api_key, plaintext = create_api_key(org=tenant.org, **(permissions or EVERYTHING))
        if request.param == "services":
            principal = policy.principal_for_key(api_key)
            return MemoryhubStore(tenant.scope, principal=principal, index=index)
        url = request.getfixturevalue("live_server").url
        store = HttpMemoryhubStore(url, api_key=plaintext, domain="support", index=index)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store, tenant):
    return make_store(tenant)


# --- the address of an item -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "key", "expected"),
    [
        (("user:alice",), "k", "#k"),
        (("user:alice", "memories"), "colour", "memories/#colour"),
        (("u", "a/b", "100%", "x#y"), "k/1#%", "a%2Fb/100%25/x%23y/#k%2F1%23%25"),
    ],
)
def test_the_record_key_encodes_the_labels_and_the_key(namespace, key, expected):
    assert record_key(namespace, key) == expected
    assert item_address(namespace[0], expected) == (namespace, key)


def test_keys_the_store_did_not_make_have_no_address():
    for key in (None, "", "profile", "a/b", "x#y#z", "a/b#c"):
        assert item_address("user:alice", key) is None


# --- the contract ---------------------------------------------------------------------------


def test_put_get_overwrite_and_delete(store):
    assert store.get(("user:alice", "memories"), "colour") is None
    store.put(("user:alice", "memories"), "colour", {"text": "likes green", "n": 1})
    item = store.get(("user:alice", "memories"), "colour")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (
        ("user:alice", "memories"),
        "colour",
        {"text": "likes green", "n": 1},
    )
    assert item.created_at <= item.updated_at
    store.put(("user:alice", "memories"), "colour", {"text": "likes blue", "n": 2})
    again = store.get(("user:alice", "memories"), "colour")
    assert again.value == {"text": "likes blue", "n": 2}
    assert again.created_at == item.created_at
    assert again.updated_at > item.updated_at
    # Same key, other namespace: another item.
    assert store.get(("user:alice",), "colour") is None
    assert store.get(("user:alice", "memories", "x"), "colour") is None
    store.delete(("user:alice", "memories"), "colour")
    assert store.get(("user:alice", "memories"), "colour") is None
    store.delete(("user:alice", "memories"), "never-put")  # nothing to delete: no error


def test_labels_and_keys_with_separators_round_trip(store):
    namespace = ("user:bob", "a/b", "100%", "x#y")
    store.put(namespace, "k/1#%", {"v": 1})
    assert store.get(namespace, "k/1#%").value == {"v": 1}
    assert store.get(("user:bob", "a", "b", "100%", "x#y"), "k/1#%") is None
    [found] = store.search(("user:bob", "a/b"))
    assert (found.namespace, found.key) == (namespace, "k/1#%")
    assert store.list_namespaces(prefix=("user:bob",)) == [namespace]


def test_search_lists_a_prefix_most_recently_updated_first(store):
    store.put(("user:alice", "memories"), "a", {"i": 1})
    store.put(("user:alice", "memories", "deep"), "b", {"i": 2})
    store.put(("user:alice", "memoriesX"), "c", {"i": 3})
    store.put(("user:bob", "memories"), "d", {"i": 4})
    store.put(("user:alice", "memories"), "a", {"i": 5})  # updated last
    keys = [item.key for item in store.search(("user:alice", "memories"))]
    assert keys == ["a", "b"]
    assert [i.key for i in store.search(("user:alice",))] == ["a", "c", "b"]
    assert sorted(i.key for i in store.search(())) == ["a", "b", "c", "d"]
    assert [i.key for i in store.search(("user:alice",), limit=1, offset=1)] == ["c"]
    assert store.search(("user:alice",), offset=3) == []
    assert all(item.score is None for item in store.search(("user:alice",)))


def test_a_listing_longer_than_a_page_is_read_page_by_page(store, monkeypatch):
    import memoryhub.integrations.langgraph as langgraph_store

    monkeypatch.setattr(langgraph_store, "LISTING_PAGE", 2)
    for n in range(5):
        store.put(("user:alice", "memories"), f"k{n}", {"i": n})
    keys = [item.key for item in store.search(("user:alice", "memories"), limit=10)]
    assert keys == ["k4", "k3", "k2", "k1", "k0"]
    assert [i.key for i in store.search(("user:alice",), limit=2, offset=3)] == ["k1", "k0"]


def test_search_filters_on_the_value(store):
    for key, value in {
        "a": {"colour": "red", "price": 5, "tags": "x"},
        "b": {"colour": "blue", "price": 15},
        "c": {"colour": "red", "price": 25},
    }.items():
        store.put(("shop", "items"), key, value)

    def keys(filter: dict[str, Any]) -> list[str]:
        return sorted(item.key for item in store.search(("shop",), filter=filter))

    assert keys({"colour": "red"}) == ["a", "c"]
    assert keys({"price": {"$gt": 10}}) == ["b", "c"]
    assert keys({"price": {"$gte": 5, "$lt": 25}}) == ["a", "b"]
    assert keys({"colour": {"$ne": "red"}}) == ["b"]
    assert keys({"colour": "red", "price": {"$lte": 5}}) == ["a"]
    assert keys({"colour": {"$eq": "green"}}) == []


def test_search_with_a_query_ranks_within_the_prefix(store):
    texts = {
        "pets": "Alice has a cat called Miso and a dog",
        "food": "Alice is vegetarian and loves ramen noodles",
        "work": "Alice works on the billing team",
    }
    for key, text in texts.items():
        store.put(("user:alice", "memories"), key, {"text": text, "kind": key})
    store.put(("user:bob", "memories"), "pets", {"text": "Bob has a cat too", "kind": "pets"})
    found = store.search(("user:alice", "memories"), query="cat called Miso", limit=2)
    assert found[0].key == "pets" and found[0].namespace == ("user:alice", "memories")
    assert all(item.score is not None for item in found) and len(found) == 2
    assert found[0].score >= found[1].score
    assert found[0].updated_at >= found[0].created_at
    assert [i.key for i in store.search(("user:alice",), query="cat Miso", offset=1, limit=5)] == [
        i.key for i in store.search(("user:alice",), query="cat Miso", limit=5)
    ][1:]
    filtered = store.search(("user:alice",), query="cat", filter={"kind": "work"})
    assert [item.key for item in filtered] == ["work"]
    everywhere = store.search((), query="cat", limit=10)
    assert {item.namespace[0] for item in everywhere} == {"user:alice", "user:bob"}


def test_index_fields_choose_the_embedded_text(make_store, tenant):
    store = make_store(tenant, index={"fields": ["text"]})
    store.put(("docs",), "a", {"text": "the refund policy", "noise": "zebra"})
    store.put(("docs",), "b", {"text": "zebra crossings"}, index=["text"])
    store.put(("docs",), "c", {"other": "zebra"}, index=False)
    contents = dict(MemoryRecord.unscoped.values_list("key", "content"))
    assert contents["#a"] == "the refund policy"
    assert contents["#b"] == "zebra crossings"
    assert contents["#c"] == '{"other": "zebra"}'  # not indexable: memoryhub embeds the JSON


def test_list_namespaces_with_prefix_suffix_depth_and_pages(store):
    for namespace in [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
        ("users", "456", "settings"),
    ]:
        store.put(namespace, "k", {"v": 1})
        store.put(namespace, "k2", {"v": 2})
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(prefix=("a",)) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert store.list_namespaces(suffix=("f",)) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("*", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(max_depth=1) == [("a",), ("b",), ("users",)]
    assert store.list_namespaces(max_depth=2, limit=2, offset=1) == [("a", "c"), ("b", "a")]
    assert store.list_namespaces(prefix=("users",), suffix=("settings",)) == [
        ("users", "456", "settings")
    ]
    everything = store.list_namespaces(limit=100)
    assert len(everything) == 8
    assert [ns for offset in range(8) for ns in store.list_namespaces(limit=1, offset=offset)] == (
        everything
    )
    assert store.list_namespaces(prefix=("nope",)) == []


def test_batch_reads_see_the_store_before_its_puts_and_the_last_put_wins(store):
    store.put(("n",), "old", {"v": 0})
    results = store.batch(
        [
            PutOp(("n",), "k", {"v": 1}),
            GetOp(("n",), "k"),
            PutOp(("n",), "k", {"v": 2}),
            SearchOp(("n",)),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("n",)),)),
            PutOp(("n",), "old", None),
        ]
    )
    assert results[0] is None and results[1] is None
    assert [item.key for item in results[3]] == ["old"]
    assert results[4] == [("n",)]
    assert store.get(("n",), "k").value == {"v": 2}
    assert store.get(("n",), "old") is None


def test_invalid_namespaces_are_refused(store):
    for namespace in [(), ("langgraph", "x"), ("a", ""), ("a.b",)]:
        with pytest.raises(InvalidNamespaceError):
            store.put(namespace, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([SearchOp(("a.b",))])


def test_a_ttl_sets_the_records_expiry(store):
    store.put(("user:alice",), "short", {"v": 1}, ttl=2)
    store.put(("user:alice",), "long", {"v": 1})
    expiry = dict(MemoryRecord.unscoped.values_list("key", "expires_at"))
    assert expiry["#long"] is None
    left = expiry["#short"] - timezone.now()
    assert timedelta(seconds=100) < left <= timedelta(seconds=120)
    MemoryRecord.unscoped.filter(key="#short").update(expires_at=timezone.now())
    assert store.get(("user:alice",), "short") is None


def test_the_async_methods_keep_the_same_contract(store):
    async def main() -> tuple[Any, ...]:
        await store.aput(("user:alice", "notes"), "a", {"text": "async hello"})
        got = await store.aget(("user:alice", "notes"), "a")
        listed = await store.asearch(("user:alice",))
        ranked = await store.asearch(("user:alice",), query="hello")
        spaces = await store.alist_namespaces(prefix=("user:alice",))
        await store.adelete(("user:alice", "notes"), "a")
        gone = await store.aget(("user:alice", "notes"), "a")
        # The services ran in asgiref's thread: its database connection ends here.
        await sync_to_async(connections.close_all)()
        return got, listed, ranked, spaces, gone

    got, listed, ranked, spaces, gone = asyncio.run(main())
    assert got.value == {"text": "async hello"}
    assert [i.key for i in listed] == ["a"] and [i.key for i in ranked] == ["a"]
    assert spaces == [("user:alice", "notes")]
    assert gone is None


def test_the_keys_permissions_bind_the_store(make_store, tenant):
    writer = make_store(tenant)
    writer.put(("user:alice",), "k", {"v": 1})
    reader = make_store(tenant, can_read=True)
    assert reader.get(("user:alice",), "k").value == {"v": 1}
    denied = (policy.PolicyDenied, HttpMemoryError)
    with pytest.raises(denied):
        reader.put(("user:alice",), "k", {"v": 2})
    with pytest.raises(denied):
        reader.delete(("user:alice",), "k")
    blind = make_store(tenant, can_write=True, can_read=False)
    with pytest.raises(denied):
        blind.get(("user:alice",), "k")
    assert writer.get(("user:alice",), "k").value == {"v": 1}


def test_a_bad_filter_names_the_field(store):
    store.put(("n",), "k", {"v": 1})
    with pytest.raises((ValidationFailed, HttpMemoryError)) as raised:
        store.search(("n",), filter={"v": {"$near": 1}})
    errors = getattr(raised.value, "errors", None)
    assert errors and any(path.startswith("where") for path in errors), raised.value


# --- two orgs ---------------------------------------------------------------------------------


def test_two_orgs_hold_different_items_under_the_same_namespaces(make_store, tenant, other_tenant):
    acme, globex = make_store(tenant), make_store(other_tenant)
    acme.put(("user:alice", "memories"), "colour", {"text": "acme alice likes green"})
    globex.put(("user:alice", "memories"), "colour", {"text": "globex alice likes red"})
    globex.put(("user:zed", "secret"), "plan", {"text": "globex secret plan"})
    assert acme.get(("user:alice", "memories"), "colour").value["text"].startswith("acme")
    assert globex.get(("user:alice", "memories"), "colour").value["text"].startswith("globex")
    assert acme.get(("user:zed", "secret"), "plan") is None
    for found in (
        acme.search(()),
        acme.search((), query="secret plan likes red"),
        acme.search(("user:zed",), query="secret plan"),
    ):
        assert all(item.value["text"].startswith("acme") for item in found)
    assert acme.list_namespaces() == [("user:alice", "memories")]
    assert globex.list_namespaces() == [("user:alice", "memories"), ("user:zed", "secret")]
    acme.delete(("user:alice", "memories"), "colour")
    assert globex.get(("user:alice", "memories"), "colour") is not None


def test_erasing_the_data_subject_erases_their_items(store, tenant):
    store.put(("user:alice", "memories"), "a", {"v": 1})
    store.put(("user:alice", "profile", "prefs"), "b", {"v": 2})
    store.put(("user:bob", "memories"), "a", {"v": 3})
    forget.forget(
        tenant.scope, forget.ForgetRequest(namespace="user:alice"), principal=policy.SYSTEM
    )
    assert store.search(("user:alice",)) == []
    assert store.list_namespaces() == [("user:bob", "memories")]
    assert store.get(("user:bob", "memories"), "a").value == {"v": 3}


# --- a graph ---------------------------------------------------------------------------------


class Chat(TypedDict):
    user: str
    message: str
    recalled: list[str]


def remember(state: Chat, *, store: BaseStore) -> dict[str, Any]:
    namespace = (f"user:{state['user']}", "memories")
    count = len(store.search(namespace, limit=100))
    store.put(namespace, f"m{count}", {"text": state["message"]})
    return {}


def recall(state: Chat, *, store: BaseStore) -> dict[str, Any]:
    found = store.search((f"user:{state['user']}", "memories"), query=state["message"], limit=3)
    return {"recalled": [item.value["text"] for item in found]}


def test_a_graph_keeps_its_memory_in_memoryhub_over_http(live_server, tenant, other_tenant):
    def graph_for(org_tenant: Any) -> Any:
        _, plaintext = create_api_key(org=org_tenant.org, **EVERYTHING)
        store = HttpMemoryhubStore(live_server.url, api_key=plaintext, domain="support")
        builder = StateGraph(Chat)
        builder.add_node("remember", remember)
        builder.add_node("recall", recall)
        builder.add_edge(START, "recall")
        builder.add_edge("recall", "remember")
        builder.add_edge("remember", END)
        return builder.compile(store=store), store

    acme, acme_store = graph_for(tenant)
    globex, globex_store = graph_for(other_tenant)
    acme.invoke({"user": "alice", "message": "I adopted a cat named Miso", "recalled": []})
    acme.invoke({"user": "alice", "message": "I work in billing", "recalled": []})
    globex.invoke({"user": "alice", "message": "globex secret: a dog named Rex", "recalled": []})
    answer = acme.invoke({"user": "alice", "message": "what is my cat called?", "recalled": []})
    assert answer["recalled"][0] == "I adopted a cat named Miso"
    assert not any("globex" in text for text in answer["recalled"])
    assert acme_store.list_namespaces() == [("user:alice", "memories")]
    assert MemoryRecord.unscoped.filter(namespace="user:alice", tags=["langgraph"]).count() == 4
    acme_store.close()
    globex_store.close()


# --- the example -----------------------------------------------------------------------------


def test_the_langgraph_example_runs():
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    completed = subprocess.run(
        [sys.executable, "examples/langgraph_memory.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert "recalled: I adopted a cat named Miso" in lines
    assert "namespaces: [('user:alice', 'memories')]" in lines
    assert "other tenant recalls: []" in lines
    assert "after erasure: []" in lines
    assert MemoryRecord.unscoped.count() == 0  # the example cleans up after itself
