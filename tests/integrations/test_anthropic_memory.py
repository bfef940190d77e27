"""Anthropic's memory tool over memoryhub stores: the six commands, in process
(``DjangoMemoryStore``) and over the REST API of a live server (``HttpMemoryStore``,
``SyncHttpMemoryStore``), in two orgs; hostile paths; the size limits; the files as
records (history, erasure); and the real ``anthropic`` SDK's tool runner against a
scripted Messages API on a local HTTP server.

Every command is called as the tool runner calls it, ``tool.call(input)``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import pytest
from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
from asgiref.sync import sync_to_async
from django.db import connections

from examples.offline_model import serving
from memoryhub.client import HttpMemoryStore, MemoryKind, StoredRecord, SyncHttpMemoryStore
from memoryhub.integrations.anthropic import (
    MAX_FILE_BYTES,
    AsyncStoreMemoryTool,
    StoreMemoryTool,
    memory_key,
)
from memoryhub.models import MemoryRecord
from memoryhub.sources import DjangoMemoryStore
from tests.factories import create_api_key

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
HEADER = "Here're the files and directories up to 2 levels deep in {}, excluding hidden items:"


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine, then close the DB connection its ORM calls opened in the
    sync_to_async worker thread (else the test database cannot be dropped)."""

    async def main() -> T:
        try:
            return await coroutine
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


def settle(result: Any) -> Any:
    return run(result) if inspect.isawaitable(result) else result


@dataclass
class Memory:
    """One org's memory tool in one namespace, and the store under it."""

    tool: StoreMemoryTool | AsyncStoreMemoryTool
    store: Any
    scope: str

    def __call__(self, command: str, **arguments: Any) -> str:
        return settle(self.tool.call({"command": command, **arguments}))

    def error(self, command: str, **arguments: Any) -> str:
        with pytest.raises(ToolError) as raised:
            self(command, **arguments)
        return str(raised.value)

    def records(self) -> dict[str, Any]:
        """``{key: value}`` of every record of the namespace."""
        found = settle(self.store.search(scope=self.scope, limit=1000))
        return {record.key: record.value for record in found}

    def history(self, path: str) -> list[Any]:
        versions = settle(self.store.history(scope=self.scope, key=memory_key(path)))
        return [version.value for version in versions]


def make_memory(flavour: str, request: Any) -> Any:
    """``make(tenant, scope="user:alice", **tool options)``: the async tool over
    ``DjangoMemoryStore`` (the tenant's scope) or ``HttpMemoryStore``, or the blocking tool
    over ``SyncHttpMemoryStore`` (a key of the tenant's org, read, write and forget)."""

    def make(tenant: Any, scope: str = "user:alice", **options: Any) -> Memory:
        if flavour == "django":
            store: Any = DjangoMemoryStore(tenant.scope)
            return Memory(AsyncStoreMemoryTool(store, scope=scope, **options), store, scope)
        url = request.getfixturevalue("live_server").url
        _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
        if flavour == "http":
            store = HttpMemoryStore(url, api_key=key, domain="support")
            return Memory(AsyncStoreMemoryTool(store, scope=scope, **options), store, scope)
        store = SyncHttpMemoryStore(url, api_key=key, domain="support")
        return Memory(StoreMemoryTool(store, scope=scope, **options), store, scope)

    return make


@pytest.fixture(params=["django", "http"])
def memory_of(request):
    """The tool in process and over a live server's REST API."""
    return make_memory(request.param, request)


@pytest.fixture(params=["django", "http", "http-blocking"])
def every_memory_of(request):
    """And the blocking tool over the blocking HTTP store."""
    return make_memory(request.param, request)


@pytest.fixture
def in_process(tenant):
    return make_memory("django", None)(tenant)


@pytest.fixture
def memory(memory_of, tenant):
    return memory_of(tenant)


