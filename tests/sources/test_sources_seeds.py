"""Every printed output of the seeds, reproduced under memoryhub's names.

The seeds are the three texts memoryhub's behaviour was specified from, written for the
prototype it carries over (under other names: ``agentkit.*``, ``agenticapi.*``); each
shows example programs and what they print, and that printed output is the behaviour
spec:

* seed 000, the memory contract: ``MemorySource``, ``MemoryItem``, ``CompositeMemory``
  (fan-out, dedupe, partial writes), ``SequentialMemory`` and the decorators
  (``ScopedMemory``, ``CachedMemory``, ``CompactedMemory``, ``ReadOnlyMemory``);
* seed 003, grounding: the "Relevant context:" block (``as_grounder``), attribution by
  source, and tenant isolation from the caller's side;
* seed 004, the key/value ``MemoryStore``: ``put``/``get``/``search``/``forget`` of
  records with a kind and tags.

Where the seeds' in-memory stand-ins print a score, memoryhub's real retrieval gives its
own; the tests pin what the seeds pin (which items, which sources, in which order).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from memoryhub.client import StoredRecord
from memoryhub.exceptions import WriteRefused
from memoryhub.items import MemoryItem
from memoryhub.models import Observation
from memoryhub.scope import Scope, tenant_scope
from memoryhub.services import knowledge_bases
from memoryhub.services.query import render_grounding
from memoryhub.sources import (
    CachedMemory,
    CompactedMemory,
    CompositeMemory,
    CompositeWriteError,
    DjangoMemory,
    DjangoMemoryStore,
    MemoryContext,
    MemorySource,
    ReadOnlyMemory,
    ScopedMemory,
    SequentialMemory,
    ToolMemory,
    as_grounder,
)
from tests.fakes import FakeMemory

pytestmark = pytest.mark.django_db(transaction=True)


def run(coroutine):
    """Run a coroutine, then close the DB connection its ORM calls opened in the
    sync_to_async worker thread (else the test database cannot be dropped)."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    async def main():
        try:
            return await coroutine
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


# --- seed 000: "The smallest thing that works" ---


def test_smallest_thing_that_works(tenant):
    mem = DjangoMemory(mode="keyword")
    ctx = MemoryContext(tenant.scope)

    async def main():
        await mem.write(
            [
                MemoryItem(content="Refunds are issued within 5 business days.", source="policy"),
                MemoryItem(content="Store credit never expires.", source="policy"),
            ],
            ctx=ctx,
        )
        return await mem.query("how long do refunds take", k=2, ctx=ctx)

    [item] = run(main())
    # The source is stamped by the backend (the knowledge base), not carried over.
    assert (item.source, item.content) == ("memory", "Refunds are issued within 5 business days.")
    assert item.score > 0


def test_wiring_to_an_agent_renders_the_grounding_block(tenant):
    memory = DjangoMemory()
    ctx = MemoryContext(tenant.scope)

    async def main():
        await memory.write(
            [MemoryItem(content="Refunds are issued within 5 business days.", source="policy")],
            ctx=ctx,
        )
        return await as_grounder(memory)(ctx, "How long do refunds take?")

    body = run(main())
    system = "Answer customer questions using the provided context."
    assert f"{system}\n\nRelevant context:\n{body}" == (
        "Answer customer questions using the provided context.\n\n"
        "Relevant context:\n[memory] Refunds are issued within 5 business days."
    )


def test_custom_grounder_with_where_and_format(tenant):
    memory = DjangoMemory()
    ctx = MemoryContext(tenant.scope)

    async def main():
        await memory.write(
            [
                MemoryItem(
                    content="Refunds take 5 business days.", source="x", metadata={"tier": "public"}
                ),
                MemoryItem(
                    content="Internal escalation runbook.",
                    source="x",
                    metadata={"tier": "internal"},
                ),
            ],
            ctx=ctx,
        )
        grounder = as_grounder(
            memory,
            k=3,
            where={"tier": "public"},
            format=lambda items: "\n".join(f"- {i.content} ({i.source})" for i in items),
        )
        return await grounder(ctx, "How long do refunds take?")

    assert run(main()) == "- Refunds take 5 business days. (memory)"


