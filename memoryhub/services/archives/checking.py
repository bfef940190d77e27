"""Checking an archive before anything of it is written: its hash and counts against the
manifest, each line's fields (a record's by the rules a write obeys), and that each line
names what was declared before it."""

from __future__ import annotations

import math
import re
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from django.utils.dateparse import parse_datetime

from ...exceptions import ValidationFailed
from ...models import KnowledgeBase, RecordVersion
from ...vocabulary import RecordUpdate, WriteItem
from . import format
from .exporting import RECORD_FIELDS, VERSION_FIELDS
from .format import ArchiveInvalid

__all__ = ["MOST_ERRORS", "check", "line_problems", "when"]

#: Errors an invalid archive is reported with, at most.
MOST_ERRORS = 20


def check(path: Path, manifest: dict[str, Any]) -> None:
    """Raise :class:`~.format.ArchiveInvalid` (or ``ValidationFailed`` naming lines and
    fields) unless the whole archive may be imported."""
    errors: list[str] = _manifest_problems(manifest)
    order = _Order()

    def check(number: int, line: dict[str, Any]) -> None:
        if len(errors) < MOST_ERRORS:
            problems = line_problems(line)
            errors.extend(f"line {number}: {problem}" for problem in problems or order.after(line))

    format.verify(path, manifest, check)
    if errors:
        raise ValidationFailed({"archive": errors})
    if (manifest.get("counts") or {}).get("receipt") and manifest.get("receipt_key") != (
        format.receipt_key_fingerprint()
    ):
        raise ArchiveInvalid(
            "its erasure receipts were made with another ERASURE_RECEIPT_KEY: set the"
            " source deployment's key here, or nothing erased could be told apart.",
            field="receipt_key",
        )


def _manifest_problems(manifest: dict[str, Any]) -> list[str]:
    org = manifest.get("org")
    if not isinstance(org, dict) or not _domain_slug(org.get("slug")):
        return ["manifest: org.slug is missing or not a slug."]
    if not _text(200)(org.get("name") or ""):
        return ["manifest: org.name is not a name of at most 200 characters."]
    return []


#: The order of an archive's kinds of line (a record's earlier states follow it).
RANK = {"domain": 0, "knowledge_base": 1, "receipt": 2, "record": 3, "version": 3}


class _Order:
    """What a line may refer to and where it may stand: the kinds in their order, the
    domains and knowledge bases declared before it, a domain's records together and in
    id order (an id twice is refused), a record's earlier states right after it, and
    one length of vector per model."""

    def __init__(self) -> None:
        self.domains: set[str] = set()
        self.knowledge_bases: set[tuple[str, str]] = set()
        self.record: str | None = None
        self.rank = 0
        self.records_of: str | None = None
        self.done_domains: set[str] = set()
        self.dimensions: dict[str, int] = {}

    def after(self, line: dict[str, Any]) -> list[str]:
        kind = line["type"]
        if RANK[kind] < self.rank:
            return [f"type: a {kind} line after the {list(RANK)[self.rank]} lines."]
        self.rank = RANK[kind]
        if kind == "record":
            problem = self._record_order(line)
            if problem:
                return [problem]
        if kind == "domain":
            self.domains.add(line["slug"])
            return []
        if kind == "version":
            if line["record"] != self.record:
                return [f"record: {line['record']} is not the record just before it."]
            return []
        self.record = line["id"] if kind == "record" else None
        if line["domain"] not in self.domains:
            return [f"domain: {line['domain']!r} is not declared before it."]
        if kind == "knowledge_base":
            self.knowledge_bases.add((line["domain"], line["name"]))
        elif (
            kind == "record"
            and (line["domain"], line["knowledge_base"]) not in self.knowledge_bases
        ):
            return [f"knowledge_base: {line['knowledge_base']!r} is not declared before it."]
        return []

    def _record_order(self, line: dict[str, Any]) -> str:
        domain, pk = line["domain"], str(line["id"]).lower()
        if domain != self.records_of:
            if domain in self.done_domains:
                return f"domain: {domain!r}'s records are not together."
            if self.records_of is not None:
                self.done_domains.add(self.records_of)
            self.records_of, self.record = domain, None
        elif self.record is not None and pk <= self.record.lower():
            return "id: not after the record before it (records are in id order, each once)."
        vector = line.get("embedding")
        if isinstance(vector, list):
            model = str(line.get("embedding_model"))
            expected = self.dimensions.setdefault(model, len(vector))
            if expected != len(vector):
                return f"embedding: {len(vector)} numbers where {model}'s vectors have {expected}."
        return ""


