"""The file formats an import reads: JSON Lines, CSV (its columns the stored fields, every
other one metadata) and Markdown (split by headings, then by size with overlap), each
line or chunk a Row checked like a written item."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ... import boundary
from ...exceptions import ValidationFailed
from ...items import MOMENT_FIELDS
from ...models import ImportJob
from ...vocabulary import items_of

CHUNK_SIZE = 1200


CHUNK_OVERLAP = 200


MAX_ERRORS = 20


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


class ImportFailed(ValidationFailed):
    """A file could not be imported; ``errors`` maps ``line N`` to messages."""

    code = "import_failed"


@dataclass(frozen=True)
class Row:
    line: int
    item: dict[str, Any]


def _rows_jsonl(lines: Iterable[str]) -> Iterator[Row]:
    """Each line read as the REST API reads a body (``boundary``: a key given twice,
    nesting past its depth, an unpaired surrogate, a number that is not finite are that
    line's error), so no line fails later, in the writer."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = boundary.loads(line)
        except ValueError as exc:
            raise ImportFailed({f"line {number}": [f"is not JSON: {exc}."]}) from None
        if not isinstance(value, dict):
            raise ImportFailed({f"line {number}": ["must be a JSON object."]})
        problems = boundary.json_problems(value)
        if problems:
            raise ImportFailed(
                {f"line {number}": [f"{path}: {m}" for path, ms in problems.items() for m in ms]}
            )
        yield Row(number, value)


#: CSV columns that are an item's fields as they are (the others but content, tags,
#: ttl_seconds and supersede are metadata).
TEXT_COLUMNS = ("key", "kind", "namespace", *MOMENT_FIELDS)


def _flag(value: str) -> Any:
    """A CSV cell as a boolean when it spells one (else as it is: validation names it)."""
    return {"true": True, "false": False, "1": True, "0": False}.get(value.strip().lower(), value)


def _csv_records(reader: Any) -> Iterator[dict[str, Any]]:
    """The reader's rows; a row the ``csv`` module cannot read is its line's error."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            # The record that starts after the last line read: a field past
            # csv.field_size_limit() (131,072 characters, more than any content may
            # hold), a NUL, a broken quote.
            raise ImportFailed(
                {f"line {reader.line_num + 1}": [f"cannot be read as CSV: {exc}."]}
            ) from None
        yield row


def _rows_csv(lines: Iterable[str]) -> Iterator[Row]:
    reader = csv.DictReader(lines)
    try:
        fieldnames = reader.fieldnames
    except csv.Error as exc:
        raise ImportFailed({"line 1": [f"cannot be read as CSV: {exc}."]}) from None
    if not fieldnames or "content" not in fieldnames:
        raise ImportFailed({"line 1": ["the header must include a content column."]})
    for row in _csv_records(reader):
        item: dict[str, Any] = {"content": row.get("content") or ""}
        metadata: dict[str, Any] = {}
        for column, value in row.items():
            if column in (None, "content") or value in (None, ""):
                continue
            if column in TEXT_COLUMNS:
                item[column] = value
            elif column == "supersede":
                item["supersede"] = _flag(value)
            elif column == "tags":
                item["tags"] = [tag.strip() for tag in value.split(",") if tag.strip()]
            elif column == "ttl_seconds":
                item["ttl_seconds"] = int(value) if value.isdigit() else value
            else:
                metadata[column] = value
        if metadata:
            item["metadata"] = metadata
        yield Row(reader.line_num, item)


def _sections(lines: Iterable[str]) -> Iterator[tuple[int, str, list[str]]]:
    heading, start, body = "", 1, list[str]()
    for number, line in enumerate(lines, start=1):
        match = _HEADING.match(line.rstrip("\r\n"))
        if match:
            if any(part.strip() for part in body):
                yield start, heading, body
            heading, start, body = match.group(2), number, []
        else:
            body.append(line.rstrip("\r\n"))
    if any(part.strip() for part in body):
        yield start, heading, body


def _rows_markdown(
    lines: Iterable[str],
    *,
    filename: str = "",
    size: int = CHUNK_SIZE,
    overlap: int = CHUNK_OVERLAP,
) -> Iterator[Row]:
    for start, heading, body_lines in _sections(lines):
        body = "\n".join(body_lines).strip()
        pieces = [body]
        if len(body) > size:
            step = max(1, size - overlap)
            pieces = [
                body[i : i + size] for i in range(0, len(body), step) if body[i : i + size].strip()
            ]
            if len(pieces) > 1 and len(pieces[-1]) <= overlap:
                pieces.pop()
        for index, piece in enumerate(pieces):
            metadata = {"heading": heading, "chunk": index, "line": start}
            if filename:
                metadata["file"] = filename
            content = f"{heading}\n\n{piece}" if heading else piece
            yield Row(start, {"content": content, "metadata": metadata})


def chunk_markdown(
    text: str, *, filename: str = "", size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP
) -> list[Row]:
    """Split Markdown by headings, then long sections by size with ``overlap``."""
    return list(_rows_markdown(text.splitlines(), filename=filename, size=size, overlap=overlap))


def iter_rows(
    lines: Iterable[str], format: str, *, filename: str = "", namespace: str = ""
) -> Iterator[Row]:
    """The file's items, one at a time, with the job's namespace filled in (not validated;
    :func:`check_row` does that)."""
    if format == ImportJob.Format.JSONL:
        rows = _rows_jsonl(lines)
    elif format == ImportJob.Format.CSV:
        rows = _rows_csv(lines)
    elif format == ImportJob.Format.MARKDOWN:
        rows = _rows_markdown(lines, filename=filename)
    else:
        raise ImportFailed({"format": [f"unknown format {format!r}."]})
    for row in rows:
        if namespace and "namespace" not in row.item:
            row.item["namespace"] = namespace
        yield row


def check_row(row: Row) -> list[str]:
    """What is wrong with one row, as ``field: message`` strings (empty: nothing)."""
    try:
        items_of([row.item])
    except ValidationFailed as exc:
        return [
            f"{path.removeprefix('items[0]').lstrip('.') or 'item'}: {message}"
            for path, messages in exc.errors.items()
            for message in messages
        ]
    return []


def parse(text: str, format: str, *, filename: str = "", namespace: str = "") -> list[Row]:
    """Parse and validate a whole (small) file; :class:`ImportFailed` names the first bad
    lines. Jobs stream instead (:func:`run_job`)."""
    if "\x00" in text:
        raise ImportFailed({"file": ["contains NUL characters; is it a text file?"]})
    rows = list(iter_rows(_lines(text), format, filename=filename, namespace=namespace))
    if not rows:
        raise ImportFailed({"file": ["has nothing to import."]})
    errors: dict[str, list[str]] = {}
    for row in rows:
        problems = check_row(row)
        if problems:
            errors.setdefault(f"line {row.line}", []).extend(problems)
        if len(errors) >= MAX_ERRORS:
            break
    if errors:
        raise ImportFailed(errors)
    return rows


def _lines(text: str) -> Iterator[str]:
    """Lines with their ends (what ``csv`` needs for quoted newlines)."""
    return iter(text.splitlines(keepends=True))