def test_the_tool_is_anthropics_memory_tool():
    tool = StoreMemoryTool(object(), scope="user:alice")
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory"}
    assert tool.name == "memory"
    assert isinstance(tool, BetaAbstractMemoryTool)
    assert isinstance(
        AsyncStoreMemoryTool(object(), scope="user:alice"),
        BetaAsyncAbstractMemoryTool,
    )


# --- the six commands -------------------------------------------------------------------------


def test_a_created_file_is_a_record_keyed_by_its_path(memory):
    assert memory("create", path="/memories/alice.md", file_text="Prefers EUR.\n") == (
        "File created successfully at: /memories/alice.md"
    )
    record = settle(memory.store.get(scope="user:alice", key="/memories/alice.md"))
    assert (record.value, record.kind, record.tags) == ("Prefers EUR.\n", "semantic", ())


def test_view_of_a_file_numbers_its_lines_and_takes_a_range(memory):
    memory("create", path="/memories/notes.md", file_text="one\ntwo\nthree\nfour")
    assert memory("view", path="/memories/notes.md") == (
        "Here's the content of /memories/notes.md with line numbers:\n"
        "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour"
    )
    assert memory("view", path="/memories/notes.md", view_range=[2, 3]) == (
        "Here's the content of /memories/notes.md with line numbers:\n     2\ttwo\n     3\tthree"
    )
    assert memory("view", path="/memories/notes.md", view_range=[3, -1]).endswith(
        "     3\tthree\n     4\tfour"
    )
    assert memory.error("view", path="/memories/notes.md", view_range=["one", 2]).startswith(
        "Invalid `view_range` parameter"
    )


def test_view_of_a_directory_lists_files_and_directories_two_levels_deep(memory):
    files = {
        "/memories/alice.md": "Prefers EUR.\n",
        "/memories/projects/notes.md": "Ship on Friday.\n",
        "/memories/projects/q3/plan.md": "x" * 2048,
        "/memories/projects/q3/deep/more.md": "deep",
        "/memories/.secret.md": "hidden",
        "/memories/projects/.drafts/draft.md": "hidden too",
    }
    for path, text in files.items():
        memory("create", path=path, file_text=text)
    assert memory("view", path="/memories") == "\n".join(
        [
            HEADER.format("/memories"),
            "2.0K\t/memories",  # 2081 bytes
            "13B\t/memories/alice.md",
            "2.0K\t/memories/projects/",  # 2068
            "16B\t/memories/projects/notes.md",
            "2.0K\t/memories/projects/q3/",
        ]
    )
    assert memory("view", path="/memories/projects/") == "\n".join(
        [
            HEADER.format("/memories/projects"),
            "2.0K\t/memories/projects",
            "16B\t/memories/projects/notes.md",
            "2.0K\t/memories/projects/q3/",  # 2052
            "4B\t/memories/projects/q3/deep/",
            "2K\t/memories/projects/q3/plan.md",
        ]
    )


def test_view_of_an_empty_memory_directory_lists_only_itself(memory):
    assert memory("view", path="/memories") == f"{HEADER.format('/memories')}\n0B\t/memories"


def test_view_of_a_missing_path_is_the_sdks_error(memory):
    assert memory.error("view", path="/memories/nothing.md") == (
        "The path /memories/nothing.md does not exist. Please provide a valid path."
    )


def test_create_refuses_an_existing_file_a_directory_and_a_file_below_a_file(memory):
    memory("create", path="/memories/a.md", file_text="first")
    memory("create", path="/memories/dir/b.md", file_text="b")
    assert memory.error("create", path="/memories/a.md", file_text="second") == (
        "File /memories/a.md already exists"
    )
    assert memory.error("create", path="/memories/dir", file_text="x") == (
        "File /memories/dir already exists"
    )
    assert memory.error("create", path="/memories/a.md/c.md", file_text="x") == (
        "The path /memories/a.md is a file, not a directory"
    )
    assert memory.records() == {"/memories/a.md": "first", "/memories/dir/b.md": "b"}