def line_problems(line: dict[str, Any]) -> list[str]:
    """What is wrong with one line, by field (the write rules for a record's fields)."""
    kind = line["type"]
    try:
        if kind == "record":
            WriteItem.parse({f: line.get(f) for f in ("namespace", *RECORD_FIELDS[2:11])})
            return _record_problems(line)
        if kind == "version":
            RecordUpdate.parse({f: line.get(f) for f in VERSION_FIELDS[1:10]})
            return _need(
                line,
                {
                    "record": _uuid,
                    "version": _positive,
                    "changed_at": _moment,
                    "actor": _text(200),
                    "cause": lambda value: value in RecordVersion.Cause.values,
                },
            )
    except ValidationFailed as exc:
        return [f"{name}: {' '.join(map(str, messages))}" for name, messages in exc.errors.items()]
    if kind == "domain":
        return _need(
            line, {"slug": _domain_slug, "name": _text(200), "hybrid_vector_weight": _weight}
        )
    if kind == "knowledge_base":
        return _need(
            line,
            {
                "domain": _slug,
                "name": _slug,
                "description": _text(100_000),
                "read_only": _flag,
                "consolidate": _flag,
                "on_write": lambda value: value in KnowledgeBase.OnWrite.values,
                "refused_writes": _count,
            },
        )
    return _need(
        line,
        {
            "domain": _slug,
            "id": _uuid,
            "created_at": _moment,
            "batch": _uuid,
            "actor": _text(150),
            "selector": lambda value: isinstance(value, dict),
            "by_source": lambda value: isinstance(value, dict),
            "deleted": _count,
            "cancelled_imports": _count,
        },
    )


def _record_problems(line: dict[str, Any]) -> list[str]:
    problems = _need(
        line,
        {
            "id": _uuid,
            "domain": _slug,
            "knowledge_base": _slug,
            "created_at": _moment,
            "version": _positive,
            "changed_by": _text(200),
            "change_cause": _text(16),
            "consolidation": lambda value: value in ("", "pending", "done"),
        },
    )
    if not isinstance(line.get("content"), str) or not line["content"]:
        problems.append("content: may not be empty.")
    if line.get("superseded_by") is not None and not _uuid(line["superseded_by"]):
        problems.append("superseded_by: must be a record id.")
    if not isinstance(line.get("derived_from") or [], list) or not all(
        _uuid(x) for x in line.get("derived_from") or []
    ):
        problems.append("derived_from: must be a list of record ids.")
    vector = line.get("embedding")
    if vector is not None and (
        not isinstance(vector, list)
        or not vector
        or not all(isinstance(x, int | float) and math.isfinite(x) for x in vector)
        or not isinstance(line.get("embedding_model"), str)
    ):
        problems.append("embedding: must be a list of numbers with its embedding_model.")
    return problems


def _need(line: dict[str, Any], checks: dict[str, Any]) -> list[str]:
    return [
        f"{name}: is missing or malformed." for name, ok in checks.items() if not ok(line.get(name))
    ]


def when(value: str) -> datetime:
    """A moment of a checked line (:func:`_moment`)."""
    moment = parse_datetime(value)
    assert moment is not None
    return moment


def _uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return isinstance(value, str)


def _domain_slug(value: Any) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= 64
        and re.fullmatch(r"[-a-zA-Z0-9_]+", value) is not None
    )


def _slug(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64 and "\x00" not in value


def _moment(value: Any) -> bool:
    """An ISO 8601 moment with its offset (a naive one is no moment)."""
    try:
        moment = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        return False
    return moment is not None and moment.tzinfo is not None


def _text(most: int) -> Any:
    return lambda value: isinstance(value, str) and len(value) <= most and "\x00" not in value


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _weight(value: Any) -> bool:
    return value is None or (
        isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
    )


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31
