"""Migration in from the peers (``memoryhub.importers``, ``manage.py
memoryhub_import_from``), each from data the peer itself wrote: a LangGraph
``PostgresStore`` on its own database, an OpenAI Agents ``SQLiteSession`` file, a
directory of Claude memory-tool files. What arrives is what memoryhub's adapter for that
peer reads back; a second run changes nothing; a dry run writes nothing; another org's
memory is never touched; a domain the importer may not import into is refused."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from agents import SQLiteSession
from anthropic.types.beta import BetaMemoryTool20250818ViewCommand
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.db import connection, connections
from langgraph.store.base import GetOp
from langgraph.store.postgres import PostgresStore

from memoryhub import policy
from memoryhub.exceptions import PolicyDenied
from memoryhub.importers.claude_memory import from_claude_memory_dir
from memoryhub.importers.langgraph import from_langgraph_postgres
from memoryhub.importers.openai_agents import from_openai_agents_sqlite
from memoryhub.integrations.anthropic import AsyncStoreMemoryTool
from memoryhub.integrations.langgraph import TAG
from memoryhub.integrations.langgraph.django import MemoryhubStore
from memoryhub.integrations.openai_agents import MemoryhubSession
from memoryhub.models import MemoryRecord
from memoryhub.sources import DjangoMemoryStore

pytestmark = pytest.mark.django_db(transaction=True)


T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine, then close the connection its ORM calls opened in the
    sync_to_async worker thread (else the test database cannot be dropped)."""

    async def main() -> T:
        try:
            return await coroutine
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


def records(tenant) -> list[tuple[str, str | None, str]]:
    return sorted(
        MemoryRecord.unscoped.filter(org=tenant.org).values_list("namespace", "key", "content")
    )


# --- LangGraph's PostgresStore --------------------------------------------------------


@pytest.fixture
def langgraph_database() -> Iterator[str]:
    """A database of its own on the test server, for a real PostgresStore."""
    settings = connection.settings_dict
    name = f"langgraph_{uuid.uuid4().hex[:8]}"
    server = psycopg.conninfo.make_conninfo(
        host=settings["HOST"] or "",
        port=str(settings["PORT"] or ""),
        user=settings["USER"] or "",
        password=settings["PASSWORD"] or "",
        dbname="postgres",
    )
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield psycopg.conninfo.make_conninfo(server, dbname=name)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_a_langgraph_postgres_store_arrives_as_the_adapter_reads_it(
    tenant, other_tenant, langgraph_database
):
    items = {
        (("user:alice", "memories"), "colour"): {"text": "likes blue", "n": 1},
        (("user:alice", "memories", "deep"), "food"): {"text": "vegetarian"},
        (("user:bob", "prefs"), "tz"): {"tz": "Europe/Paris"},
    }
    with PostgresStore.from_conn_string(langgraph_database) as peer:
        peer.setup()
        for (namespace, key), value in items.items():
            peer.put(namespace, key, value)
    MemoryhubStore(other_tenant.scope).put(("user:alice", "memories"), "colour", {"text": "globex"})
    before_other = records(other_tenant)

    dry = from_langgraph_postgres(langgraph_database, tenant.scope, dry_run=True)
    assert (dry.imported, records(tenant)) == (3, [])
    report = from_langgraph_postgres(langgraph_database, tenant.scope)
    assert report.imported == 3 and report.skipped == {}
    store = MemoryhubStore(tenant.scope)
    for (namespace, key), value in items.items():
        assert store.get(namespace, key).value == value
    assert {
        tag
        for tags in MemoryRecord.unscoped.filter(org=tenant.org).values_list("tags", flat=True)
        for tag in tags
    } == {TAG}
    assert (
        store.search(("user:alice",), limit=10)
        and len(store.search(("user:alice",), limit=10)) == 2
    )
    # Again: nothing new. A value changed here since is left as memoryhub has it.
    store.put(("user:bob", "prefs"), "tz", {"tz": "Asia/Tokyo"})
    again = from_langgraph_postgres(langgraph_database, tenant.scope)
    assert again.imported == 0 and again.skipped == {"unchanged": 2, "conflict": 1}
    assert store.batch([GetOp(("user:bob", "prefs"), "tz")])[0].value == {"tz": "Asia/Tokyo"}
    assert records(other_tenant) == before_other


# --- an OpenAI Agents SQLiteSession ---------------------------------------------------


