"""Compositions report the truth over the real backends.

Each test builds the compositions of seed 000, the memory contract (the seeds: the
prototype texts whose printed outputs are the behaviour spec, ``test_sources_seeds.py``),
over ``DjangoMemory`` and ``HttpMemory`` on read-only (``refuse``/``ignore``) knowledge
bases and compares the buckets (accepted/refused/failed) and the observations with what
that seed specifies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from memoryhub import policy
from memoryhub.client import HttpMemory
from memoryhub.exceptions import UnknownSource
from memoryhub.items import MemoryItem
from memoryhub.models import KnowledgeBase, Observation
from memoryhub.scope import tenant_scope
from memoryhub.services import knowledge_bases, write
from memoryhub.sources import (
    CachedMemory,
    CompositeMemory,
    CompositeWriteError,
    DjangoMemory,
    MemoryContext,
    ReadOnlyMemory,
    ScopedMemory,
    SequentialMemory,
)
from tests.factories import create_api_key
from tests.fakes import FakeMemory
from tests.sources.test_sources_seeds import run

pytestmark = pytest.mark.django_db(transaction=True)

GUESS = [MemoryItem(content="I think it is eu-west-2.", source="agent")]


class Broken:
    """A member whose write fails: it makes a composite report its buckets."""

    name = "broken"

    async def query(
        self, query: str, *, k: int, ctx: MemoryContext, where: Mapping[str, Any] | None = None
    ) -> list[MemoryItem]:
        return []

    async def write(self, items: Sequence[MemoryItem], *, ctx: MemoryContext) -> None:
        raise RuntimeError("disk full")


@pytest.fixture
def kbs(tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "registry", read_only=True)
    knowledge_bases.ensure_knowledge_base(
        tenant.scope, "lenient", read_only=True, on_write=KnowledgeBase.OnWrite.IGNORE
    )
    knowledge_bases.ensure_knowledge_base(tenant.scope, "notes")
    return tenant


def written(tenant) -> list[tuple[str, int]]:
    with tenant_scope(tenant.scope):
        rows = Observation.objects.filter(kind=Observation.Kind.MEMORY_WRITTEN).order_by("pk")
        return [(row.source, row.count) for row in rows]


# --- accepts_writes is derived per target --------------------------------------------


def test_django_memory_bound_to_a_read_only_kb_does_not_accept_writes(kbs, other_tenant):
    scope = kbs.scope
    assert DjangoMemory(scope, write_to="registry").accepts_writes is False
    assert DjangoMemory(scope, write_to="lenient").accepts_writes is False
    assert DjangoMemory(scope, write_to="notes").accepts_writes is True
    assert DjangoMemory(scope).accepts_writes is True  # memory: created by the first write
    assert DjangoMemory(scope, write_to="no-such-kb").accepts_writes is False
    # Another tenant's policy is its own: its registry is writable.
    knowledge_bases.ensure_knowledge_base(other_tenant.scope, "registry")
    assert DjangoMemory(other_tenant.scope, write_to="registry").accepts_writes is True
    # Unbound: decided per call, so permissive (the write result tells).
    assert DjangoMemory(write_to="registry").accepts_writes is True


def test_accepts_writes_is_answered_inside_an_event_loop_and_nests(kbs):
    scope = kbs.scope

    async def main() -> tuple[bool, bool, bool]:
        curated = ScopedMemory(DjangoMemory(scope, write_to="registry"))
        both = CompositeMemory([curated, DjangoMemory(scope, write_to="lenient")])
        mixed = CompositeMemory([curated, DjangoMemory(scope, write_to="notes")])
        return curated.accepts_writes, both.accepts_writes, mixed.accepts_writes

    assert run(main()) == (False, False, True)


def test_a_lenient_kb_inside_a_fan_out_is_refused_not_accepted(kbs):
    ctx = MemoryContext(kbs.scope)
    lenient = DjangoMemory(kbs.scope, write_to="lenient", name="lenient")
    notes = FakeMemory("notes")
    with pytest.raises(CompositeWriteError) as raised:
        run(CompositeMemory([notes, lenient, Broken()]).write(GUESS, ctx=ctx))
    assert (raised.value.accepted, raised.value.refused) == (["notes"], ["lenient"])
    assert list(raised.value.failed) == ["broken"]


# --- HttpMemory maps the server's buckets ----------------------------------------------


@pytest.fixture
def remote(live_server, kbs):
    _, key = create_api_key(org=kbs.org, can_read=True, can_write=True)
    return live_server.url, key


def test_http_memory_reports_the_servers_read_only_flag(remote):
    url, key = remote
    assert HttpMemory(url, api_key=key, domain="support", write_to="registry").accepts_writes is (
        False
    )
    assert HttpMemory(url, api_key=key, domain="support", write_to="lenient").accepts_writes is (
        False
    )
    assert HttpMemory(url, api_key=key, domain="support", write_to="notes").accepts_writes is True
    assert HttpMemory(url, api_key=key, domain="support").accepts_writes is True


def test_http_memory_writing_to_an_ignore_kb_is_bucketed_refused(remote, kbs):
    url, key = remote
    lenient = HttpMemory(url, api_key=key, domain="support", write_to="lenient", name="lenient")
    notes = HttpMemory(url, api_key=key, domain="support", write_to="notes", name="notes")
    ctx = MemoryContext()
    with pytest.raises(CompositeWriteError) as raised:
        asyncio.run(CompositeMemory([notes, lenient, Broken()]).write(GUESS, ctx=ctx))
    assert (raised.value.accepted, raised.value.refused) == (["notes"], ["lenient"])
    result = asyncio.run(lenient.write(GUESS, ctx=ctx))
    assert (result.accepted, result.refused, result.records) == ([], ["lenient"], [])
    result = asyncio.run(notes.write(GUESS, ctx=ctx))
    assert result.accepted == ["notes"]
    assert [(r.source, r.deduplicated) for r in result.records] == [("notes", True)]
    # The server observed each write that wrote something, once.
    assert written(kbs) == [("notes", 1)]


def test_http_memory_write_answer_updates_the_marker(remote, kbs):
    url, key = remote
    memory = HttpMemory(url, api_key=key, domain="support", write_to="notes")
    assert memory.accepts_writes is True
    KnowledgeBase.unscoped.filter(name="notes").update(
        read_only=True, on_write=KnowledgeBase.OnWrite.IGNORE
    )
    assert memory.accepts_writes is True  # cached for POLICY_SECONDS ...
    asyncio.run(memory.write(GUESS, ctx=MemoryContext()))
    assert memory.accepts_writes is False  # ... but a write's answer is news


# --- one observation per write ----------------------------------------------------------


def test_scoped_django_memory_records_one_written_observation_per_write(kbs):
    ctx = MemoryContext(kbs.scope, actor="agent")
    guarded = ScopedMemory(DjangoMemory(write_to="notes"))
    run(guarded.write([MemoryItem(content="Alice prefers EUR.", source="x")], ctx=ctx))
    assert written(kbs) == [("notes", 1)]
    assert [kind for kind, _ in ctx.observations] == []  # the service observed, not the guard


def test_scoped_ignore_kb_records_no_written_observation(kbs):
    ctx = MemoryContext(kbs.scope, actor="agent")
    for memory in (DjangoMemory(kbs.scope, write_to="lenient"), DjangoMemory(write_to="lenient")):
        outcome = run(ScopedMemory(memory).write(GUESS, ctx=ctx))
        assert outcome.refused == ["lenient"]
    assert written(kbs) == []
    with tenant_scope(kbs.scope):
        refused = Observation.objects.filter(kind=Observation.Kind.MEMORY_WRITE_REFUSED)
        assert [row.count for row in refused] == [1, 1]


def test_scoped_memory_still_observes_a_source_that_does_not(kbs):
    ctx = MemoryContext(kbs.scope, observer=lambda kind, payload: None)
    run(ScopedMemory(FakeMemory("notes")).write(GUESS, ctx=ctx))
    assert ctx.observations == [("memory.written", {"n": 1, "source": "notes"})]
    run(ScopedMemory(SequentialMemory([DjangoMemory(write_to="notes")])).write(GUESS, ctx=ctx))
    assert len(ctx.observations) == 1


# --- names, unknown sources, unscoped caches --------------------------------------------


def test_multi_kb_memory_is_named_for_its_write_target_and_items_for_their_kb(kbs):
    ctx = MemoryContext(kbs.scope)
    run(DjangoMemory(write_to="notes").write([MemoryItem("EUR is the currency.", "x")], ctx=ctx))
    write.write(kbs.scope, [{"content": "EUR accounts close monthly."}], principal=policy.SYSTEM)
    both = DjangoMemory(sources=["notes", "memory"], mode="keyword")
    assert both.name == "memory"
    items = run(both.query("EUR", k=5, ctx=ctx))
    assert sorted(item.source for item in items) == ["memory", "notes"]


def test_django_memory_query_names_an_unknown_kb_like_the_api(kbs, other_tenant):
    ctx = MemoryContext(kbs.scope)
    with pytest.raises(UnknownSource) as raised:
        run(DjangoMemory(sources=["handbok"]).query("refunds", k=3, ctx=ctx))
    assert raised.value.name == "handbok"
    # Another tenant's knowledge base is unknown here too: a 400, never its items.
    knowledge_bases.ensure_knowledge_base(other_tenant.scope, "secret")
    with pytest.raises(UnknownSource):
        run(DjangoMemory(sources=["secret"]).query("refunds", k=3, ctx=ctx))


def test_cached_memory_warns_once_when_unscoped(caplog):
    inner = FakeMemory("notes", [MemoryItem("x", "notes")])
    cached = CachedMemory(inner)
    with caplog.at_level(logging.WARNING, logger="memoryhub.sources.decorators"):
        for query in ("a", "b"):
            asyncio.run(cached.query(query, k=1, ctx=MemoryContext()))
    warnings = [r for r in caplog.records if "runs unscoped" in r.getMessage()]
    assert len(warnings) == 1
    with pytest.raises(PermissionError):
        asyncio.run(CachedMemory(inner, strict_scope=True).query("a", k=1, ctx=MemoryContext()))


def test_read_only_wrapper_over_django_memory_counts_and_observes_once(kbs):
    ctx = MemoryContext(kbs.scope)
    lenient = ReadOnlyMemory(DjangoMemory(write_to="notes"), on_write="ignore")
    run(ScopedMemory(lenient).write(GUESS, ctx=ctx))
    assert (lenient.refused_writes, written(kbs)) == (1, [])
    assert [kind for kind, _ in ctx.observations] == ["memory.write_refused"]