def test_str_replace_replaces_the_one_match_and_history_keeps_the_old_text(every_memory_of, tenant):
    memory = every_memory_of(tenant)
    memory("create", path="/memories/alice.md", file_text="# Alice\nPrefers EUR.\nIn Berlin.\n")
    assert memory("str_replace", path="/memories/alice.md", old_str="EUR", new_str="USD") == (
        "The memory file has been edited. Here is the snippet showing the change"
        " (with line numbers):\n     1\t# Alice\n     2\tPrefers USD.\n     3\tIn Berlin.\n     4\t"
    )
    assert memory.records() == {"/memories/alice.md": "# Alice\nPrefers USD.\nIn Berlin.\n"}
    assert memory.history("/memories/alice.md") == [
        "# Alice\nPrefers USD.\nIn Berlin.\n",
        "# Alice\nPrefers EUR.\nIn Berlin.\n",
    ]


def test_str_replace_refuses_a_missing_or_repeated_match_in_the_sdks_words(memory):
    memory("create", path="/memories/todo.md", file_text="- call\n- write\n- call\n")
    assert memory.error("str_replace", path="/memories/todo.md", old_str="- call", new_str="") == (
        "No replacement was performed. Multiple occurrences of old_str `- call` in lines: 1, 3."
        " Please ensure it is unique"
    )
    assert memory.error("str_replace", path="/memories/todo.md", old_str="- sing", new_str="") == (
        "No replacement was performed, old_str `- sing` did not appear verbatim in"
        " /memories/todo.md."
    )
    assert memory.error("str_replace", path="/memories/none.md", old_str="a", new_str="b") == (
        "The path /memories/none.md does not exist. Please provide a valid path."
    )
    memory("create", path="/memories/dir/x.md", file_text="x")
    assert memory.error("str_replace", path="/memories/dir", old_str="a", new_str="b") == (
        "The path /memories/dir is not a file."
    )
    assert memory.history("/memories/todo.md") == ["- call\n- write\n- call\n"]


def test_insert_puts_a_line_at_the_top_between_lines_and_at_the_end(memory):
    memory("create", path="/memories/list.md", file_text="b\nc")
    assert memory("insert", path="/memories/list.md", insert_line=0, insert_text="a\n") == (
        "The file /memories/list.md has been edited."
    )
    memory("insert", path="/memories/list.md", insert_line=2, insert_text="b2")
    memory("insert", path="/memories/list.md", insert_line=4, insert_text="d")
    assert memory.records() == {"/memories/list.md": "a\nb\nb2\nc\nd\n"}
    assert memory.error("insert", path="/memories/list.md", insert_line=6, insert_text="x") == (
        "Invalid `insert_line` parameter: 6. It should be within the range [0, 5]."
    )
    assert memory.error("insert", path="/memories/list.md", insert_line="one", insert_text="x") == (
        "`insert_line` must be an integer"
    )


def test_delete_forgets_a_file_or_every_file_of_a_directory(every_memory_of, tenant):
    memory = every_memory_of(tenant)
    for path in ("/memories/a.md", "/memories/dir/b.md", "/memories/dir/sub/c.md"):
        memory("create", path=path, file_text=path)
    memory("create", path="/memories/dirt.md", file_text="a prefix of dir/, not in it")
    assert memory("delete", path="/memories/a.md") == "Successfully deleted /memories/a.md"
    assert memory("delete", path="/memories/dir") == "Successfully deleted /memories/dir"
    assert memory.records() == {"/memories/dirt.md": "a prefix of dir/, not in it"}
    assert memory.error("delete", path="/memories/dir") == "The path /memories/dir does not exist"
    assert memory.error("delete", path="/memories") == (
        "Cannot delete the /memories directory itself"
    )
    assert memory.error("delete", path="/memories/") == (
        "Cannot delete the /memories directory itself"
    )