def test_an_openai_agents_sqlite_database_arrives_session_by_session(
    tenant, other_tenant, tmp_path
):
    database = tmp_path / "conversations.db"
    chats = {
        "chat-1": [
            {"role": "user", "content": "What's the capital of France?"},
            {"role": "assistant", "content": "Paris."},
        ],
        "chat-2": [{"role": "user", "content": "Remind me to call Bob."}],
    }

    async def write() -> None:
        for session_id, items in chats.items():
            await SQLiteSession(session_id, database).add_items(items)

    run(write())
    report = from_openai_agents_sqlite(database, tenant.scope)
    assert report.imported == 3
    store = DjangoMemoryStore(tenant.scope)
    for session_id, items in chats.items():
        got = run(MemoryhubSession(session_id, store).get_items())
        assert got == items
    again = from_openai_agents_sqlite(database, tenant.scope)
    assert again.imported == 0 and again.skipped == {"unchanged": 2}
    assert records(other_tenant) == []
    with pytest.raises(FileNotFoundError):
        from_openai_agents_sqlite(tmp_path / "missing.db", tenant.scope)


# --- Claude's memory directory --------------------------------------------------------


def test_a_claude_memory_directory_arrives_file_by_file(tenant, other_tenant, tmp_path):
    root = tmp_path / "memories"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "alice.md").write_text("Prefers EUR.\nLives in Lyon.\n")
    (root / "todo.txt").write_text("call Bob")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    (root / "empty.md").write_text("")
    report = from_claude_memory_dir(root, tenant.scope, namespace="user:alice")
    assert report.imported == 2
    assert report.skipped == {"unreadable": 1, "invalid": 1}
    assert "photo.png" in report.examples["unreadable"][0]
    tool = AsyncStoreMemoryTool(DjangoMemoryStore(tenant.scope), scope="user:alice")
    view = run(
        tool.view(
            BetaMemoryTool20250818ViewCommand(command="view", path="/memories/notes/alice.md")
        )
    )
    assert "Lives in Lyon." in view
    (root / "todo.txt").write_text("call Bob and Carol")
    again = from_claude_memory_dir(root, tenant.scope, namespace="user:alice")
    assert again.imported == 0
    assert again.skipped == {"unchanged": 1, "conflict": 1, "unreadable": 1, "invalid": 1}
    assert records(other_tenant) == []


def test_the_command_and_the_policy(tenant, tmp_path, capsys):
    root = tmp_path / "memories"
    root.mkdir()
    (root / "a.md").write_text("A")
    call_command(
        "memoryhub_import_from",
        "claude-memory-dir",
        str(root),
        "--org",
        "acme",
        "--domain",
        "support",
        "--namespace",
        "user:alice",
        "--dry-run",
    )
    assert "would import 1 from claude-memory-dir" in capsys.readouterr().out
    assert records(tenant) == []
    call_command(
        "memoryhub_import_from",
        "claude-memory-dir",
        str(root),
        "--org",
        "acme",
        "--domain",
        "support",
        "--namespace",
        "user:alice",
    )
    assert records(tenant) == [("user:alice", "/memories/a.md", "A")]
    with pytest.raises(CommandError, match="needs --namespace"):
        call_command(
            "memoryhub_import_from",
            "claude-memory-dir",
            str(root),
            "--org",
            "acme",
            "--domain",
            "support",
        )
    with pytest.raises(CommandError, match="No domain"):
        call_command(
            "memoryhub_import_from",
            "openai-agents-sqlite",
            "x.db",
            "--org",
            "globex",
            "--domain",
            "support",
        )
    with pytest.raises(CommandError, match=r"missing\.db"):
        call_command(
            "memoryhub_import_from",
            "openai-agents-sqlite",
            str(tmp_path / "missing.db"),
            "--org",
            "acme",
            "--domain",
            "support",
        )
    reader = policy.KeyPrincipal(
        org_id=tenant.org.pk, domain_id=None, permissions=frozenset({"read", "write"})
    )
    with pytest.raises(PolicyDenied):
        from_claude_memory_dir(root, tenant.scope, namespace="user:alice", principal=reader)
    assert Path(root).is_dir()


def test_an_erased_subject_is_not_imported_from_a_peer(tenant, tmp_path):
    from memoryhub.services import write
    from memoryhub.services.forget import ForgetRequest, forget

    write.write(tenant.scope, [{"content": "Carol's note", "namespace": "user:carol"}])
    forget(tenant.scope, ForgetRequest(namespace="user:carol"), principal=policy.SYSTEM)
    root = tmp_path / "memories"
    root.mkdir()
    (root / "carol.md").write_text("Carol's preferences")
    report = from_claude_memory_dir(root, tenant.scope, namespace="user:carol")
    assert report.imported == 0 and report.skipped == {"erased": 1}
    assert records(tenant) == []
    sessions = tmp_path / "sessions.db"
    run(SQLiteSession("carol", sessions).add_items([{"role": "user", "content": "hi"}]))
    write.write(tenant.scope, [{"content": "x", "namespace": "session:carol"}])
    forget(tenant.scope, ForgetRequest(namespace="session:carol"), principal=policy.SYSTEM)
    assert from_openai_agents_sqlite(sessions, tenant.scope).skipped == {"erased": 1}
