"""Anthropic's memory tool (``memory_20250818``) kept in a memoryhub store.

Claude's memory tool works on files under ``/memories`` with six commands: ``view``,
``create``, ``str_replace``, ``insert``, ``delete`` and ``rename``. Here each file is
one record of a :class:`~memoryhub.client.MemoryStore`, in one namespace of the store
(its ``scope``, ``"user:alice"``): the record's key is the file's path
(``/memories/notes/alice.md``), its value the file's text. Directories are not stored;
they are what the keys' prefixes imply, so a directory exists while a file is in it.

Two tools, one for each of the SDK's tool runners (``client.beta.messages.tool_runner``)::

    StoreMemoryTool(SyncHttpMemoryStore(...), scope="user:alice")  # Anthropic()
    AsyncStoreMemoryTool(HttpMemoryStore(...), scope="user:alice")  # AsyncAnthropic()

``StoreMemoryTool`` also takes an async store (``DjangoMemoryStore``) and waits for it.

Since the files are records, what holds for records holds for them: the API key (or the
``Scope`` of a ``DjangoMemoryStore``) decides the tenant, an edit keeps the previous
text in the record's history, and forgetting the namespace erases every file.

Paths must stay under ``/memories``: ``..``, backslashes, control characters and
percent-escapes that decode to any of them are refused. A file holds at most
``max_file_bytes`` of UTF-8 text and is never blank (a record's content cannot be); a
directory view lists at most ``max_listed_files`` files, two levels deep. Failures are
:class:`anthropic.lib.tools.ToolError`, worded as the SDK's local-filesystem tool words
them, which the tool runner returns to the model as an error result.

Each command is a few store calls with no transaction around them: two agents editing
the same file at once may overwrite each other (the last write wins), and renaming a
directory moves its files one by one (a new record each; the old records are forgotten,
history and all).
"""

from __future__ import annotations

from .files import (
    MAX_FILE_BYTES,
    MAX_LISTED_FILES,
    MAX_PATH_LENGTH,
    ROOT,
    BlockingMemoryStore,
    memory_key,
)
from .tools import AsyncStoreMemoryTool, StoreMemoryTool

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_LISTED_FILES",
    "MAX_PATH_LENGTH",
    "ROOT",
    "AsyncStoreMemoryTool",
    "BlockingMemoryStore",
    "StoreMemoryTool",
    "memory_key",
]