def test_rename_moves_a_file_or_a_directory(memory):
    memory("create", path="/memories/a.md", file_text="A")
    memory("create", path="/memories/dir/b.md", file_text="B")
    memory("create", path="/memories/dir/sub/c.md", file_text="C")
    assert memory("rename", old_path="/memories/a.md", new_path="/memories/archive/a.md") == (
        "Successfully renamed /memories/a.md to /memories/archive/a.md"
    )
    memory("rename", old_path="/memories/dir", new_path="/memories/archive/dir")
    assert memory.records() == {
        "/memories/archive/a.md": "A",
        "/memories/archive/dir/b.md": "B",
        "/memories/archive/dir/sub/c.md": "C",
    }


def test_rename_refuses_an_existing_destination_and_impossible_moves(memory):
    memory("create", path="/memories/a.md", file_text="A")
    memory("create", path="/memories/b.md", file_text="B")
    memory("create", path="/memories/dir/c.md", file_text="C")
    before = memory.records()
    refusals = {
        ("/memories/a.md", "/memories/b.md"): "The destination /memories/b.md already exists",
        ("/memories/a.md", "/memories/dir"): "The destination /memories/dir already exists",
        ("/memories/a.md", "/memories"): "The destination /memories already exists",
        ("/memories/none.md", "/memories/x.md"): "The path /memories/none.md does not exist",
        ("/memories", "/memories/x"): "Cannot rename the /memories directory itself",
        ("/memories/dir", "/memories/dir/inner"): (
            "Cannot move the directory /memories/dir into itself"
        ),
        ("/memories/dir", "/memories/a.md/dir"): (
            "The path /memories/a.md is a file, not a directory"
        ),
        ("/memories/a.md", "/memories/../a.md"): (
            "Path /memories/../a.md would escape /memories directory"
        ),
    }
    for (old, new), refusal in refusals.items():
        assert memory.error("rename", old_path=old, new_path=new) == refusal
    assert memory.records() == before


def test_clear_all_memory_forgets_the_files_and_keeps_the_namespaces_other_records(memory):
    memory("create", path="/memories/a.md", file_text="A")
    memory("create", path="/memories/dir/b.md", file_text="B")
    settle(memory.store.put(StoredRecord(scope="user:alice", key="currency", value="EUR")))
    assert settle(memory.tool.clear_all_memory()) == "All memory cleared"
    assert memory.records() == {"currency": "EUR"}
    assert memory("view", path="/memories").endswith("\n0B\t/memories")


# --- tenancy, namespaces, erasure -----------------------------------------------------------------


def test_two_orgs_keep_different_files_at_the_same_path(every_memory_of, tenant, other_tenant):
    acme, globex = every_memory_of(tenant), every_memory_of(other_tenant)
    acme("create", path="/memories/alice.md", file_text="acme's Alice prefers EUR")
    acme("create", path="/memories/acme-only.md", file_text="acme's secret")
    globex("create", path="/memories/alice.md", file_text="globex's Alice prefers JPY")
    assert acme("view", path="/memories/alice.md").endswith("\tacme's Alice prefers EUR")
    assert globex("view", path="/memories/alice.md").endswith("\tglobex's Alice prefers JPY")
    listing = globex("view", path="/memories")
    assert "acme-only" not in listing and "/memories/alice.md" in listing
    assert globex.error("view", path="/memories/acme-only.md").startswith("The path")
    assert globex.error("delete", path="/memories/acme-only.md").startswith("The path")
    globex("delete", path="/memories/alice.md")
    assert acme.records() == {
        "/memories/alice.md": "acme's Alice prefers EUR",
        "/memories/acme-only.md": "acme's secret",
    }
    assert set(MemoryRecord.unscoped.filter(org=tenant.org).values_list("content", flat=True)) == {
        "acme's Alice prefers EUR",
        "acme's secret",
    }
    assert not MemoryRecord.unscoped.filter(org=other_tenant.org).exists()


