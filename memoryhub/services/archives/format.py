"""The archive an org (or one of its domains) leaves as: a documented, versioned file of
JSON lines (docs/reference/archive.md).

The first line is the manifest: the format and its version, the org, what the archive
holds (counts per kind of line), and the SHA-256 of every line after it. Each line after
it is one object with a ``type``: ``domain``, ``knowledge_base``, ``receipt``, ``record``
and ``version`` (a record's earlier state, right after its record). A name ending in
``.gz`` is gzip-compressed. Writing and reading both stream: memory stays bounded
whatever the number of records.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from ...exceptions import ValidationFailed
from ..forget import salted_hash

FORMAT = "memoryhub-archive"
VERSION = 1
#: The kinds of line, in the order an archive holds them.
KINDS = ("domain", "knowledge_base", "receipt", "record", "version")


class ArchiveInvalid(ValidationFailed):
    """The file is not an archive this release reads, or it was damaged or changed."""

    def __init__(self, message: str, field: str = "archive") -> None:
        super().__init__({field: [message]})


def receipt_key_fingerprint() -> str:
    """Which key the receipts' hashes were made with (a keyed hash of a fixed text):
    receipts compare across deployments only when it is the same."""
    return salted_hash("memoryhub-archive receipt key")


def _open(path: Path, mode: str, *, gzipped: bool | None = None) -> IO[str]:
    if path.suffix == ".gz" if gzipped is None else gzipped:
        return gzip.open(path, mode + "t", encoding="utf-8", newline="\n")  # type: ignore[return-value]
    return path.open(mode, encoding="utf-8", newline="\n")


def _open_bytes(path: Path) -> IO[bytes]:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return path.open("rb")


class Writer:
    """Lines are written to a temporary file beside ``path`` while they are counted and
    hashed; :meth:`finish` writes the manifest, then the lines, into ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.counts: Counter[str] = Counter()
        self._hash = hashlib.sha256()
        descriptor, name = tempfile.mkstemp(prefix=".memoryhub-archive-", dir=path.parent)
        os.close(descriptor)
        self._body = Path(name)
        self._file = self._body.open("w", encoding="utf-8", newline="\n")

    def write(self, kind: str, fields: dict[str, Any]) -> None:
        line = json.dumps({"type": kind, **fields}, ensure_ascii=False, sort_keys=True) + "\n"
        self._hash.update(line.encode("utf-8"))
        self._file.write(line)
        self.counts[kind] += 1

    def finish(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._file.close()
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            **manifest,
            "counts": {kind: self.counts[kind] for kind in KINDS},
            "sha256": self._hash.hexdigest(),
        }
        partial = self.path.with_name(f".{self.path.name}.partial")
        gzipped = self.path.suffix == ".gz"
        try:
            with (
                _open(partial, "w", gzipped=gzipped) as out,
                self._body.open(encoding="utf-8", newline="\n") as body,
            ):
                out.write(json.dumps(manifest, ensure_ascii=False, sort_keys=True) + "\n")
                shutil.copyfileobj(body, out, 1024 * 1024)
            partial.replace(self.path)
        finally:
            partial.unlink(missing_ok=True)
            self._body.unlink(missing_ok=True)
        return manifest

    def discard(self) -> None:
        self._file.close()
        self._body.unlink(missing_ok=True)


@contextmanager
def writing(path: Path) -> Iterator[Writer]:
    writer = Writer(path)
    try:
        yield writer
    except BaseException:
        writer.discard()
        raise


def read_manifest(path: Path) -> dict[str, Any]:
    """The archive's manifest, checked for a format and version this release reads."""
    try:
        with _open(path, "r") as stream:
            first = stream.readline()
        manifest = json.loads(first)
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as exc:
        raise ArchiveInvalid(f"not a memoryhub archive: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArchiveInvalid(f"not a memoryhub archive (its first line is no {FORMAT} manifest).")
    if manifest.get("version") != VERSION:
        raise ArchiveInvalid(
            f"archive version {manifest.get('version')!r}: this release reads version {VERSION}."
        )
    return manifest


def lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each line after the manifest, with its line number (the manifest's is 1)."""
    with _open(path, "r") as stream:
        stream.readline()
        for number, text in enumerate(stream, start=2):
            try:
                line = json.loads(text)
            except ValueError as exc:
                raise ArchiveInvalid(f"line {number}: not JSON: {exc}") from None
            if not isinstance(line, dict) or line.get("type") not in KINDS:
                raise ArchiveInvalid(f"line {number}: not a line of an archive (type).")
            yield number, line


def verify(
    path: Path, manifest: dict[str, Any], check: Callable[[int, dict[str, Any]], None]
) -> None:
    """Read the archive once: its lines hash and count to what the manifest says, and
    each goes through ``check`` (with its line number)."""
    digest = hashlib.sha256()
    counts: Counter[str] = Counter()
    try:
        with _open_bytes(path) as stream:
            stream.readline()
            for number, data in enumerate(stream, start=2):
                digest.update(data)
                line = json.loads(data)
                if not isinstance(line, dict) or line.get("type") not in KINDS:
                    raise ArchiveInvalid(f"line {number}: not a line of an archive (type).")
                counts[line["type"]] += 1
                check(number, line)
    except (OSError, EOFError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        raise ArchiveInvalid(f"the archive cannot be read whole: {exc}") from None
    if digest.hexdigest() != manifest.get("sha256"):
        raise ArchiveInvalid("its lines do not hash to the manifest's sha256: damaged or changed.")
    expected = manifest.get("counts") or {}
    found = {kind: counts[kind] for kind in KINDS}
    if {kind: expected.get(kind, 0) for kind in KINDS} != found:
        raise ArchiveInvalid(f"its lines count {found}, the manifest {expected}.")