def test_empty_result_renders_no_block(tenant):
    body = run(as_grounder(DjangoMemory())(MemoryContext(tenant.scope), "anything at all"))
    assert body == ""
    assert render_grounding([]) is None


# --- the contract ---


def test_memory_source_protocol_shape():
    assert sorted(MemorySource.__annotations__) == ["name"]
    assert sorted(m for m in dir(MemorySource) if not m.startswith("_")) == ["query", "write"]
    assert isinstance(DjangoMemory(), MemorySource)
    assert isinstance(FakeMemory("x"), MemorySource)
    assert not isinstance(object(), MemorySource)


def test_memory_item_is_deeply_frozen_and_hashable():
    item = MemoryItem(content="Refunds take 5 days.", source="handbook", metadata={"path": "/a"})
    assert f"{item.content} | {item.source} | {item.score} | {item.metadata}" == (
        "Refunds take 5 days. | handbook | None | {'path': '/a'}"
    )
    with pytest.raises(TypeError) as raised:
        item.metadata["path"] = "/b"
    assert f"frozen: {raised.value}" == (
        "frozen: this payload belongs to a frozen value and cannot be mutated in place. "
        "Build a new one instead: dataclasses.replace(obj, field={**obj.field, ...})"
    )
    annotated = dataclasses.replace(item, metadata={**item.metadata, "chunk": 3})
    assert f"{annotated.metadata} | still hashable: {hash(annotated) == hash(item)}" == (
        "{'path': '/a', 'chunk': 3} | still hashable: True"
    )
    nested = MemoryItem(content="c", source="s", metadata={"a": {"b": [1, {"c": 2}]}})
    with pytest.raises(TypeError):
        nested.metadata["a"]["b"] = 1
    assert annotated != item  # __eq__ still compares metadata
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.content = "x"
    with pytest.raises(TypeError):
        MemoryItem("c", "s", None, {}, "positional id")


# --- compositions ---