def test_a_namespace_sees_only_its_own_files(memory_of, tenant):
    alice, bob = memory_of(tenant, "user:alice"), memory_of(tenant, "user:bob")
    alice("create", path="/memories/me.md", file_text="I am Alice")
    bob("create", path="/memories/me.md", file_text="I am Bob")
    assert alice("view", path="/memories/me.md").endswith("\tI am Alice")
    assert bob("view", path="/memories/me.md").endswith("\tI am Bob")


def test_forgetting_the_namespace_erases_every_file(memory_of, tenant):
    alice, bob = memory_of(tenant, "user:alice"), memory_of(tenant, "user:bob")
    alice("create", path="/memories/a.md", file_text="A")
    alice("create", path="/memories/dir/b.md", file_text="B")
    alice("str_replace", path="/memories/a.md", old_str="A", new_str="A2")
    bob("create", path="/memories/a.md", file_text="Bob's")
    assert settle(alice.store.forget(scope="user:alice")) == 2
    assert alice("view", path="/memories") == f"{HEADER.format('/memories')}\n0B\t/memories"
    assert alice.history("/memories/a.md") == []
    assert alice.error("view", path="/memories/a.md").startswith("The path /memories/a.md")
    assert bob.records() == {"/memories/a.md": "Bob's"}


def test_other_records_of_the_namespace_are_not_files(memory):
    settle(memory.store.put(StoredRecord(scope="user:alice", key="currency", value="EUR")))
    settle(
        memory.store.put(
            StoredRecord(scope="user:alice", key="/memories/plan.json", value={"steps": 2})
        )
    )
    assert memory("view", path="/memories") == "\n".join(
        [HEADER.format("/memories"), "12B\t/memories", "12B\t/memories/plan.json"]
    )
    assert memory("view", path="/memories/plan.json").endswith('\t{"steps": 2}')


def test_new_files_take_the_tools_kind_and_tags_and_edits_keep_a_records_own(memory_of, tenant):
    memory = memory_of(tenant, kind=MemoryKind.PROCEDURAL, tags=["claude"])
    memory("create", path="/memories/how.md", file_text="step one")
    settle(
        memory.store.put(
            StoredRecord(scope="user:alice", key="/memories/fact.md", value="a", tags=["curated"])
        )
    )
    memory("str_replace", path="/memories/fact.md", old_str="a", new_str="b")
    memory("rename", old_path="/memories/fact.md", new_path="/memories/facts/fact.md")
    how = settle(memory.store.get(scope="user:alice", key="/memories/how.md"))
    fact = settle(memory.store.get(scope="user:alice", key="/memories/facts/fact.md"))
    assert (how.kind, how.tags) == (MemoryKind.PROCEDURAL, ("claude",))
    assert (fact.value, fact.kind, fact.tags) == ("b", MemoryKind.SEMANTIC, ("curated",))


# --- hostile paths and limits -----------------------------------------------------------------

HOSTILE = {
    "/etc/passwd": "Path must start with /memories, got: /etc/passwd",
    "memories/a.md": "Path must start with /memories, got: memories/a.md",
    "/memoriesX/a.md": "Path must start with /memories, got: /memoriesX/a.md",
    "/memories/../etc/passwd": "Path /memories/../etc/passwd would escape /memories directory",
    "/memories/a/../../b": "Path /memories/a/../../b would escape /memories directory",
    "/memories/..": "Path /memories/.. would escape /memories directory",
    "/memories/%2e%2e/secrets": "Path /memories/%2e%2e/secrets would escape /memories directory",
    "/memories/%252E%252E/x": "Path /memories/%252E%252E/x would escape /memories directory",
    "/memories/..\\..\\etc": (
        "Path /memories/..\\..\\etc contains a backslash; separate directories with /"
    ),
    "/memories/%5c..%5cx": "Path /memories/%5c..%5cx contains a backslash;"
    " separate directories with /",
    "/memories/a\x00.md": "Path '/memories/a\\x00.md' contains control characters",
    "/memories/a%00.md": "Path '/memories/a%00.md' contains control characters",
    "/memories/a\n.md": "Path '/memories/a\\n.md' contains control characters",
    "/memories/" + "x" * 246: f"Path /memories/{'x' * 246} is longer than 255 characters",
}


