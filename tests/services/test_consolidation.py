"""Consolidation wired into memoryhub: episodic turns written with ``consolidate`` become
semantic facts with ``derived_from``, through the write path, one run per namespace,
tenant-scoped, and erased with their sources."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from memoryhub.models import KnowledgeBase, MemoryRecord, Observation, RecordVersion
from memoryhub.scope import tenant_scope
from memoryhub.services import consolidation, maintenance, write
from tests.factories import key_client
from tests.services.test_consolidation_extractors import FakeChatAPI, Reply, answer, op

TURNS = [
    "Hi there, how are you today?",
    "My favourite colour is blue.",
    "My home city is Berlin.",
    "I had pasta for lunch.",
    "The support team answered quickly.",
    "My favourite colour is green.",
    "Can you remind me about my meeting?",
    "The support team answered very quickly.",
    "I prefer email over phone calls.",
    "Thanks, that is all for now.",
]


def facts(tenant, namespace: str = "user:alice") -> dict[str, MemoryRecord]:
    with tenant_scope(tenant.scope):
        rows = MemoryRecord.objects.filter(kind="semantic", namespace=namespace)
        return {row.content: row for row in rows}


def turn_ids(tenant) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    with tenant_scope(tenant.scope):
        for pk, content in MemoryRecord.objects.filter(kind="episodic").values_list(
            "pk", "content"
        ):
            found.setdefault(content, []).append(str(pk))
    return found


def write_turns(client, consolidate: bool = True, namespace: str = "user:alice"):
    items = [{"content": text, "kind": "episodic", "namespace": namespace} for text in TURNS]
    body = {"items": items, "consolidate": consolidate}
    return client.post("/api/v1/domains/support/records", body, format="json")


@pytest.fixture
def client(tenant):
    return key_client(tenant, can_read=True, can_write=True, can_forget=True)


@pytest.mark.django_db(transaction=True)
def test_turns_written_with_consolidate_become_facts_with_sources(client, tenant):
    answer_ = write_turns(client)
    assert answer_.status_code == 202, answer_.json()
    found = facts(tenant)
    turns = turn_ids(tenant)
    assert set(found) == {
        "favourite colour: blue",
        "favourite colour: green",
        "home city: Berlin",
        "The support team answered very quickly.",
    }
    # Blue was true until green was said: closed, kept, linked to green.
    blue, green = found["favourite colour: blue"], found["favourite colour: green"]
    assert (blue.superseded_by, blue.valid_until) == (green.pk, green.valid_from)
    assert green.valid_from is not None and green.superseded_by is None
    assert blue.key == green.key == "favourite colour"
    assert [str(pk) for pk in found["favourite colour: green"].derived_from] == turns[
        "My favourite colour is green."
    ]
    repeated = found["The support team answered very quickly."]
    assert sorted(str(pk) for pk in repeated.derived_from) == sorted(
        turns["The support team answered quickly."]
        + turns["The support team answered very quickly."]
    )
    assert repeated.metadata["count"] == 2
    assert found["home city: Berlin"].key == "home city"
    with tenant_scope(tenant.scope):
        assert set(
            MemoryRecord.objects.filter(kind="episodic").values_list("consolidation", flat=True)
        ) == {"done"}
        [run] = Observation.objects.filter(kind=Observation.Kind.MEMORY_CONSOLIDATED)
    assert (
        run.payload["add"],
        run.payload["supersede"],
        run.payload["episodes"],
        run.payload["extractor"],
    ) == (3, 1, 10, "builtin")
    # The facts come back from a query with their sources, over the API.
    items = client.post(
        "/api/v1/domains/support/query",
        {"query": "favourite colour", "kinds": ["semantic"], "namespaces": ["user:alice"]},
        format="json",
    ).json()["items"]
    top = items[0]
    assert top["content"] == "favourite colour: green"
    assert top["derived_from"] == turns["My favourite colour is green."]
    record = client.get(f"/api/v1/domains/support/records/{top['id']}").json()
    assert record["derived_from"] == top["derived_from"]
    # Erasing the namespace leaves nothing: not a turn, not a fact, not a version.
    assert (
        client.post(
            "/api/v1/domains/support/forget", {"namespace": "user:alice"}, format="json"
        ).json()["deleted"]
        == 14
    )
    assert facts(tenant) == {} and turn_ids(tenant) == {}
    assert RecordVersion.unscoped.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_later_run_supersedes_a_fact_and_as_of_reads_the_old_value(client, tenant):
    write_turns(client)
    fact = facts(tenant)["favourite colour: green"]
    body = {
        "items": [
            {
                "content": "My favourite colour is red.",
                "kind": "episodic",
                "namespace": "user:alice",
            }
        ],
        "consolidate": True,
    }
    client.post("/api/v1/domains/support/records", body, format="json")
    fact.refresh_from_db()
    red = facts(tenant)["favourite colour: red"]
    # Green is closed when red was said, not overwritten: its content and sources stay.
    assert fact.content == "favourite colour: green"
    assert (fact.superseded_by, fact.valid_until) == (red.pk, red.valid_from)
    assert (fact.change_cause, fact.changed_by) == ("supersede", "consolidation:builtin")
    assert len(fact.derived_from) == 1 and len(red.derived_from) == 1
    assert red.key == "favourite colour" and red.valid_until is None
    # Now: red. As of the moment before red was said: green. The timeline: the chain.
    asked = {"query": "favourite colour", "kinds": ["semantic"], "namespaces": ["user:alice"]}
    url = "/api/v1/domains/support/query"
    colours = lambda items: [i for i in items if i["key"] == "favourite colour"]  # noqa: E731
    now = colours(client.post(url, asked, format="json").json()["items"])
    assert [item["content"] for item in now] == ["favourite colour: red"]
    before = (red.valid_from - timedelta(microseconds=1)).isoformat()
    then = colours(client.post(url, {**asked, "as_of": before}, format="json").json()["items"])
    assert [item["content"] for item in then] == ["favourite colour: green"]
    assert then[0]["superseded_by"] == str(red.pk)
    timeline = client.get(f"/api/v1/domains/support/records/{red.pk}/timeline").json()
    assert [link["content"] for link in timeline["links"]] == [
        "favourite colour: blue",
        "favourite colour: green",
        "favourite colour: red",
    ]


@pytest.mark.django_db(transaction=True)
def test_without_consolidate_nothing_is_learned_unless_the_kb_says_so(client, tenant):
    write_turns(client, consolidate=False)
    assert facts(tenant) == {}
    KnowledgeBase.unscoped.filter(name="memory").update(consolidate=True)
    write_turns(client, consolidate=False, namespace="user:bob")
    assert "home city: Berlin" in facts(tenant, "user:bob")
    assert facts(tenant) == {}  # alice's turns were not asked for


def test_consolidate_must_be_a_boolean(client):
    answer_ = client.post(
        "/api/v1/domains/support/records",
        {"items": [{"content": "x"}], "consolidate": "yes"},
        format="json",
    )
    assert answer_.status_code == 400
    assert answer_.json()["errors"] == {"consolidate": ["must be true or false."]}
    assert MemoryRecord.unscoped.count() == 0


@pytest.mark.django_db(transaction=True)
def test_no_fact_outlives_all_its_sources(client, tenant):
    write_turns(client)
    turns = turn_ids(tenant)
    [first] = turns["The support team answered quickly."]
    [second] = turns["The support team answered very quickly."]
    fact = facts(tenant)["The support team answered very quickly."]
    # One source forgotten: the fact stays, citing the other.
    client.delete(f"/api/v1/domains/support/records/{first}")
    fact.refresh_from_db()
    assert [str(pk) for pk in fact.derived_from] == [second]
    # The last one forgotten: the fact goes with it, and the receipt counts it.
    erased = client.delete(f"/api/v1/domains/support/records/{second}").json()
    assert (erased["deleted"], erased["by_source"]) == (2, {"memory": 2})
    assert not MemoryRecord.unscoped.filter(pk=fact.pk).exists()
    # Expiry too: the colour fact's only source expires.
    [source] = turns["My favourite colour is green."]
    colour = facts(tenant)["favourite colour: green"]
    MemoryRecord.unscoped.filter(pk=source).update(expires_at="2000-01-01T00:00:00Z")
    # The source, the fact, and what the fact superseded (blue): a chain goes whole.
    assert maintenance.purge_expired() == 3
    assert not MemoryRecord.unscoped.filter(pk=colour.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_consolidation_never_reads_or_writes_another_tenant(client, tenant, other_tenant):
    other = key_client(other_tenant, can_read=True, can_write=True)
    write_turns(other)
    write_turns(client)
    mine, theirs = facts(tenant), facts(other_tenant)
    assert set(mine) == set(theirs)
    for fact in mine.values():
        assert {str(pk) for pk in fact.derived_from} <= {
            pk for ids in turn_ids(tenant).values() for pk in ids
        }
    their_fact = next(iter(theirs.values()))
    assert client.get(f"/api/v1/domains/support/records/{their_fact.pk}").status_code == 404
    items = client.post(
        "/api/v1/domains/support/query",
        {"query": "favourite colour", "kinds": ["semantic"], "namespaces": ["user:alice"]},
        format="json",
    ).json()["items"]
    assert {item["id"] for item in items} <= {str(fact.pk) for fact in mine.values()}


@pytest.mark.django_db(transaction=True)
def test_one_run_per_namespace_at_a_time(tenant, committed):
    write.write(
        tenant.scope,
        [{"content": "My home city is Rome.", "kind": "episodic", "namespace": "user:x"}],
    )
    record = MemoryRecord.unscoped.get()
    MemoryRecord.unscoped.filter(pk=record.pk).update(consolidation="pending", status="indexed")
    kb = record.knowledge_base_id
    from django.db import connections

    holder = connections.create_connection("default")
    try:
        with holder.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", [kb, "consolidate:user:x"])
        assert consolidation.consolidate(kb, "user:x") is None  # held elsewhere
        assert facts(tenant, "user:x") == {}
        # Released explicitly: a closed connection's backend releases its locks only
        # once it has exited, after close() returns (the next line raced it).
        with holder.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_unlock(%s, hashtext(%s))", [kb, "consolidate:user:x"]
            )
    finally:
        holder.close()
    assert consolidation.consolidate(kb, "user:x") == {
        "episodes": 1, "add": 1, "update": 0, "supersede": 0, "delete": 0, "none": 0,
    }  # fmt: skip
    # A redelivered message finds nothing waiting.
    assert consolidation.consolidate(kb, "user:x") == {
        "episodes": 0, "add": 0, "update": 0, "supersede": 0, "delete": 0, "none": 0,
    }  # fmt: skip


# --- the OpenAI-compatible extractor, over real HTTP, wired from the environment ------


@pytest.fixture
def chat(monkeypatch) -> Iterator[FakeChatAPI]:
    server = FakeChatAPI()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    monkeypatch.setenv("MEMORYHUB_LLM_BASE_URL", server.url)
    monkeypatch.setenv("MEMORYHUB_LLM_MODEL", "chat-model")
    monkeypatch.setenv("MEMORYHUB_LLM_API_KEY", "sk-test")
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.django_db(transaction=True)
def test_a_model_from_the_environment_consolidates_over_http(client, tenant, chat):
    body = {
        "items": [
            {
                "content": "I moved to Berlin last year.",
                "kind": "episodic",
                "namespace": "user:alice",
            }
        ],
        "consolidate": True,
    }
    # Three malformed answers (every attempt): the run is recorded as failed, the turn
    # marked failed, and no fact is written.
    chat.script.extend(Reply(content="not json") for _ in range(3))
    client.post("/api/v1/domains/support/records", body, format="json")
    with tenant_scope(tenant.scope):
        [failed] = Observation.objects.filter(kind=Observation.Kind.CONSOLIDATION_FAILED)
        turn = MemoryRecord.objects.get(kind="episodic")
    assert (failed.payload["extractor"], failed.payload["model"]) == ("openai", "chat-model")
    assert failed.payload["error"] == "MalformedAnswer"
    assert turn.consolidation == "failed"
    assert facts(tenant) == {}
    assert len(chat.requests) == 3 and chat.requests[0]["model"] == "chat-model"
    assert str(turn.pk) in chat.requests[0]["messages"][-1]["content"]
    # A good answer citing the turn.
    chat.script.append(answer(op("add", content="Alice lives in Berlin.", sources=[str(turn.pk)])))
    MemoryRecord.unscoped.filter(pk=turn.pk).update(consolidation="pending")
    consolidation.consolidate(turn.knowledge_base_id, "user:alice")
    [fact] = facts(tenant).values()
    assert (fact.content, [str(pk) for pk in fact.derived_from]) == (
        "Alice lives in Berlin.",
        [str(turn.pk)],
    )
    with tenant_scope(tenant.scope):
        [run] = Observation.objects.filter(kind=Observation.Kind.MEMORY_CONSOLIDATED)
    assert run.payload["model"] == "chat-model"
    assert run.payload["operations"] == [
        {"op": "add", "fact": str(fact.pk), "sources": [str(turn.pk)]}
    ]


@pytest.mark.django_db(transaction=True)
def test_a_model_that_answers_supersede_closes_the_fact(client, tenant, other_tenant, chat):
    def said(text: str, when: str, answer_for: Callable[[str], Reply]) -> str:
        """Write a turn (not consolidated yet), then consolidate it with the answer."""
        item = {"content": text, "kind": "episodic", "namespace": "user:alice"}
        body = {"items": [{**item, "occurred_at": when}]}
        written = client.post("/api/v1/domains/support/records", body, format="json").json()
        turn = written["records"][0]["id"]
        MemoryRecord.unscoped.filter(pk=turn).update(consolidation="pending")
        chat.script.append(answer_for(turn))
        kb = MemoryRecord.unscoped.get(pk=turn).knowledge_base_id
        consolidation.consolidate(kb, "user:alice")
        return turn

    said(
        "I live in Berlin.",
        "2026-01-05",
        lambda turn: answer(
            op("add", content="Alice lives in Berlin.", key="city", sources=[turn])
        ),
    )
    berlin = facts(tenant)["Alice lives in Berlin."]
    assert berlin.valid_from.date().isoformat() == "2026-01-05"
    moved = said(
        "I moved to Lisbon in May!",
        "2026-05-20",
        lambda turn: answer(
            op(
                "supersede",
                content="Alice lives in Lisbon.",
                fact_id=str(berlin.pk),
                sources=[turn],
            )
        ),
    )
    berlin.refresh_from_db()
    lisbon = facts(tenant)["Alice lives in Lisbon."]
    assert (berlin.superseded_by, berlin.valid_until) == (lisbon.pk, lisbon.valid_from)
    assert lisbon.valid_from.date().isoformat() == "2026-05-20"
    assert lisbon.key == berlin.key == "city"
    assert [str(pk) for pk in lisbon.derived_from] == [moved]
    assert berlin.content == "Alice lives in Berlin."  # closed, not overwritten
    assert facts(other_tenant) == {}


@pytest.mark.django_db(transaction=True)
def test_the_admin_links_facts_and_sources_both_ways(client, tenant, other_tenant, admin_client):
    write_turns(client)
    fact = facts(tenant)["home city: Berlin"]
    [turn] = turn_ids(tenant)["My home city is Berlin."]
    html = admin_client.get(f"/admin/memoryhub/memoryrecord/{fact.pk}/change/").content.decode()
    assert f"/admin/memoryhub/memoryrecord/{turn}/change/" in html
    assert "My home city is Berlin." in html
    html = admin_client.get(f"/admin/memoryhub/memoryrecord/{turn}/change/").content.decode()
    assert "Facts learned from it" in html
    assert f"/admin/memoryhub/memoryrecord/{fact.pk}/change/" in html
    # The knowledge base's flag is an operator's to set.
    kb = KnowledgeBase.unscoped.get(org=tenant.org, name="memory")
    html = admin_client.get(f"/admin/memoryhub/knowledgebase/{kb.pk}/change/").content.decode()
    assert 'name="consolidate"' in html
