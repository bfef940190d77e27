"""The memory tool's files over a memoryhub store, without I/O: paths checked and mapped to
record keys, each command (view, create, str_replace, insert, delete, rename) an
operation that yields the store calls it needs and answers Claude's text."""

from __future__ import annotations

import json
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import unquote

from anthropic.lib.tools import (
    ToolError,
)

from ...client import MemoryKind, StoredRecord

#: The memory directory: every path starts with it.
ROOT = "/memories"


#: The longest path, which is the record's key (memoryhub's ``MAX_KEY_LENGTH``).
MAX_PATH_LENGTH = 255


#: The default size limit of a file, in UTF-8 bytes. The stores keep a string value in
#: the record's metadata too, which ``MAX_METADATA_BYTES`` (16,384 bytes of JSON) bounds:
#: 8,000 bytes stay under it even when JSON escapes every character (quotes, newlines).
MAX_FILE_BYTES = 8_000


#: The default number of files a directory view reads (the most recently updated).
MAX_LISTED_FILES = 100


#: How many levels deep a directory view lists, as the SDK's local tool does.
LISTING_DEPTH = 2


#: The width of a line number in a file view, as the SDK's local tool pads them.
LINE_NUMBER_WIDTH = 6


#: How many files one store search brings when a whole directory is deleted or renamed
#: (the stores return at most 1000).
PAGE = 1000


T = TypeVar("T")


class BlockingMemoryStore(Protocol):
    """A :class:`~memoryhub.client.MemoryStore` whose methods block instead of being
    coroutines (``SyncHttpMemoryStore``)."""

    def put(self, record: StoredRecord) -> None: ...

    def get(self, *, scope: str, key: str) -> StoredRecord | None: ...

    def search(
        self,
        *,
        scope: str,
        kind: MemoryKind | str | None = None,
        key_prefix: str | None = None,
        tag: str | None = None,
        limit: int = 100,
    ) -> list[StoredRecord]: ...

    def forget(self, *, scope: str, key: str | None = None) -> int: ...


def _refuse_hostile(candidate: str, path: str) -> None:
    if any(character < " " or character == "\x7f" for character in candidate):
        raise ToolError(f"Path {path!r} contains control characters")
    if "\\" in candidate:
        raise ToolError(f"Path {path} contains a backslash; separate directories with /")
    if ".." in candidate.split("/"):
        raise ToolError(f"Path {path} would escape /memories directory")


def memory_key(path: object) -> str:
    """The key of the file or directory at ``path``: the path without empty or ``.``
    segments (``/memories/./notes/`` is ``/memories/notes``). Raises ``ToolError`` for a
    path outside ``/memories``, one with ``..``, a backslash or a control character, in
    itself or once percent-decoded, and one longer than ``MAX_PATH_LENGTH``."""
    if not isinstance(path, str):
        raise ToolError(f"Path must be a string, got: {path!r}")
    _refuse_hostile(path, path)
    decoded = path
    # %252e%252e is %2e%2e once decoded and .. twice.
    for _ in range(3):
        once = unquote(decoded)
        if once == decoded:
            break
        decoded = once
        _refuse_hostile(decoded, path)
    if path != ROOT and not path.startswith(f"{ROOT}/"):
        raise ToolError(f"Path must start with /memories, got: {path}")
    segments = [segment for segment in path[len(ROOT) :].split("/") if segment not in ("", ".")]
    key = "/".join([ROOT, *segments])
    if len(key) > MAX_PATH_LENGTH:
        raise ToolError(f"Path {path} is longer than {MAX_PATH_LENGTH} characters")
    return key


def _ancestors(key: str) -> list[str]:
    """The directories between ``/memories`` and ``key``, outermost first."""
    segments = key[len(ROOT) + 1 :].split("/")
    return ["/".join([ROOT, *segments[:depth]]) for depth in range(1, len(segments))]