def test_a_hostile_path_is_refused_before_the_store_is_asked(in_process):
    for path, refusal in HOSTILE.items():
        assert in_process.error("create", path=path, file_text="x") == refusal
        assert in_process.error("view", path=path) == refusal
        assert in_process.error("delete", path=path) == refusal
    assert in_process.records() == {}


def test_paths_are_normalized_and_harmless_escapes_stay_literal(memory):
    memory("create", path="/memories/./notes//a.md", file_text="A")
    memory("create", path="/memories/50%25 done.md", file_text="half")
    assert memory.records() == {"/memories/notes/a.md": "A", "/memories/50%25 done.md": "half"}
    assert memory("view", path="/memories/notes/a.md").endswith("\tA")
    assert memory.error("create", path=42, file_text="x") == "`path` must be a string"
    assert memory.error("create", path="/memories/b.md") == "`file_text` must be a string"


def test_a_file_holds_at_most_max_file_bytes_of_utf8(memory_of, tenant):
    memory = memory_of(tenant, max_file_bytes=20)
    memory("create", path="/memories/fits.md", file_text="é" * 10)  # 20 bytes
    assert memory.error("create", path="/memories/big.md", file_text="é" * 10 + "!") == (
        "File /memories/big.md would be 21 bytes; a memory file holds at most 20 bytes"
    )
    memory("create", path="/memories/list.md", file_text="0123456789")
    assert "would be 21 bytes" in memory.error(
        "str_replace", path="/memories/list.md", old_str="9", new_str="9abcdefghijk"
    )
    assert "would be 21 bytes" in memory.error(
        "insert", path="/memories/list.md", insert_line=1, insert_text="abcdefghi"
    )
    assert memory.records() == {"/memories/fits.md": "é" * 10, "/memories/list.md": "0123456789"}


