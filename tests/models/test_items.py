"""``MemoryItem``, frozen payloads, dedupe and the write shape: plain values, no database."""

from __future__ import annotations

import copy
import pickle
from datetime import UTC, datetime, timedelta

import pytest

from memoryhub.items import (
    FrozenDict,
    MemoryItem,
    Turns,
    as_write_item,
    dedupe_items,
    deep_freeze,
    sort_by_score,
    thaw,
)


def item(content: str, source: str = "s", score: float | None = None, **kwargs) -> MemoryItem:
    return MemoryItem(content=content, source=source, score=score, **kwargs)


# --- frozen payloads ---


def test_a_frozen_dict_refuses_every_mutation():
    frozen = FrozenDict({"a": 1})
    for mutate in (
        lambda: frozen.__setitem__("b", 2),
        lambda: frozen.__delitem__("a"),
        frozen.clear,
        lambda: frozen.pop("a"),
        frozen.popitem,
        lambda: frozen.setdefault("b", 2),
        lambda: frozen.update(b=2),
        lambda: frozen.__ior__({"b": 2}),
    ):
        with pytest.raises(TypeError, match="cannot be mutated in place"):
            mutate()
    assert frozen == {"a": 1}


def test_a_frozen_dict_copies_and_pickles_as_itself():
    frozen = deep_freeze({"a": [1, {"b": 2}]})
    assert copy.copy(frozen) is frozen
    assert copy.deepcopy(frozen) is frozen
    restored = pickle.loads(pickle.dumps(frozen))
    assert type(restored) is FrozenDict
    assert restored == {"a": (1, {"b": 2})}


def test_deep_freeze_and_thaw_round_trip():
    value = {"a": [1, {"b": [2, 3]}], 4: "four"}
    frozen = deep_freeze(value)
    assert frozen == {"a": (1, {"b": (2, 3)}), "4": "four"}  # keys become strings
    assert type(frozen["a"][1]) is FrozenDict
    assert deep_freeze(frozen) is frozen
    assert deep_freeze((1, [2])) == (1, (2,))
    thawed = thaw(frozen)
    assert thawed == {"a": [1, {"b": [2, 3]}], "4": "four"}
    assert type(thawed) is dict
    assert type(thawed["a"][1]) is dict
    thawed["a"].append(5)  # a plain, mutable copy


def test_memory_item_freezes_metadata_tags_and_stamps():
    made = MemoryItem("c", "s", metadata={"a": [1]}, tags=["x", "y"], dedupe_sources=["a", "b"])
    assert type(made.metadata) is FrozenDict
    assert made.metadata["a"] == (1,)
    assert made.tags == ("x", "y")
    assert made.dedupe_sources == ("a", "b")
    assert MemoryItem("c", "s").dedupe_sources is None
    assert MemoryItem("c", "s", metadata=None).metadata == {}


def test_the_hash_covers_content_source_and_score_only():
    one = item("c", score=0.5, metadata={"id": "1"}, id="1")
    two = item("c", score=0.5, metadata={"id": "2"}, id="2")
    assert hash(one) == hash(two)
    assert one != two
    assert hash(item("c", score=0.5)) != hash(item("c", score=0.6))
    assert hash(item("c", "a")) != hash(item("c", "b"))
    assert hash(item("c")) != hash(item("d"))


def test_to_dict_is_json_ready_and_names_the_merge_only_when_there_is_one():
    when = datetime(2026, 1, 2, tzinfo=UTC)
    plain = item(
        "c",
        "kb",
        0.5,
        metadata={"a": [1]},
        id="7",
        key="k",
        kind="semantic",
        namespace="user:a",
        tags=["t"],
        created_at=when,
        occurred_at=when - timedelta(days=1),
    )
    assert plain.to_dict() == {
        "id": "7",
        "content": "c",
        "source": "kb",
        "score": 0.5,
        "metadata": {"a": [1]},
        "key": "k",
        "kind": "semantic",
        "namespace": "user:a",
        "tags": ["t"],
        "created_at": when,
        "occurred_at": when - timedelta(days=1),
        "derived_from": [],
        "valid_from": None,
        "valid_until": None,
        "superseded_by": None,
    }
    fact = item("c", derived_from=["5f0b2f4e-1111-4111-8111-111111111111"]).to_dict()
    assert fact["derived_from"] == ["5f0b2f4e-1111-4111-8111-111111111111"]
    merged = item("c", dedupe_count=2, dedupe_sources=("a", "b")).to_dict()
    assert (merged["dedupe_count"], merged["dedupe_sources"]) == (2, ["a", "b"])
    assert item("c", dedupe_count=2).to_dict()["dedupe_sources"] == []
    with_turns = item("c", context=Turns(before=(item("b", id="1"),))).to_dict()
    assert [turn["content"] for turn in with_turns["context"]["before"]] == ["b"]
    assert with_turns["context"]["after"] == []


# --- dedupe ---


