"""The OpenAI Agents SDK session over memoryhub (``memoryhub.integrations.openai_agents``).

Each behaviour runs over ``DjangoMemoryStore`` (the services, in process) and
``HttpMemoryStore`` (the REST API of a live server, with a real API key of the org);
the bound is shown over ``InMemoryMemoryStore``, which caps its search as they do. A real
``agents.Runner`` talks to a scripted OpenAI-compatible server on this machine.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
from agents.memory import Session
from asgiref.sync import sync_to_async
from django.db import connections
from openai import AsyncOpenAI

from examples.offline_model import serving
from memoryhub import policy
from memoryhub.client import HttpMemoryStore, MemoryKind, StoredRecord
from memoryhub.exceptions import ValidationFailed
from memoryhub.integrations.openai_agents import (
    MAX_ITEMS,
    InvalidSessionItems,
    MemoryhubSession,
    SessionTooLarge,
)
from memoryhub.sources import DjangoMemoryStore
from memoryhub.testing import InMemoryMemoryStore
from tests.factories import create_api_key

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.fixture(params=["django", "http"])
def store_of(request) -> Callable[[Any], Any]:
    """The store of a tenant's domain: in process, or over the REST API with a key of
    its org that may read, write and forget."""
    if request.param == "django":
        return lambda tenant: DjangoMemoryStore(tenant.scope)
    url = request.getfixturevalue("live_server").url

    def over_http(tenant):
        _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
        return HttpMemoryStore(url, api_key=key, domain=tenant.domain.slug)

    return over_http


@pytest.fixture
def store(store_of, tenant):
    return store_of(tenant)


def said(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text}


def texts(items: list[Any]) -> list[str]:
    return [item["content"] for item in items]


def test_a_memoryhub_session_is_an_sdk_session(store):
    session = MemoryhubSession("chat-1", store)
    assert isinstance(session, Session)
    assert (session.session_id, session.namespace) == ("chat-1", "session:chat-1")


def test_items_come_back_oldest_first_and_a_limit_gives_the_latest(store):
    session = MemoryhubSession("chat-1", store)
    run(session.add_items([said("one"), said("two")]))
    run(session.add_items([said("three")]))
    assert texts(run(session.get_items())) == ["one", "two", "three"]
    assert texts(run(session.get_items(limit=2))) == ["two", "three"]
    assert texts(run(session.get_items(limit=10))) == ["one", "two", "three"]
    # As SQLiteSession: a limit of 0 is nothing, a negative one everything.
    assert run(session.get_items(limit=0)) == []
    assert texts(run(session.get_items(limit=-1))) == ["one", "two", "three"]


def test_the_settings_limit_is_the_default_and_an_explicit_limit_wins(store):
    session = MemoryhubSession("chat-1", store, session_settings={"limit": 1})
    run(session.add_items([said("one"), said("two"), said("three")]))
    assert texts(run(session.get_items())) == ["three"]
    assert texts(run(session.get_items(limit=2))) == ["two", "three"]


def test_items_are_episodic_records_of_the_session_namespace_and_round_trip(store):
    message = {
        "id": "__fake_id__",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Paris.", "annotations": [], "n": 1.5}],
    }
    session = MemoryhubSession("chat-1", store)
    run(session.add_items([said("Where?"), message]))
    assert run(session.get_items()) == [said("Where?"), message]
    records = run(store.search(scope="session:chat-1"))
    assert len(records) == 2
    assert {record.kind for record in records} == {MemoryKind.EPISODIC}
    assert all(record.key.startswith("item:") for record in records)
    assert run(store.search(scope="chat-1")) == []


def test_other_records_in_the_namespace_are_not_items_and_clear_forgets_them(store):
    session = MemoryhubSession("chat-1", store)
    run(store.put(StoredRecord(scope="session:chat-1", key="summary", value={"text": "x"})))
    note = StoredRecord(
        scope="session:chat-1", key="item:note", value="plain text", kind=MemoryKind.EPISODIC
    )
    run(store.put(note))
    run(session.add_items([said("one")]))
    assert texts(run(session.get_items())) == ["one"]
    assert run(session.pop_item()) == said("one")
    assert run(session.pop_item()) is None
    run(session.clear_session())
    assert run(store.search(scope="session:chat-1")) == []


def test_pop_item_removes_and_returns_the_latest(store):
    session = MemoryhubSession("chat-1", store)
    run(session.add_items([said("one"), said("two")]))
    run(session.add_items([said("three")]))
    assert run(session.pop_item()) == said("three")
    assert run(session.pop_item()) == said("two")
    assert texts(run(session.get_items())) == ["one"]
    assert run(session.pop_item()) == said("one")
    assert run(session.pop_item()) is None
    assert run(session.get_items()) == []


def test_clear_session_removes_its_items_and_no_other_sessions(store):
    session, other = MemoryhubSession("chat-1", store), MemoryhubSession("chat-2", store)
    run(session.clear_session())  # nothing written yet, in this domain or this session
    run(session.add_items([said("one"), said("two")]))
    run(other.add_items([said("elsewhere")]))
    run(session.clear_session())
    assert run(session.get_items()) == []
    assert texts(run(other.get_items())) == ["elsewhere"]
    run(session.add_items([said("again")]))
    assert texts(run(session.get_items())) == ["again"]


def test_a_session_in_a_subjects_namespace_is_erased_with_the_subject(store):
    session = MemoryhubSession("chat-1", store, namespace="user:alice")
    other = MemoryhubSession("chat-2", store, namespace="user:alice")
    run(session.add_items([said("one"), said("two")]))
    run(other.add_items([said("elsewhere")]))
    run(store.put(StoredRecord(scope="user:alice", key="currency", value="USD")))
    keys = [r.key for r in run(store.search(scope="user:alice", key_prefix="session:chat-1/"))]
    assert len(keys) == 2 and all(k.startswith("session:chat-1/item:") for k in keys)
    assert texts(run(session.get_items())) == ["one", "two"]
    run(session.clear_session())  # this session's items only
    assert run(session.get_items()) == []
    assert texts(run(other.get_items())) == ["elsewhere"]
    assert run(store.get(scope="user:alice", key="currency")) is not None
    run(session.add_items([said("again")]))
    run(store.forget(scope="user:alice", all_sources=True))  # the person's erasure
    assert run(session.get_items()) == [] and run(other.get_items()) == []


def test_session_ids_in_a_given_namespace_never_nest(store):
    outer = MemoryhubSession("a", store, namespace="user:alice")
    inner = MemoryhubSession("a/item:b", store, namespace="user:alice")
    run(inner.add_items([said("inner")]))
    run(outer.add_items([said("outer")]))
    assert texts(run(outer.get_items())) == ["outer"]
    assert texts(run(inner.get_items())) == ["inner"]
    run(outer.clear_session())
    assert texts(run(inner.get_items())) == ["inner"]


def test_a_session_on_a_knowledge_base_that_ignores_changes_is_refused_not_looped(tenant):
    from memoryhub.exceptions import WriteRefused
    from memoryhub.models import KnowledgeBase
    from memoryhub.scope import tenant_scope
    from memoryhub.services import knowledge_bases

    knowledge_bases.ensure_knowledge_base(tenant.scope, "notes")
    writable = DjangoMemoryStore(tenant.scope, source="notes")
    for namespace in (None, "user:alice"):
        run(MemoryhubSession("chat-1", writable, namespace=namespace).add_items([said("one")]))
    with tenant_scope(tenant.scope):
        KnowledgeBase.objects.filter(name="notes").update(
            read_only=True, on_write=KnowledgeBase.OnWrite.IGNORE
        )
    store = DjangoMemoryStore(tenant.scope, source="notes", principal=policy.AGENT)
    session = MemoryhubSession("chat-1", store, namespace="user:alice")
    with pytest.raises(WriteRefused):
        run(session.pop_item())
    with pytest.raises(WriteRefused):
        run(session.clear_session())
    assert texts(run(session.get_items())) == ["one"]


def test_racing_add_items_lose_nothing_and_keep_each_call_together(store):
    calls = [[said(f"{name}{n}") for n in range(4)] for name in "abc"]

    async def race() -> None:
        # A session each, as two workers answering the same conversation would have.
        await asyncio.gather(*(MemoryhubSession("chat-1", store).add_items(c) for c in calls))

    run(race())
    found = texts(run(MemoryhubSession("chat-1", store).get_items()))
    assert sorted(found) == sorted(texts([item for call in calls for item in call]))
    runs = [found[start : start + 4] for start in range(0, len(found), 4)]
    assert sorted(runs) == [texts(call) for call in calls]
    # The writes did interleave: the store's own order (by last write) mixes the calls,
    # so only the keys keep each call's items together.
    written = [record.value["content"] for record in run(store.search(scope="session:chat-1"))]
    assert [text[0] for text in reversed(written)] != [text[0] for text in found]


def test_racing_pops_return_different_items(store):
    session = MemoryhubSession("chat-1", store)
    run(session.add_items([said("one"), said("two"), said("three"), said("four")]))

    async def race() -> list[Any]:
        return await asyncio.gather(session.pop_item(), session.pop_item())

    popped = run(race())
    assert sorted(texts(popped)) == ["four", "three"]
    assert texts(run(session.get_items())) == ["one", "two"]


def test_another_org_never_sees_a_session_of_the_same_id(store_of, tenant, other_tenant):
    ours = MemoryhubSession("chat-1", store_of(tenant))
    theirs = MemoryhubSession("chat-1", store_of(other_tenant))
    run(ours.add_items([said("acme's secret")]))
    assert run(theirs.get_items()) == []
    assert run(theirs.pop_item()) is None
    run(theirs.clear_session())
    run(theirs.add_items([said("globex's own")]))
    assert texts(run(ours.get_items())) == ["acme's secret"]
    assert texts(run(theirs.get_items())) == ["globex's own"]
    run(ours.clear_session())
    assert texts(run(theirs.get_items())) == ["globex's own"]


@pytest.mark.parametrize(
    ("items", "errors"),
    [
        ("hello", {"items": ["must be a list of items (JSON objects), not str."]}),
        (said("hello"), {"items": ["must be a list of items (JSON objects), not dict."]}),
        ([said("fine"), "hello"], {"items[1]": ["must be a JSON object, not str."]}),
        ([said("fine"), ["role", "user"]], {"items[1]": ["must be a JSON object, not list."]}),
        ([said("fine"), {"at": datetime(2025, 1, 1, tzinfo=UTC)}], {"items[1]": None}),
        ([{"content": float("nan")}], {"items[0]": None}),
        ([{"content": {1, 2}}, None], {"items[0]": None, "items[1]": None}),
        ([{("role", "user"): 1}], {"items[0]": None}),
    ],
    ids=["string", "one-item", "string-item", "list-item", "datetime", "nan", "set", "tuple-key"],
)
def test_items_that_are_not_json_objects_are_refused_before_anything_is_written(
    store, items, errors
):
    session = MemoryhubSession("chat-1", store)
    with pytest.raises(InvalidSessionItems) as refused:
        run(session.add_items(items))
    assert sorted(refused.value.errors) == sorted(errors)
    for path, expected in errors.items():
        if expected is not None:
            assert refused.value.errors[path] == expected
        else:
            assert refused.value.errors[path][0].startswith(("is not JSON", "must be"))
    assert isinstance(refused.value, ValueError)
    assert run(session.get_items()) == []


def test_an_item_the_store_refuses_takes_back_the_rest_of_its_call(store):
    session = MemoryhubSession("chat-1", store)
    run(session.add_items([said("before")]))
    with pytest.raises(ValidationFailed):
        run(session.add_items([said("fits"), said("x" * 20_000), said("never sent")]))
    assert texts(run(session.get_items())) == ["before"]


def test_session_ids_are_non_empty_strings(store):
    for wrong in ("", None, 42):
        with pytest.raises(ValueError, match="session_id"):
            MemoryhubSession(wrong, store)


def test_a_session_larger_than_one_read_refuses_to_pass_a_part_off_as_the_whole():
    store = InMemoryMemoryStore()
    session = MemoryhubSession("long", store)
    with pytest.raises(InvalidSessionItems) as refused:
        asyncio.run(session.add_items([said(str(n)) for n in range(MAX_ITEMS + 1)]))
    assert refused.value.errors == {"items": [f"at most {MAX_ITEMS} items in one call."]}
    asyncio.run(session.add_items([said(str(n)) for n in range(MAX_ITEMS)]))
    assert texts(asyncio.run(session.get_items())) == [str(n) for n in range(MAX_ITEMS)]
    asyncio.run(session.add_items([said("last")]))
    with pytest.raises(SessionTooLarge, match="more than 999 items"):
        asyncio.run(session.get_items())
    with pytest.raises(SessionTooLarge):
        asyncio.run(session.get_items(limit=MAX_ITEMS + 1))
    assert texts(asyncio.run(session.get_items(limit=3))) == ["997", "998", "last"]
    assert asyncio.run(session.pop_item()) == said("last")
    assert len(asyncio.run(session.get_items())) == MAX_ITEMS
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []


def test_a_runner_given_the_session_sends_the_first_runs_turns_in_the_second(store):
    question, follow_up = "What is the capital of France?", "How many people live there?"
    with serving(replies=["Paris.", "About two million."]) as model:

        async def two_runs() -> tuple[Any, Any]:
            client = AsyncOpenAI(base_url=model.base_url, api_key="sk-test", max_retries=0)
            agent = Agent(
                name="Assistant",
                instructions="Answer briefly.",
                model=OpenAIChatCompletionsModel(model="scripted", openai_client=client),
            )
            session = MemoryhubSession("chat-1", store)
            config = RunConfig(tracing_disabled=True)
            first = await Runner.run(agent, question, session=session, run_config=config)
            second = await Runner.run(agent, follow_up, session=session, run_config=config)
            return first, second

        first, second = run(two_runs())
    assert (first.final_output, second.final_output) == ("Paris.", "About two million.")
    assert model.messages(0) == [("system", "Answer briefly."), ("user", question)]
    assert model.messages(1) == [
        ("system", "Answer briefly."),
        ("user", question),
        ("assistant", "Paris."),
        ("user", follow_up),
    ]
    items = run(MemoryhubSession("chat-1", store).get_items())
    assert [item["role"] for item in items] == ["user", "assistant", "user", "assistant"]
    assert items[3]["content"][0]["text"] == "About two million."


def test_the_example_keeps_its_conversation_in_memoryhub(live_server, tenant):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    replies = ["The Golden Gate Bridge is in San Francisco.", "California."]
    with serving(replies=replies) as model:
        completed = subprocess.run(
            [sys.executable, "examples/openai_agents_session.py", "--url", live_server.url],
            cwd=ROOT,
            env={
                **os.environ,
                "MEMORYHUB_API_KEY": key,
                "OPENAI_BASE_URL": model.base_url,
                "OPENAI_API_KEY": "sk-test",
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert "assistant: The Golden Gate Bridge is in San Francisco." in lines
    assert "assistant: California." in lines
    assert "the session holds 4 items" in lines
    assert "cleared: 0 items left" in lines
    # The second question reached the model with the first exchange before it.
    assert [role for role, _ in model.messages(1)] == ["system", "user", "assistant", "user"]
    assert model.messages(1)[2] == ("assistant", replies[0])


def run_example(live_server, key: str, *argv: str, **env: str):
    return subprocess.run(
        [sys.executable, "examples/openai_agents_session.py", "--url", live_server.url, *argv],
        cwd=ROOT,
        env={**os.environ, "MEMORYHUB_API_KEY": key, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_example_runs_offline_and_a_failed_run_leaves_nothing(
    live_server, tenant, other_tenant
):
    """It needed a hosted model: without one it ended in connection-error tracebacks,
    and left the first turn behind."""
    from memoryhub.models import MemoryRecord
    from memoryhub.services import write

    write.write(other_tenant.scope, [{"content": "globex turn", "namespace": "session:x"}])
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    offline = run_example(live_server, key, "--offline", OPENAI_API_KEY="")
    assert offline.returncode == 0, offline.stderr
    assert "assistant: The Golden Gate Bridge is in San Francisco." in offline.stdout
    assert "the session holds 4 items" in offline.stdout
    assert "cleared: 0 items left" in offline.stdout
    assert not MemoryRecord.unscoped.filter(org=tenant.org).exists()

    # A model that is not there: one line, and no turn left behind.
    failed = run_example(
        live_server, key, OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="sk-x"
    )
    assert failed.returncode == 1
    assert failed.stderr.strip().startswith("the run failed: ")
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert not MemoryRecord.unscoped.filter(org=tenant.org).exists()
    assert MemoryRecord.unscoped.filter(org=other_tenant.org).count() == 1