def test_a_file_at_the_default_limit_is_stored_even_when_json_escapes_it_all(memory):
    """The default limit fits the store's metadata bound (the value is kept there too)."""
    text = '"\n\\' * (MAX_FILE_BYTES // 3) + "x" * (MAX_FILE_BYTES % 3)
    assert len(text.encode()) == MAX_FILE_BYTES
    memory("create", path="/memories/escaped.md", file_text=text)
    assert memory.records() == {"/memories/escaped.md": text}
    assert "would be" in memory.error(
        "create", path="/memories/over.md", file_text="x" * (MAX_FILE_BYTES + 1)
    )


def test_a_file_is_never_blank_and_holds_no_nul_or_control_characters(memory):
    assert memory.error("create", path="/memories/empty.md", file_text=" \n") == (
        "A memory file cannot be empty or only whitespace: /memories/empty.md would be."
        " Delete it instead."
    )
    memory("create", path="/memories/a.md", file_text="A")
    assert "cannot be empty" in memory.error(
        "str_replace", path="/memories/a.md", old_str="A", new_str=""
    )
    assert "NUL" in memory.error("create", path="/memories/nul.md", file_text="a\x00b")
    # JSON spells a control character in six bytes: 3,000 of them pass the file limit
    # and not the store's metadata bound. A file holds text; tabs and breaks are text.
    assert "control characters" in memory.error(
        "create", path="/memories/ctl.md", file_text="\x01" * 3000
    )
    assert "control characters" in memory.error(
        "str_replace", path="/memories/a.md", old_str="A", new_str="A\x1b[31m"
    )
    memory("create", path="/memories/b.md", file_text="a\tb\r\nc\n")
    assert memory.records() == {"/memories/a.md": "A", "/memories/b.md": "a\tb\r\nc\n"}


def test_a_directory_view_lists_at_most_max_listed_files(memory_of, tenant):
    memory = memory_of(tenant, max_listed_files=3)
    for n in range(5):
        memory("create", path=f"/memories/f{n}.md", file_text=str(n))
    assert memory("view", path="/memories") == "\n".join(
        [
            HEADER.format("/memories"),
            "3B\t/memories",
            "1B\t/memories/f2.md",
            "1B\t/memories/f3.md",
            "1B\t/memories/f4.md",
            "(only the 3 most recently updated files are listed; view a subdirectory to see"
            " others)",
        ]
    )


# --- the blocking tool over an async store ----------------------------------------------------


def test_the_blocking_tool_waits_for_an_async_store_with_or_without_a_running_loop(tenant):
    store = DjangoMemoryStore(tenant.scope)
    tool = StoreMemoryTool(store, scope="user:alice")
    try:
        tool.call({"command": "create", "path": "/memories/a.md", "file_text": "A"})

        async def inside_a_loop() -> Any:
            return tool.call({"command": "view", "path": "/memories/a.md"})

        assert asyncio.run(inside_a_loop()).endswith("     1\tA")
    finally:
        run(sync_to_async(connections.close_all)())
    assert MemoryRecord.unscoped.get(key="/memories/a.md").content == "A"


# --- the SDK's tool runner against a scripted Messages API ---------------------------------------


def memory_use(number: int, **command: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{number}", "name": "memory", "input": command}


CONVERSATION = [
    [
        {"type": "text", "text": "Let me check my memory first."},
        memory_use(1, command="view", path="/memories"),
    ],
    [memory_use(2, command="create", path="/memories/alice.md", file_text="Prefers EUR.\n")],
    [
        memory_use(
            3, command="str_replace", path="/memories/alice.md", old_str="EUR", new_str="USD"
        ),
        memory_use(4, command="view", path="/memories/../../etc/passwd"),
    ],
    [{"type": "text", "text": "Noted: Alice now prefers USD."}],
]


def test_the_sdks_tool_runner_keeps_claudes_memory_in_memoryhub(live_server, tenant, other_tenant):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True)
    store = HttpMemoryStore(live_server.url, api_key=key, domain="support")
    tool = AsyncStoreMemoryTool(store, scope="user:alice")

    async def converse(url: str) -> Any:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="test-key", max_retries=0)
        runner = client.beta.messages.tool_runner(
            model="claude-sonnet-4-5",
            max_tokens=1024,
            tools=[tool],
            messages=[{"role": "user", "content": "Alice prefers USD now, not EUR."}],
        )
        return await runner.until_done()

    with serving(turns=CONVERSATION) as api:
        final = asyncio.run(converse(api.url))

    assert final.content[0].text == "Noted: Alice now prefers USD."
    assert api.requests[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    results = {block["tool_use_id"]: block for block in api.tool_results()}
    assert results["toolu_1"]["content"] == f"{HEADER.format('/memories')}\n0B\t/memories"
    assert results["toolu_2"]["content"] == "File created successfully at: /memories/alice.md"
    assert results["toolu_3"]["content"].startswith("The memory file has been edited.")
    assert results["toolu_4"]["is_error"] is True
    assert results["toolu_4"]["content"] == (
        "Path /memories/../../etc/passwd would escape /memories directory"
    )
    assert not any(results[use].get("is_error") for use in ("toolu_1", "toolu_2", "toolu_3"))
    [record] = MemoryRecord.unscoped.filter(org=tenant.org)
    assert (record.namespace, record.key, record.content) == (
        "user:alice",
        "/memories/alice.md",
        "Prefers USD.\n",
    )
    assert [
        version.value for version in run(store.history(scope="user:alice", key=record.key))
    ] == [
        "Prefers USD.\n",
        "Prefers EUR.\n",
    ]
    assert not MemoryRecord.unscoped.filter(org=other_tenant.org).exists()


def test_the_example_runs_against_the_site_and_a_scripted_api(live_server, tenant, other_tenant):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    theirs = StoredRecord(scope="user:alice", key="/memories/alice.md", value="globex's own")
    _, other_key = create_api_key(org=other_tenant.org, can_read=True, can_write=True)
    globex = SyncHttpMemoryStore(live_server.url, api_key=other_key, domain="support")
    globex.put(theirs)
    with serving(turns=CONVERSATION) as api:
        completed = subprocess.run(
            [sys.executable, "examples/anthropic_memory.py", "--url", live_server.url],
            cwd=ROOT,
            env={
                **os.environ,
                "MEMORYHUB_API_KEY": key,
                "ANTHROPIC_API_KEY": "test-key",
                "ANTHROPIC_BASE_URL": api.url,
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert "Claude: Noted: Alice now prefers USD." in out
    assert "memory create /memories/alice.md" in out
    assert "refused: Path /memories/../../etc/passwd would escape /memories directory" in out
    assert "v2 (upsert): 'Prefers USD.\\n'" in out
    assert "2 versions of /memories/alice.md, newest first:" in out
    assert "forgot user:alice: 1 record" in out
    assert not MemoryRecord.unscoped.filter(org=tenant.org).exists()
    assert globex.get(scope="user:alice", key="/memories/alice.md").value == "globex's own"


def test_renaming_a_directory_that_memory_keeps_is_an_error_not_a_loop(tenant):
    from memoryhub import policy
    from memoryhub.models import KnowledgeBase
    from memoryhub.scope import tenant_scope
    from memoryhub.services import knowledge_bases

    knowledge_bases.ensure_knowledge_base(tenant.scope, "notes")
    writable = DjangoMemoryStore(tenant.scope, source="notes")
    Memory(AsyncStoreMemoryTool(writable, scope="user:alice"), writable, "user:alice")(
        "create", path="/memories/dir/a.md", file_text="A"
    )
    with tenant_scope(tenant.scope):
        KnowledgeBase.objects.filter(name="notes").update(
            read_only=True, on_write=KnowledgeBase.OnWrite.IGNORE
        )
    store = DjangoMemoryStore(tenant.scope, source="notes", principal=policy.AGENT)
    memory = Memory(AsyncStoreMemoryTool(store, scope="user:alice"), store, "user:alice")
    assert "read-only" in memory.error("rename", old_path="/memories/dir", new_path="/memories/new")
    assert memory.records() == {"/memories/dir/a.md": "A"}


def test_the_example_runs_offline_and_a_failed_run_leaves_nothing(
    live_server, tenant, other_tenant
):
    """It needed a hosted model; a failed run kept the files it had made."""
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)

    def example(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "examples/anthropic_memory.py", "--url", live_server.url, *argv],
            cwd=ROOT,
            env={**os.environ, "MEMORYHUB_API_KEY": key, "ANTHROPIC_API_KEY": "", **env},
            capture_output=True,
            text=True,
            timeout=120,
        )

    offline = example("--offline")
    assert offline.returncode == 0, offline.stderr
    assert "Claude: Noted: your invoices will be in USD from now on." in offline.stdout
    assert "2 versions of /memories/alice.md, newest first:" in offline.stdout
    assert "forgot user:alice: 1 record" in offline.stdout
    assert not MemoryRecord.unscoped.filter(org=tenant.org).exists()

    # The script ends after the file is made: the run fails, in one line, and forgets it.
    with serving(turns=CONVERSATION[:2]) as api:
        failed = example(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=api.url)
    assert failed.returncode == 1, failed.stdout
    assert failed.stderr.strip().startswith("the run failed: ")
    assert "forgot user:alice: 1 record" in failed.stdout
    assert not MemoryRecord.unscoped.filter(org=tenant.org).exists()