def test_dedupe_by_id_or_content_keeps_the_best_score_in_first_seen_order():
    items = [
        item("alpha", "a", 0.2, id="1"),
        item("beta", "a", 0.4),
        item("gamma", "b", 0.9, id="1"),  # same id as alpha
        item(" beta\n", "b", 0.1),  # same content as beta once stripped
        item("delta", "c", None),
    ]
    merged, collapsed = dedupe_items(items)
    assert collapsed == 2
    assert [(i.content, i.score, i.dedupe_count, i.dedupe_sources) for i in merged] == [
        ("gamma", 0.9, 2, ("a", "b")),
        ("beta", 0.4, 2, ("a", "b")),
        ("delta", None, None, None),
    ]


def test_dedupe_joins_chains_of_id_and_content():
    items = [
        item("one", "a", 0.1, id="x"),
        item("two", "b", 0.2, id="x"),
        item("two", "c", 0.3, id="y"),
        item("three", "d", 0.05, id="y"),
    ]
    [merged], collapsed = dedupe_items(items)
    assert collapsed == 3
    assert (merged.content, merged.dedupe_count) == ("two", 4)
    assert merged.dedupe_sources == ("a", "b", "c", "d")


def test_a_later_item_can_join_two_groups_seen_apart():
    items = [
        item("p", "a", 0.1, id="1"),
        item("q", "b", 0.2, id="2"),
        item("p", "c", 0.3, id="2"),  # content of the first, id of the second
    ]
    [merged], collapsed = dedupe_items(items)
    assert (collapsed, merged.content, merged.score, merged.dedupe_count) == (2, "p", 0.3, 3)


def test_a_none_score_loses_to_any_score_even_a_negative_one():
    merged, _ = dedupe_items([item("c", "a", None), item("c", "b", -1.0)])
    assert [(i.source, i.score) for i in merged] == [("b", -1.0)]


def test_empty_ids_and_blank_content_are_no_identity():
    items = [item("", "a", id=""), item("", "b", id=""), item("  ", "c"), item("\n\t", "d")]
    assert dedupe_items(items) == (items, 0)
    shared_id = [item(" ", "a", 0.1, id="k"), item("", "b", 0.2, id="k")]
    [merged], collapsed = dedupe_items(shared_id)
    assert (collapsed, merged.source) == (1, "b")


def test_nested_stamps_accumulate():
    inner, _ = dedupe_items([item("c", "a", 0.1), item("c", "b", 0.2)])
    outer, collapsed = dedupe_items([*inner, item("c", "z", 0.3), item("c", "b", 0.0)])
    assert collapsed == 2
    [merged] = outer
    assert (merged.source, merged.dedupe_count, merged.dedupe_sources) == ("z", 4, ("a", "b", "z"))


def test_dedupe_modes():
    items = [item("x", "a", id="1"), item("y", "b", id="1"), item("x", "c", id="2")]
    by_content, collapsed = dedupe_items(items, "content")
    assert collapsed == 1
    assert [(i.content, i.dedupe_sources) for i in by_content] == [
        ("x", ("a", "c")),
        ("y", None),
    ]
    assert dedupe_items(items, None) == (items, 0)
    assert dedupe_items(items[:1], "id") == (items[:1], 0)
    with pytest.raises(ValueError, match="dedupe must be"):
        dedupe_items(items, "hash")


def test_sort_by_score_puts_none_last_and_is_stable():
    items = [
        item("a", score=None),
        item("b", score=0.0),
        item("c", score=0.5),
        item("d", score=0.0),
    ]
    assert [i.content for i in sort_by_score(items)] == ["c", "b", "d", "a"]
    negative = [item("n", score=-0.5), item("z", score=None), item("p", score=0.1)]
    assert [i.content for i in sort_by_score(negative)] == ["p", "n", "z"]


# --- the write shape ---


def test_as_write_item_sends_what_the_write_service_reads():
    full = item(
        "c",
        "ignored",
        metadata={"id": "doc-1", "dedupe_count": 2, "dedupe_sources": ["a"], "x": [1]},
        kind="episodic",
        namespace="user:a",
        tags=["t"],
        occurred_at=datetime(2025, 3, 1, 9, 30, tzinfo=UTC),
        created_at=datetime(2026, 1, 1, tzinfo=UTC),  # the store's own, not written
    )
    assert as_write_item(full) == {
        "content": "c",
        "metadata": {"id": "doc-1", "x": [1]},
        "key": "doc-1",
        "kind": "episodic",
        "namespace": "user:a",
        "tags": ["t"],
        "occurred_at": "2025-03-01T09:30:00+00:00",
    }
    assert as_write_item(item("c", key="k", metadata={"id": "doc"}))["key"] == "k"
    assert as_write_item(item("c", metadata={"id": 7}))["key"] == "7"
    assert as_write_item(item("c")) == {"content": "c", "metadata": {}}
    for empty_id in ("", None):
        assert "key" not in as_write_item(item("c", metadata={"id": empty_id}))


def test_as_write_item_namespace_default_applies_only_when_the_item_has_none():
    assert as_write_item(item("c"), default_namespace="agent")["namespace"] == "agent"
    assert as_write_item(item("c", namespace=""), default_namespace="agent")["namespace"] == ""
    assert as_write_item(item("c", namespace="x"), default_namespace="agent")["namespace"] == "x"