def _text(record: StoredRecord) -> str:
    """A file's text: the record's value, or its JSON for a record someone else wrote."""
    value = record.value
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _format_size(size: int) -> str:
    """A size as the SDK's local tool shows it: ``0B``, ``512B``, ``1.5K``, ``2M``."""
    if size == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    power = min((size.bit_length() - 1) // 10, len(units) - 1)
    scaled = size / 1024**power
    return (
        f"{int(scaled)}{units[power]}" if scaled == int(scaled) else f"{scaled:.1f}{units[power]}"
    )


def _numbered(lines: Sequence[str], first: int) -> str:
    return "\n".join(
        f"{str(number).rjust(LINE_NUMBER_WIDTH)}\t{line}"
        for number, line in enumerate(lines, start=first)
    )


def _argument(command: object, name: str, kind: type[T]) -> T:
    """A command's argument, of the type the tool's schema gives it (the SDK hands the
    model's input over unvalidated)."""
    value = getattr(command, name, None)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ToolError(f"`{name}` must be {'an integer' if kind is int else 'a string'}")
    return value


@dataclass(frozen=True)
class _StoreCall:
    """One call of a store method that a command needs: the tools make it, blocking or
    awaited, and send the command its result."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


#: A command as a generator: it yields the store calls it needs, is sent each result,
#: and returns the tool's answer (or raises ``ToolError``). No I/O in here.
Operation = Generator[_StoreCall, Any, T]


class MemoryFiles:
    """The six commands over the records of one namespace, as :data:`Operation` values;
    the tools run them against their store."""

    def __init__(
        self,
        *,
        scope: str,
        kind: MemoryKind | str,
        tags: Sequence[str],
        max_file_bytes: int,
        max_listed_files: int,
    ) -> None:
        if max_file_bytes < 1 or max_listed_files < 1:
            raise ValueError("max_file_bytes and max_listed_files must be at least 1")
        self.scope = scope
        self.kind = kind
        self.tags = tuple(tags)
        self.max_file_bytes = max_file_bytes
        self.max_listed_files = max_listed_files

    # The store calls.

    def _get(self, key: str) -> Operation[StoredRecord | None]:
        return (yield _StoreCall("get", kwargs={"scope": self.scope, "key": key}))

    def _under(self, key: str, limit: int) -> Operation[list[StoredRecord]]:
        """The files in the directory ``key`` and below, newest first."""
        call = _StoreCall(
            "search", kwargs={"scope": self.scope, "key_prefix": f"{key}/", "limit": limit}
        )
        return list((yield call))

    def _put(self, key: str, text: str, like: StoredRecord | None = None) -> Operation[None]:
        """Write the file ``key``; an existing file (``like``) keeps its kind and tags."""
        record = StoredRecord(
            scope=self.scope,
            key=key,
            value=text,
            kind=like.kind if like is not None else self.kind,
            tags=like.tags if like is not None else self.tags,
        )
        yield _StoreCall("put", (record,))

    def _forget(self, key: str) -> Operation[int]:
        return int((yield _StoreCall("forget", kwargs={"scope": self.scope, "key": key})))

    # The rules the commands share.

    def _is_directory(self, key: str) -> Operation[bool]:
        return key == ROOT or bool((yield from self._under(key, 1)))

    def _file(self, path: str, key: str) -> Operation[StoredRecord]:
        """The file at ``path``, or the SDK's error for a missing path or a directory."""
        if key != ROOT:
            record = yield from self._get(key)
            if record is not None:
                return record
            if not (yield from self._is_directory(key)):
                raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        raise ToolError(f"The path {path} is not a file.")

    def _refuse_file_ancestor(self, key: str) -> Operation[None]:
        """A file cannot be put below another file."""
        for ancestor in _ancestors(key):
            if (yield from self._get(ancestor)) is not None:
                raise ToolError(f"The path {ancestor} is a file, not a directory")

    def _checked(self, path: str, text: str) -> str:
        """``text`` if ``path`` may hold it."""
        if "\x00" in text:
            raise ToolError(f"The text for {path} contains a NUL character, which files cannot")
        if any((char < " " and char not in "\t\n\r") or char == "\x7f" for char in text):
            raise ToolError(
                f"The text for {path} contains control characters; a memory file holds text"
                " (tabs and line breaks included)"
            )
        if not text.strip():
            raise ToolError(
                f"A memory file cannot be empty or only whitespace: {path} would be."
                " Delete it instead."
            )
        size = _size(text)
        if size > self.max_file_bytes:
            raise ToolError(
                f"File {path} would be {size} bytes; a memory file holds at most"
                f" {self.max_file_bytes} bytes"
            )
        return text

    def _forget_under(self, key: str) -> Operation[int]:
        """Forget every file in the directory ``key``; how many went."""
        removed = 0
        while files := (yield from self._under(key, PAGE)):
            removed_now = 0
            for record in files:
                removed_now += yield from self._forget(record.key)
            if not removed_now:  # the store keeps them (a read-only knowledge base)
                break
            removed += removed_now
        return removed

    # The commands.

    def view(self, command: object) -> Operation[str]:
        path = _argument(command, "path", str)
        key = memory_key(path)
        if key != ROOT:
            record = yield from self._get(key)
            if record is not None:
                return self._view_file(path, _text(record), getattr(command, "view_range", None))
        files = yield from self._under(key, self.max_listed_files + 1)
        if not files and key != ROOT:
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        return self._listing(key, files)

    def _view_file(self, path: str, text: str, view_range: object) -> str:
        lines = text.split("\n")
        first = 1
        if view_range is not None:
            if not (
                isinstance(view_range, list | tuple)
                and len(view_range) == 2
                and all(type(number) is int for number in view_range)
            ):
                raise ToolError(
                    f"Invalid `view_range` parameter: {view_range}. It should be a list of"
                    " two integers, [start, end] (end -1: to the last line)."
                )
            start = max(1, view_range[0]) - 1
            end = len(lines) if view_range[1] == -1 else view_range[1]
            lines, first = lines[start:end], start + 1
        return f"Here's the content of {path} with line numbers:\n" + _numbered(lines, first)

    def _listing(self, key: str, files: list[StoredRecord]) -> str:
        """The SDK's directory view: the directory, then its files and directories (a
        directory's size is its files') to two levels deep, hidden ones left out."""
        entries: dict[tuple[tuple[str, ...], bool], int] = {}
        total = 0
        for record in files[: self.max_listed_files]:
            segments = tuple(record.key[len(key) + 1 :].split("/"))
            if any(not segment or segment.startswith(".") for segment in segments):
                continue
            size = _size(_text(record))
            total += size
            for depth in range(1, min(len(segments) - 1, LISTING_DEPTH) + 1):
                directory = (segments[:depth], True)
                entries[directory] = entries.get(directory, 0) + size
            if len(segments) <= LISTING_DEPTH:
                entries[(segments, False)] = size
        lines = [f"{_format_size(total)}\t{key}"]
        for (segments, is_directory), size in sorted(entries.items()):
            slash = "/" if is_directory else ""
            lines.append(f"{_format_size(size)}\t{key}/{'/'.join(segments)}{slash}")
        if len(files) > self.max_listed_files:
            lines.append(
                f"(only the {self.max_listed_files} most recently updated files are listed;"
                " view a subdirectory to see others)"
            )
        return (
            f"Here're the files and directories up to {LISTING_DEPTH} levels deep in {key},"
            " excluding hidden items:\n" + "\n".join(lines)
        )

    def create(self, command: object) -> Operation[str]:
        path = _argument(command, "path", str)
        key = memory_key(path)
        text = self._checked(path, _argument(command, "file_text", str))
        if key == ROOT:
            raise ToolError(f"File {path} already exists")
        yield from self._refuse_file_ancestor(key)
        if (yield from self._get(key)) is not None or (yield from self._is_directory(key)):
            raise ToolError(f"File {path} already exists")
        yield from self._put(key, text)
        return f"File created successfully at: {path}"

    def str_replace(self, command: object) -> Operation[str]:
        path = _argument(command, "path", str)
        old = _argument(command, "old_str", str)
        new = _argument(command, "new_str", str)
        key = memory_key(path)
        record = yield from self._file(path, key)
        content = _text(record)
        count = content.count(old)
        if count == 0:
            raise ToolError(
                f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
            )
        if count > 1:
            lines, start = [], 0
            while (position := content.find(old, start)) != -1:
                lines.append(content[:position].count("\n") + 1)
                start = position + 1
            raise ToolError(
                f"No replacement was performed. Multiple occurrences of old_str `{old}` in"
                f" lines: {', '.join(map(str, lines))}. Please ensure it is unique"
            )
        changed_line = content[: content.find(old)].count("\n")
        edited = self._checked(path, content.replace(old, new))
        yield from self._put(key, edited, like=record)
        edited_lines = edited.split("\n")
        first = max(0, changed_line - 2)
        last = min(len(edited_lines), changed_line + 3)
        return (
            "The memory file has been edited. Here is the snippet showing the change"
            " (with line numbers):\n" + _numbered(edited_lines[first:last], first + 1)
        )

    def insert(self, command: object) -> Operation[str]:
        path = _argument(command, "path", str)
        line = _argument(command, "insert_line", int)
        inserted = _argument(command, "insert_text", str)
        key = memory_key(path)
        record = yield from self._file(path, key)
        # Split on LF only, without the empty tail a trailing newline leaves (the SDK's).
        lines = _text(record).split("\n")
        if lines[-1] == "":
            lines.pop()
        if line < 0 or line > len(lines):
            raise ToolError(
                f"Invalid `insert_line` parameter: {line}. It should be within the range"
                f" [0, {len(lines)}]."
            )
        lines.insert(line, inserted.rstrip("\n"))
        edited = "\n".join(lines)
        if not edited.endswith("\n"):
            edited += "\n"
        yield from self._put(key, self._checked(path, edited), like=record)
        return f"The file {path} has been edited."

    def delete(self, command: object) -> Operation[str]:
        path = _argument(command, "path", str)
        key = memory_key(path)
        if key == ROOT:
            raise ToolError("Cannot delete the /memories directory itself")
        removed = yield from self._forget(key)
        removed += yield from self._forget_under(key)
        if not removed:
            raise ToolError(f"The path {path} does not exist")
        return f"Successfully deleted {path}"

    def rename(self, command: object) -> Operation[str]:
        old_path = _argument(command, "old_path", str)
        new_path = _argument(command, "new_path", str)
        old, new = memory_key(old_path), memory_key(new_path)
        if old == ROOT:
            raise ToolError("Cannot rename the /memories directory itself")
        if (yield from self._get(new)) is not None or (yield from self._is_directory(new)):
            raise ToolError(f"The destination {new_path} already exists")
        record = yield from self._get(old)
        if record is not None:
            yield from self._refuse_file_ancestor(new)
            yield from self._put(new, _text(record), like=record)
            yield from self._forget(old)
            return f"Successfully renamed {old_path} to {new_path}"
        files = yield from self._under(old, PAGE)
        if not files:
            raise ToolError(f"The path {old_path} does not exist")
        if new.startswith(f"{old}/"):
            raise ToolError(f"Cannot move the directory {old_path} into itself")
        yield from self._refuse_file_ancestor(new)
        while files:
            moves = [(record, new + record.key[len(old) :]) for record in files]
            too_long = [target for _, target in moves if len(target) > MAX_PATH_LENGTH]
            if too_long:
                raise ToolError(f"Path {too_long[0]} is longer than {MAX_PATH_LENGTH} characters")
            moved = 0
            for record, target in moves:
                yield from self._put(target, _text(record), like=record)
                moved += yield from self._forget(record.key)
            if not moved:  # the store keeps them (a read-only knowledge base)
                raise ToolError(f"The files under {old_path} cannot be moved: memory is read-only")
            files = yield from self._under(old, PAGE)
        return f"Successfully renamed {old_path} to {new_path}"

    def clear(self) -> Operation[str]:
        yield from self._forget_under(ROOT)
        return "All memory cleared"