def test_composite_and_sequential(tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    vector = DjangoMemory(sources=["handbook"], write_to="handbook")
    assert vector.name == "handbook"
    cache = FakeMemory("cache", [MemoryItem(content="cached: refunds take 5 days", source="cache")])
    empty_cache = FakeMemory("cache")
    ctx = MemoryContext(tenant.scope)

    async def main():
        await vector.write(
            [MemoryItem(content="Refunds are issued within 5 business days.", source="x")], ctx=ctx
        )
        fanout = CompositeMemory(sources=[cache, vector])
        hot = SequentialMemory(sources=[cache, vector])
        cold = SequentialMemory(sources=[empty_cache, vector])
        return (
            [i.source for i in await fanout.query("refunds", k=5, ctx=ctx)],
            [i.source for i in await hot.query("refunds", k=1, ctx=ctx)],
            [i.source for i in await cold.query("refunds", k=1, ctx=ctx)],
        )

    assert run(main()) == (["handbook", "cache"], ["cache"], ["handbook"])


class BrokenMemory(FakeMemory):
    async def write(self, items, *, ctx):
        raise RuntimeError("index is read-only")


def test_partial_write_failure_is_reported():
    both = CompositeMemory(sources=[FakeMemory(name="cache"), BrokenMemory(name="index")])
    with pytest.raises(CompositeWriteError) as raised:
        run(both.write([MemoryItem(content="note", source="x")], ctx=MemoryContext()))
    assert str(raised.value) == (
        "CompositeMemory.write partial failure — accepted: ['cache']; "
        "failed: index: RuntimeError: index is read-only"
    )
    assert f"accepted = {raised.value.accepted} | failed = {list(raised.value.failed)}" == (
        "accepted = ['cache'] | failed = ['index']"
    )


def test_dedupe_modes_and_accumulated_stamps():
    a = FakeMemory(
        "a", [MemoryItem("Same fact.", "a", 0.9, id="1"), MemoryItem("", "a", 0.1, id="")]
    )
    b = FakeMemory("b", [MemoryItem(" Same fact.\n", "b", 0.5), MemoryItem("  ", "b", 0.2, id="")])
    c = FakeMemory("c", [MemoryItem("other words", "c", 0.7, id="1")])
    ctx = MemoryContext()
    inner = CompositeMemory([a, b], name="inner")
    outer = CompositeMemory([inner, c])
    items = run(outer.query("q", k=10, ctx=ctx))
    [merged] = [i for i in items if i.dedupe_count]
    assert (merged.content, merged.score, merged.dedupe_count) == ("Same fact.", 0.9, 3)
    assert merged.dedupe_sources == ("a", "b", "c")
    blanks = [i for i in items if not i.content.strip()]
    assert len(blanks) == 2  # "" ids and blank content carry no identity
    by_content = run(CompositeMemory([a, c], dedupe="content").query("q", k=10, ctx=ctx))
    assert len(by_content) == 3  # shared id ignored in content mode
    assert len(run(CompositeMemory([a, b], dedupe=None).query("q", k=10, ctx=ctx))) == 4
    assert [kind for kind, _ in ctx.observations].count("query.deduplicated") == 2


def test_reranker_protocol_and_none_scores_last():
    class Reverse:
        async def rerank(self, query, items, *, k):
            return sorted(items, key=lambda item: item.content, reverse=True)[:k]

    sources = [
        FakeMemory("t", [MemoryItem("unranked", "t")]),
        FakeMemory("v", [MemoryItem("ranked", "v", 0.1)]),
    ]
    ctx = MemoryContext()
    default = run(CompositeMemory(sources).query("q", k=5, ctx=ctx))
    assert [i.content for i in default] == ["ranked", "unranked"]
    custom = run(CompositeMemory(sources, reranker=Reverse()).query("q", k=5, ctx=ctx))
    assert [i.content for i in custom] == ["unranked", "ranked"]


# --- read-only by policy ---


def test_read_only_memory_seed_example():
    registry = FakeMemory(
        "registry",
        [MemoryItem(content="eu-west-1 is the GDPR-resident region.", source="registry")],
    )
    curated = ReadOnlyMemory(inner=registry)
    guess = [MemoryItem(content="I think it is eu-west-2.", source="agent")]
    ctx = MemoryContext()
    lines = [f"name: {curated.name} | accepts_writes: {curated.accepts_writes}"]

    async def main() -> None:
        recall = await curated.query("region", k=1, ctx=ctx)
        lines.append(f"recall: {[(i.source, i.content) for i in recall]}")
        try:
            await curated.write(guess, ctx=ctx)
        except WriteRefused as exc:
            lines.append(f"refused: {exc.source} | items: {exc.n}")
        strict = CompositeMemory(sources=[FakeMemory(name="notes"), curated])
        try:
            await strict.write(guess, ctx=ctx)
        except CompositeWriteError as exc:
            lines.append(f"strict : {exc.accepted} {exc.refused} {list(exc.failed)}")
        lenient_kb = ReadOnlyMemory(inner=registry, on_write="ignore")
        notes = FakeMemory(name="notes")
        await CompositeMemory(sources=[notes, lenient_kb]).write(guess, ctx=ctx)
        lines.append(
            f"lenient: notes wrote {len(notes.writes)} | registry wrote {len(registry.writes)}"
        )
        lines.append(f"         refused_writes = {lenient_kb.refused_writes}")

    run(main())
    assert lines == [
        "name: registry | accepts_writes: False",
        "recall: [('registry', 'eu-west-1 is the GDPR-resident region.')]",
        "refused: registry | items: 1",
        "strict : ['notes'] [] ['registry']",
        "lenient: notes wrote 1 | registry wrote 0",
        "         refused_writes = 1",
    ]
    refused = [payload for kind, payload in ctx.observations if kind == "memory.write_refused"]
    assert refused[-1] == {"source": "registry", "n": 1, "policy": "ignore"}


def test_read_only_details():
    with pytest.raises(ValueError, match="on_write"):
        ReadOnlyMemory(FakeMemory("x"), on_write="drop")
    kb = ReadOnlyMemory(FakeMemory("kb"))
    with pytest.raises(WriteRefused) as raised:
        run(kb.write([], ctx=MemoryContext()))
    assert raised.value.n == 0
    assert not isinstance(raised.value, PermissionError)
    with pytest.raises(TypeError):
        ReadOnlyMemory(FakeMemory("x"), accepts_writes=True)


def test_accepts_writes_survives_nesting():
    ro = ReadOnlyMemory(FakeMemory("ro"))
    rw = FakeMemory("rw")
    assert ScopedMemory(ro).accepts_writes is False
    assert CachedMemory(ro).accepts_writes is False
    assert CompactedMemory(ro, str.upper).accepts_writes is False
    assert CompositeMemory([ro, rw]).accepts_writes is True
    assert CompositeMemory([ro, ReadOnlyMemory(FakeMemory("x"))]).accepts_writes is False
    assert SequentialMemory([ro, rw]).accepts_writes is False
    assert SequentialMemory([rw, ro]).accepts_writes is True


def test_read_only_kb_through_django_memory_honours_the_policy(tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    knowledge_bases.ensure_knowledge_base(
        tenant.scope, "lenient", read_only=True, on_write="ignore"
    )
    ctx = MemoryContext(tenant.scope)
    item = [MemoryItem(content="guess", source="agent")]
    with pytest.raises(WriteRefused):
        run(DjangoMemory(write_to="handbook").write(item, ctx=ctx))
    notes = FakeMemory("notes")
    run(
        CompositeMemory([notes, DjangoMemory(write_to="lenient", name="lenient")]).write(
            item, ctx=ctx
        )
    )
    assert len(notes.writes) == 1
    with pytest.raises(CompositeWriteError) as raised:
        run(
            CompositeMemory([notes, DjangoMemory(write_to="handbook", name="handbook")]).write(
                item, ctx=ctx
            )
        )
    assert list(raised.value.failed) == ["handbook"]


# --- tenant scoping ---


def test_scoped_memory_seed_example(tenant, other_tenant):
    guarded = ScopedMemory(inner=DjangoMemory(sources=["handbook"], write_to="handbook"))
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    knowledge_bases.ensure_knowledge_base(other_tenant.scope, "handbook")
    mine = MemoryContext(tenant.scope, actor="agent")

    async def main():
        await guarded.write([MemoryItem(content="Tenant 1 policy.", source="x")], ctx=mine)
        in_tenant = [i.content for i in await guarded.query("policy", k=1, ctx=mine)]
        other = await guarded.query("policy", k=1, ctx=MemoryContext(other_tenant.scope))
        try:
            await guarded.query("policy", k=1, ctx=MemoryContext())
            refused = "not refused"
        except PermissionError:
            refused = "refused: unscoped run"
        return in_tenant, other, guarded.name, refused

    assert run(main()) == (["Tenant 1 policy."], [], "handbook", "refused: unscoped run")
    # One observation per write: the write service's (with created/updated/operator);
    # the guard records none over a source that observes its own writes.
    assert mine.observations == []
    with tenant_scope(tenant.scope):
        written = Observation.objects.filter(kind="memory.written", actor="agent")
        payloads = [o.payload for o in written]
    assert payloads == [
        {"n": 1, "source": "handbook", "created": 1, "updated": 0, "operator": False}
    ]


def test_scoped_memory_refuses_half_scopes_and_custom_policies(tenant):
    inner = FakeMemory("kb")
    half = MemoryContext()
    half.scope = type("HalfScope", (), {"org_id": 0, "domain_id": None})()
    with pytest.raises(PermissionError):
        run(ScopedMemory(inner).query("q", k=1, ctx=half))
    zero = MemoryContext(Scope(org_id=0, domain_id=0))
    assert run(ScopedMemory(inner).query("q", k=1, ctx=zero)) == []

    def explode(ctx):
        raise RuntimeError("policy engine down")

    with pytest.raises(PermissionError):
        run(ScopedMemory(inner, enforce=explode).query("q", k=1, ctx=zero))
    pinned = ScopedMemory(inner, enforce=lambda ctx: ctx.scope == tenant.scope)
    with pytest.raises(PermissionError):
        run(pinned.query("q", k=1, ctx=zero))
    assert inner.queries == [("q", 1)]  # refused calls never reached the source


def test_django_memory_bound_to_a_scope_refuses_another(tenant, other_tenant):
    bound = DjangoMemory(tenant.scope)
    with pytest.raises(PermissionError):
        run(bound.query("x", k=1, ctx=MemoryContext(other_tenant.scope)))
    with pytest.raises(PermissionError):
        run(DjangoMemory().query("x", k=1, ctx=MemoryContext()))


def test_cached_memory_seed_example_and_scope_in_key(tenant, other_tenant):
    slow = FakeMemory("handbook", [MemoryItem(content="Refunds take 5 days.", source="x")])
    memory = ScopedMemory(inner=CachedMemory(inner=slow, ttl_seconds=30.0))
    ctx = MemoryContext(tenant.scope)
    run(memory.query("refunds", k=1, ctx=ctx))
    run(memory.query("refunds", k=1, ctx=ctx))
    assert len(slow.queries) == 1
    run(memory.query("refunds", k=1, ctx=MemoryContext(other_tenant.scope)))
    assert len(slow.queries) == 2  # another tenant never gets the first one's entry
    run(memory.query("refunds", k=1, ctx=ctx, where={"tags": ["security", "finance"]}))
    assert len(slow.queries) == 3
    with pytest.raises(PermissionError):
        run(CachedMemory(slow, strict_scope=True).query("q", k=1, ctx=MemoryContext()))


def test_compacted_memory():
    inner = FakeMemory(
        "kb", [MemoryItem("a long passage", "kb", 0.5), MemoryItem("another", "kb", 0.4)]
    )
    compacted = CompactedMemory(inner, lambda text: text[:6], max_items=1)
    assert [i.content for i in run(compacted.query("q", k=2, ctx=MemoryContext()))] == ["a long"]


# --- tool-backed memory ---


def test_tool_memory_seed_example():
    def search_docs(query: str, limit: int = 5) -> list[dict]:
        corpus = [
            {"content": "Deploys freeze on Fridays.", "url": "/handbook/deploys", "score": 0.9},
            {"content": "Rollbacks need two approvers.", "url": "/handbook/rollback", "score": 0.7},
        ]
        return corpus[:limit]

    probe = ToolMemory(tool=search_docs, name="handbook")
    ctx = MemoryContext()
    lines = [
        f"{item.source} {item.score} {item.metadata} | {item.content}"
        for item in run(probe.query("deploy policy", k=2, ctx=ctx))
    ]
    assert lines == [
        "handbook 0.9 {'url': '/handbook/deploys'} | Deploys freeze on Fridays.",
        "handbook 0.7 {'url': '/handbook/rollback'} | Rollbacks need two approvers.",
    ]
    assert run(probe.write([], ctx=ctx)) is None
    assert [i.content for i in run(probe.query("q", k=5, ctx=ctx, where={"limit": 1}))] == [
        "Deploys freeze on Fridays."
    ]


def test_tool_memory_result_shapes():
    def tool_returning(value):
        return ToolMemory(lambda **kwargs: value, name="t")

    ctx = MemoryContext()
    shapes = {
        "results": {"results": [{"text": "a"}, {"snippet": "b"}]},
        "strings": ["a", "b"],
        "text": "a\n\nb\n\n",
        "other": 42,
    }
    got = {
        name: [i.content for i in run(tool_returning(v).query("q", k=5, ctx=ctx))]
        for name, v in shapes.items()
    }
    assert got == {
        "results": ["a", "b"],
        "strings": ["a", "b"],
        "text": ["a", "b"],
        "other": ["42"],
    }


# --- seed 003: grounding and isolation from the caller's side ---


def test_seed_003_working_code(tenant, other_tenant):
    handbook = [
        MemoryItem(
            content="Refunds are issued to the original payment method within 5 business days.",
            source="handbook",
            metadata={"id": "refunds", "team": "support"},
        ),
        MemoryItem(
            content="Orders over $500 need a manager's approval before they ship.",
            source="handbook",
            metadata={"id": "approvals", "team": "ops"},
        ),
    ]
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    # The other tenant runs the same product: its own (empty) handbook. A tenant without
    # one gets UnknownSource, as over the API (tests/sources/test_sources_truth.py).
    knowledge_bases.ensure_knowledge_base(other_tenant.scope, "handbook")
    memory = DjangoMemory(sources=["handbook"], write_to="handbook")
    ctx = MemoryContext(tenant.scope)

    async def main():
        await memory.write(handbook, ctx=ctx)
        await memory.write(handbook, ctx=ctx)  # the same ids replace, never duplicate
        items = await memory.query("How long do refunds take?", k=2, ctx=ctx)
        grounding = await as_grounder(memory, k=1)(ctx, "How long do refunds take?")
        other = await memory.query("refunds", k=2, ctx=MemoryContext(other_tenant.scope))
        return items, grounding, other

    items, grounding, other = run(main())
    assert items[0].content.startswith("Refunds are issued to the original payment method")
    assert items[0].source == "handbook"
    assert items[0].metadata["id"] == "refunds"  # not consumed, unlike the seed's VectorMemory
    assert len(items) == 2
    assert grounding == (
        "[handbook] Refunds are issued to the original payment method within 5 business days."
    )
    assert other == []


# --- seed 004: the key/value store ---


def test_seed_004_memory_store(tenant, other_tenant):
    store = DjangoMemoryStore(tenant.scope)
    other_store = DjangoMemoryStore(other_tenant.scope)

    async def main():
        await store.put(
            StoredRecord(
                scope="user:alice", key="currency", value="EUR", tags=("preference", "locale")
            )
        )
        await store.put(
            StoredRecord(
                scope="user:alice", key="timezone", value="Europe/Berlin", tags=("preference",)
            )
        )
        await store.put(
            StoredRecord(scope="user:alice", key="plan:q1", value={"steps": 3}, kind="procedural")
        )
        await store.put(
            StoredRecord(scope="user:alice", key="currency", value="USD", tags=("preference",))
        )
        await store.put(StoredRecord(scope="user:bob", key="currency", value="GBP"))
        currency = await store.get(scope="user:alice", key="currency")
        missing = await store.get(scope="user:alice", key="nope")
        newest = await store.search(scope="user:alice")
        procedural = await store.search(scope="user:alice", kind="procedural")
        prefixed = await store.search(scope="user:alice", key_prefix="plan:")
        tagged = await store.search(scope="user:alice", tag="preference")
        foreign = await other_store.get(scope="user:alice", key="currency")
        one = await store.forget(scope="user:alice", key="timezone")
        everything = await store.forget(scope="user:alice")
        after = await store.search(scope="user:alice")
        bob = await store.get(scope="user:bob", key="currency")
        return (
            currency,
            missing,
            newest,
            procedural,
            prefixed,
            tagged,
            foreign,
            one,
            everything,
            after,
            bob,
        )

    (
        currency,
        missing,
        newest,
        procedural,
        prefixed,
        tagged,
        foreign,
        one,
        everything,
        after,
        bob,
    ) = run(main())
    assert (currency.value, currency.tags, currency.kind) == ("USD", ("preference",), "semantic")
    assert currency.updated_at >= currency.timestamp
    assert missing is None
    assert [r.key for r in newest] == ["currency", "plan:q1", "timezone"]
    assert [r.value for r in procedural] == [{"steps": 3}]
    assert [r.key for r in prefixed] == ["plan:q1"]
    assert sorted(r.key for r in tagged) == ["currency", "timezone"]
    assert foreign is None
    assert (one, everything, after) == (1, 2, [])
    assert bob.value == "GBP"
