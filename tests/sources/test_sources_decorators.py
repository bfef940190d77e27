"""The decorators and compositions on their own, over in-memory fakes: no database.

The printed examples of seed 000, the memory contract, are reproduced in
``test_sources_seeds.py`` (which says what the seeds are); this file pins the behaviour
those examples do not print (cache expiry and clearing, where a write goes, empty
writes), fast enough to run under mutation testing.
"""

from __future__ import annotations

import asyncio

import pytest

from memoryhub.exceptions import WriteRefused
from memoryhub.items import MemoryItem
from memoryhub.scope import Scope
from memoryhub.sources import (
    CachedMemory,
    CompactedMemory,
    CompositeMemory,
    CompositeWriteError,
    MemoryContext,
    ReadOnlyMemory,
    ScopedMemory,
    SequentialMemory,
    decorators,
)
from tests.fakes import FakeMemory

ACME = Scope(org_id=1, domain_id=1)
GLOBEX = Scope(org_id=2, domain_id=1)
NOTE = [MemoryItem(content="note", source="agent")]


def run(coroutine):
    return asyncio.run(coroutine)


def context(scope: Scope | None = ACME) -> MemoryContext:
    return MemoryContext(scope, persist=False)


class Clock:
    """Stands in for ``time.monotonic`` as the cache reads it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(decorators.time, "monotonic", fake)
    return fake


def fact(content: str = "Refunds take 5 days.", score: float | None = None) -> MemoryItem:
    return MemoryItem(content=content, source="x", score=score)


# --- CachedMemory ---


def test_cache_serves_a_repeat_until_the_ttl_has_passed(clock):
    slow = FakeMemory("handbook", [fact()])
    cached = CachedMemory(slow, ttl_seconds=30.0)
    ctx = context()
    first = run(cached.query("refunds", k=1, ctx=ctx))
    clock.now += 29.999
    assert run(cached.query("refunds", k=1, ctx=ctx)) == first
    assert len(slow.queries) == 1
    clock.now += 0.001  # exactly ttl_seconds after the entry was stored: expired
    run(cached.query("refunds", k=1, ctx=ctx))
    assert len(slow.queries) == 2
    clock.now += 29.0  # the refreshed entry has a new deadline
    run(cached.query("refunds", k=1, ctx=ctx))
    assert len(slow.queries) == 2


def test_the_default_ttl_is_a_minute(clock):
    slow = FakeMemory("handbook", [fact()])
    cached = CachedMemory(slow)
    run(cached.query("refunds", k=1, ctx=context()))
    clock.now += 59.9
    run(cached.query("refunds", k=1, ctx=context()))
    assert len(slow.queries) == 1
    clock.now += 0.1
    run(cached.query("refunds", k=1, ctx=context()))
    assert len(slow.queries) == 2


def test_a_write_through_the_cache_clears_it_and_reaches_the_source(clock):
    slow = FakeMemory("handbook", [fact()])
    cached = CachedMemory(slow, ttl_seconds=30.0)
    ctx = context()
    run(cached.query("refunds", k=1, ctx=ctx))
    run(cached.query("other", k=1, ctx=context(GLOBEX)))
    assert run(cached.write(NOTE, ctx=ctx)) is None
    assert slow.writes == [NOTE]
    run(cached.query("refunds", k=1, ctx=ctx))
    run(cached.query("other", k=1, ctx=context(GLOBEX)))  # every entry went, not one
    assert slow.queries == [("refunds", 1), ("other", 1), ("refunds", 1), ("other", 1)]


def test_the_cache_key_is_scope_query_k_and_canonical_where(clock):
    slow = FakeMemory("handbook", [fact()])
    cached = CachedMemory(slow)
    ctx = context()
    run(cached.query("q", k=1, ctx=ctx, where={"a": 1, "b": [1, 2]}))
    run(cached.query("q", k=1, ctx=ctx, where={"b": [1, 2], "a": 1}))  # same, reordered
    assert len(slow.queries) == 1
    for other in (
        lambda: cached.query("q", k=2, ctx=ctx, where={"a": 1, "b": [1, 2]}),
        lambda: cached.query("Q", k=1, ctx=ctx, where={"a": 1, "b": [1, 2]}),
        lambda: cached.query("q", k=1, ctx=ctx, where={"a": 2, "b": [1, 2]}),
        lambda: cached.query("q", k=1, ctx=context(GLOBEX), where={"a": 1, "b": [1, 2]}),
        lambda: cached.query("q", k=1, ctx=context(Scope(org_id=1, domain_id=2)), where=None),
    ):
        run(other())
    assert len(slow.queries) == 6
    run(cached.query("q", k=1, ctx=ctx))
    run(cached.query("q", k=1, ctx=ctx, where={}))  # no filter and {} are one key
    assert len(slow.queries) == 7


def test_unscoped_contexts_share_one_bucket_unless_strict(clock):
    slow = FakeMemory("handbook", [fact()])
    cached = CachedMemory(slow)
    run(cached.query("q", k=1, ctx=context(None)))
    run(cached.query("q", k=1, ctx=context(None)))
    assert len(slow.queries) == 1
    run(cached.query("q", k=1, ctx=context()))  # a scoped call is another bucket
    assert len(slow.queries) == 2
    with pytest.raises(PermissionError, match="handbook: CachedMemory needs a scoped context"):
        run(CachedMemory(slow, strict_scope=True).query("q", k=1, ctx=context(None)))
    assert len(slow.queries) == 2


def test_a_cached_answer_is_a_copy_the_caller_may_change(clock):
    slow = FakeMemory("handbook", [fact()])
    cached = CachedMemory(slow)
    run(cached.query("q", k=1, ctx=context())).clear()
    run(cached.query("q", k=1, ctx=context())).clear()
    assert [i.content for i in run(cached.query("q", k=1, ctx=context()))] == [fact().content]


# --- ScopedMemory ---


def test_scoped_memory_accepts_an_async_policy():
    inner = FakeMemory("kb", [fact()])

    async def only_acme(ctx):
        return ctx.scope == ACME

    guarded = ScopedMemory(inner, enforce=only_acme)
    assert len(run(guarded.query("q", k=1, ctx=context()))) == 1
    with pytest.raises(PermissionError, match="kb: refused an unscoped or foreign-tenant call"):
        run(guarded.query("q", k=1, ctx=context(GLOBEX)))
    with pytest.raises(PermissionError):
        run(guarded.write(NOTE, ctx=context(GLOBEX)))
    assert inner.writes == []


def test_scoped_memory_writes_and_records_one_observation():
    inner = FakeMemory("kb")
    ctx = context()
    run(ScopedMemory(inner).write(NOTE * 2, ctx=ctx))
    assert inner.writes == [NOTE * 2]
    assert ctx.observations == [("memory.written", {"n": 2, "source": "kb"})]
    refused = context()
    run(ScopedMemory(ReadOnlyMemory(FakeMemory("ro"), on_write="ignore")).write(NOTE, ctx=refused))
    assert [kind for kind, _ in refused.observations] == ["memory.write_refused"]


def test_require_scope_needs_both_ids():
    assert decorators.require_scope(context(Scope(org_id=0, domain_id=0)))
    assert not decorators.require_scope(context(None))
    half = context(None)
    half.scope = type("Half", (), {"org_id": 1, "domain_id": None})()
    assert not decorators.require_scope(half)
    half.scope = type("Half", (), {"org_id": None, "domain_id": 1})()
    assert not decorators.require_scope(half)


# --- CompactedMemory ---


def test_compacted_memory_takes_an_async_callable_or_a_compactor_object():
    inner = FakeMemory("kb", [fact("a long passage", 0.5), fact("another one", 0.4)])

    async def shorten(text: str) -> str:
        return text[:3]

    class Compactor:
        def compact(self, text: str) -> str:
            return text.upper()

    ctx = context()
    assert [i.content for i in run(CompactedMemory(inner, shorten).query("q", k=2, ctx=ctx))] == [
        "a l",
        "ano",
    ]
    compacted = run(CompactedMemory(inner, Compactor()).query("q", k=2, ctx=ctx))
    assert [(i.content, i.source, i.score) for i in compacted] == [
        ("A LONG PASSAGE", "kb", 0.5),
        ("ANOTHER ONE", "kb", 0.4),
    ]
    run(CompactedMemory(inner, shorten).write(NOTE, ctx=ctx))
    assert inner.writes == [NOTE]


# --- ReadOnlyMemory ---


def test_read_only_refusal_is_counted_and_observed():
    ro = ReadOnlyMemory(FakeMemory("registry"))
    ctx = context()
    with pytest.raises(WriteRefused) as raised:
        run(ro.write(NOTE * 3, ctx=ctx))
    assert (raised.value.source, raised.value.n) == ("registry", 3)
    assert ro.refused_writes == 1
    assert ctx.observations == [
        ("memory.write_refused", {"source": "registry", "n": 3, "policy": "refuse"})
    ]
    assert ro.inner.writes == []


# --- SequentialMemory ---


def test_sequential_write_goes_to_the_first_source_only():
    first, second = FakeMemory("cache"), FakeMemory("vector")
    chain = SequentialMemory([first, second])
    run(chain.write(NOTE, ctx=context()))
    assert (first.writes, second.writes) == ([NOTE], [])


def test_an_empty_write_touches_no_source():
    refusing = ReadOnlyMemory(FakeMemory("registry"))  # raises even for an empty write
    notes = FakeMemory("notes")
    ctx = context()
    assert run(SequentialMemory([refusing, notes]).write([], ctx=ctx)) is None
    assert run(CompositeMemory([notes, refusing]).write([], ctx=ctx)) is None
    assert notes.writes == []
    assert refusing.refused_writes == 0
    assert ctx.observations == []


def test_sequential_asks_each_source_for_what_is_still_missing():
    one = FakeMemory("one", [fact("a")])
    three = FakeMemory("three", [fact("b"), fact("c"), fact("d")])
    never = FakeMemory("never", [fact("e")])
    chain = SequentialMemory([one, three, never])
    got = run(chain.query("q", k=3, ctx=context()))
    assert [(i.source, i.content) for i in got] == [("one", "a"), ("three", "b"), ("three", "c")]
    assert (one.queries, three.queries, never.queries) == ([("q", 3)], [("q", 2)], [])
    assert chain.name == "sequential"
    with pytest.raises(ValueError, match="SequentialMemory needs at least one source"):
        SequentialMemory([])


def test_sequential_goes_on_while_sources_come_up_short():
    sources = [FakeMemory("a"), FakeMemory("b", [fact("b")]), FakeMemory("c", [fact("c")])]
    got = run(SequentialMemory(sources).query("q", k=5, ctx=context()))
    assert [i.content for i in got] == ["b", "c"]
    assert [s.queries for s in sources] == [[("q", 5)], [("q", 5)], [("q", 4)]]


# --- CompositeMemory ---


def test_composite_write_broadcasts_and_buckets_outcomes():
    class Refusing(FakeMemory):
        async def write(self, items, *, ctx):
            return type("Outcome", (), {"accepted": [], "refused": [self.name]})()

    class Broken(FakeMemory):
        async def write(self, items, *, ctx):
            raise RuntimeError("down")

    notes = FakeMemory("notes")
    composite = CompositeMemory(
        [notes, Refusing("policy"), ReadOnlyMemory(FakeMemory("ro"), on_write="ignore")]
    )
    assert run(composite.write(NOTE, ctx=context())) is None
    assert notes.writes == [NOTE]
    with pytest.raises(CompositeWriteError) as raised:
        run(
            CompositeMemory(
                [
                    notes,
                    Refusing("policy"),
                    ReadOnlyMemory(FakeMemory("ro"), on_write="ignore"),
                    Broken("index"),
                ]
            ).write(NOTE, ctx=context())
        )
    assert (raised.value.accepted, raised.value.refused) == (["notes"], ["policy", "ro"])
    assert str(raised.value) == (
        "CompositeMemory.write partial failure — accepted: ['notes']; "
        "refused (read-only): ['policy', 'ro']; failed: index: RuntimeError: down"
    )


def test_composite_write_lets_a_non_exception_through():
    class Interrupted(FakeMemory):
        async def write(self, items, *, ctx):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(CompositeMemory([FakeMemory("notes"), Interrupted("x")]).write(NOTE, ctx=context()))


def test_composite_query_merges_reranks_and_cuts_to_k():
    a = FakeMemory("a", [fact("same", 0.2), fact("low", 0.1)])
    b = FakeMemory("b", [fact("same", 0.9), fact("high", 0.5)])
    ctx = context()
    composite = CompositeMemory([a, b])
    assert composite.name == "composite"
    got = run(composite.query("q", k=2, ctx=ctx))
    assert [(i.content, i.score, i.dedupe_count) for i in got] == [
        ("same", 0.9, 2),
        ("high", 0.5, None),
    ]
    assert ctx.observations == [
        ("query.deduplicated", {"n": 1, "sources": ["a", "b"], "source": "composite"})
    ]

    asked = []

    def longest_first(query, items, *, k):
        asked.append((query, k))
        return sorted(items, key=lambda item: -len(item.content))  # ignores k

    custom = CompositeMemory([a, b], reranker=longest_first, dedupe=None, name="fan")
    ctx = context()
    assert [i.content for i in run(custom.query("q", k=3, ctx=ctx))] == ["same", "same", "high"]
    assert asked == [("q", 3)]  # the reranker sees the query and k; the cut applies anyway
    assert ctx.observations == []
    with pytest.raises(ValueError, match="dedupe"):
        CompositeMemory([a], dedupe="hash")


def test_composite_passes_query_k_and_where_to_every_source():
    seen = []

    class Recording(FakeMemory):
        async def query(self, query, *, k, ctx, where=None):
            seen.append((self.name, query, k, where))
            return []

    run(
        CompositeMemory([Recording("a"), Recording("b")]).query(
            "q", k=4, ctx=context(), where={"t": 1}
        )
    )
    assert sorted(seen) == [("a", "q", 4, {"t": 1}), ("b", "q", 4, {"t": 1})]


# --- what every decorator passes on ---


class Recording(FakeMemory):
    """Records every argument of every call, where and ctx included."""

    def __init__(self, name: str, items=()) -> None:
        super().__init__(name, items)
        self.calls: list[tuple] = []

    async def query(self, query, *, k, ctx, where=None):
        self.calls.append(("query", query, k, ctx, where))
        return await super().query(query, k=k, ctx=ctx, where=where)

    async def write(self, items, *, ctx):
        self.calls.append(("write", list(items), ctx))
        return "outcome"


@pytest.mark.parametrize(
    "wrap",
    [
        ScopedMemory,
        CachedMemory,
        lambda inner: CompactedMemory(inner, str.upper),
        lambda inner: ReadOnlyMemory(inner, on_write="ignore"),
        lambda inner: CompositeMemory([inner]),
        lambda inner: SequentialMemory([inner]),
    ],
    ids=["scoped", "cached", "compacted", "read-only", "composite", "sequential"],
)
def test_a_query_reaches_the_source_with_its_arguments_unchanged(wrap):
    inner = Recording("kb", [fact("a", 0.5), fact("b", 0.4)])
    ctx = context()
    got = run(wrap(inner).query("refunds", k=2, ctx=ctx, where={"tier": "public"}))
    assert inner.calls == [("query", "refunds", 2, ctx, {"tier": "public"})]
    assert [i.content.lower() for i in got] == ["a", "b"]


@pytest.mark.parametrize(
    "wrap",
    [
        ScopedMemory,
        CachedMemory,
        lambda inner: CompactedMemory(inner, str.upper),
        lambda inner: SequentialMemory([inner]),
    ],
    ids=["scoped", "cached", "compacted", "sequential"],
)
def test_a_write_reaches_the_source_with_its_context_and_returns_its_outcome(wrap):
    inner = Recording("kb")
    ctx = context()
    assert run(wrap(inner).write(NOTE, ctx=ctx)) == "outcome"
    assert inner.calls == [("write", NOTE, ctx)]


def test_a_context_with_no_scope_attribute_is_the_unscoped_bucket(clock):
    class Bare:
        async def observe(self, kind, payload):
            pass

    slow = FakeMemory("handbook", [fact()])
    cached = CachedMemory(slow)
    run(cached.query("q", k=1, ctx=Bare()))
    run(cached.query("q", k=1, ctx=context(None)))
    assert len(slow.queries) == 1
    with pytest.raises(PermissionError):
        run(CachedMemory(slow, strict_scope=True).query("q", k=1, ctx=Bare()))


def test_a_filter_value_json_cannot_spell_still_keys_the_cache(clock):
    from datetime import date

    slow = FakeMemory("handbook", [fact()])
    cached = CachedMemory(slow)
    run(cached.query("q", k=1, ctx=context(), where={"after": date(2026, 1, 1)}))
    run(cached.query("q", k=1, ctx=context(), where={"after": date(2026, 1, 1)}))
    run(cached.query("q", k=1, ctx=context(), where={"after": date(2026, 1, 2)}))
    assert len(slow.queries) == 2
