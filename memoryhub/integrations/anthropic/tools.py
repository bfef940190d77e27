"""The Anthropic SDK's memory tool classes over a store: StoreMemoryTool for the blocking
tool runner, AsyncStoreMemoryTool for the async one; each runs the file operations
against its store."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from anthropic.lib.tools import (
    BetaAbstractMemoryTool,
    BetaAsyncAbstractMemoryTool,
)
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from ...client import MemoryKind, MemoryStore
from .files import MAX_FILE_BYTES, MAX_LISTED_FILES, BlockingMemoryStore, MemoryFiles, Operation, T


def _blocking_run(store: Any, operation: Operation[T]) -> T:
    try:
        call = next(operation)
        while True:
            call = operation.send(getattr(store, call.method)(*call.args, **call.kwargs))
    except StopIteration as done:
        return done.value


async def _async_run(store: Any, operation: Operation[T]) -> T:
    try:
        call = next(operation)
        while True:
            result = getattr(store, call.method)(*call.args, **call.kwargs)
            if inspect.isawaitable(result):
                result = await result
            call = operation.send(result)
    except StopIteration as done:
        return done.value


def _wait(awaitable: Awaitable[T]) -> T:
    """The result of ``awaitable``, from blocking code: on a new event loop, in a helper
    thread when this thread already runs one."""

    async def main() -> T:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result()


class StoreMemoryTool(BetaAbstractMemoryTool):
    """The memory tool for the SDK's blocking runner (``Anthropic().beta.messages
    .tool_runner(tools=[tool], ...)``), over a blocking store (``SyncHttpMemoryStore``) or
    an async one (``HttpMemoryStore``, ``DjangoMemoryStore``: each command runs on an event
    loop of its own).

    ``scope`` is the store's namespace the files live in; new files get ``kind`` and
    ``tags``. A file holds at most ``max_file_bytes`` (UTF-8); a directory view reads at
    most ``max_listed_files`` files.
    """

    def __init__(
        self,
        store: MemoryStore | BlockingMemoryStore,
        *,
        scope: str,
        kind: MemoryKind | str = MemoryKind.SEMANTIC,
        tags: Sequence[str] = (),
        max_file_bytes: int = MAX_FILE_BYTES,
        max_listed_files: int = MAX_LISTED_FILES,
        cache_control: BetaCacheControlEphemeralParam | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.store = store
        self._files = MemoryFiles(
            scope=scope,
            kind=kind,
            tags=tags,
            max_file_bytes=max_file_bytes,
            max_listed_files=max_listed_files,
        )

    def _run(self, operation: Operation[str]) -> str:
        if inspect.iscoroutinefunction(self.store.get):
            return _wait(_async_run(self.store, operation))
        return _blocking_run(self.store, operation)

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        """A directory's files (two levels deep), or a file's numbered lines."""
        return self._run(self._files.view(command))

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        """A new file; an existing path is refused."""
        return self._run(self._files.create(command))

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        """Replace the one occurrence of ``old_str`` in a file."""
        return self._run(self._files.str_replace(command))

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        """Insert a line after line ``insert_line`` (0: at the top)."""
        return self._run(self._files.insert(command))

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        """Forget a file, or every file of a directory."""
        return self._run(self._files.delete(command))

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        """Move a file or a directory to a path that does not exist yet."""
        return self._run(self._files.rename(command))

    def clear_all_memory(self) -> str:
        """Forget every file of the namespace (its other records stay)."""
        return self._run(self._files.clear())


class AsyncStoreMemoryTool(BetaAsyncAbstractMemoryTool):
    """The memory tool for the SDK's async runner (``AsyncAnthropic().beta.messages
    .tool_runner(...)``) over an async store (``HttpMemoryStore``, ``DjangoMemoryStore``);
    the options are :class:`StoreMemoryTool`'s."""

    def __init__(
        self,
        store: MemoryStore,
        *,
        scope: str,
        kind: MemoryKind | str = MemoryKind.SEMANTIC,
        tags: Sequence[str] = (),
        max_file_bytes: int = MAX_FILE_BYTES,
        max_listed_files: int = MAX_LISTED_FILES,
        cache_control: BetaCacheControlEphemeralParam | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.store = store
        self._files = MemoryFiles(
            scope=scope,
            kind=kind,
            tags=tags,
            max_file_bytes=max_file_bytes,
            max_listed_files=max_listed_files,
        )

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        """As :meth:`StoreMemoryTool.view`."""
        return await _async_run(self.store, self._files.view(command))

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        """As :meth:`StoreMemoryTool.create`."""
        return await _async_run(self.store, self._files.create(command))

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        """As :meth:`StoreMemoryTool.str_replace`."""
        return await _async_run(self.store, self._files.str_replace(command))

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        """As :meth:`StoreMemoryTool.insert`."""
        return await _async_run(self.store, self._files.insert(command))

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        """As :meth:`StoreMemoryTool.delete`."""
        return await _async_run(self.store, self._files.delete(command))

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        """As :meth:`StoreMemoryTool.rename`."""
        return await _async_run(self.store, self._files.rename(command))

    async def clear_all_memory(self) -> str:
        """As :meth:`StoreMemoryTool.clear_all_memory`."""
        return await _async_run(self.store, self._files.clear())
