"""Validating a write's items: every door's items pass here before anything is written.

A batch is checked as a whole: one bad item rejects the request with errors that name
the item index and field (``items[2].tags``), and nothing is written. The fields and
their bounds (``MEMORYHUB`` settings) are those ``memoryhub.vocabulary`` declares for an
item.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from .. import boundary
from ..conf import memoryhub_settings
from ..exceptions import ValidationFailed
from ..models import SESSION_KEY, SESSION_MAX_LENGTH, MemoryRecord, content_hash
from ..vocabulary import MAX_TTL_SECONDS, Bounds, ItemInSerializer, bounds, field_names
from .filter_indexes import MAX_INDEXED_VALUE_BYTES

__all__ = [
    "EXPIRY_RANGE",
    "OCCURRED_RANGE",
    "WriteItem",
    "parse_moment",
    "validate_items",
    "validate_moment",
]


#: ``expires_at`` must fall inside this range: every value in it is representable in
#: every time zone, by Python and by PostgreSQL, so no accepted value can break a page.
EXPIRY_RANGE = (
    datetime(2000, 1, 1, tzinfo=UTC),
    datetime(9000, 1, 1, tzinfo=UTC),
)
#: ``occurred_at`` (and a query's ``occurred_after``/``occurred_before``) must fall inside
#: this range: a thousand years back covers any archive, and both ends stay
#: representable in every time zone.
OCCURRED_RANGE = (
    datetime(1000, 1, 1, tzinfo=UTC),
    datetime(9000, 1, 1, tzinfo=UTC),
)


@dataclass(frozen=True, slots=True)
class WriteItem:
    """One validated item of a write."""

    content: str
    key: str | None = None
    kind: str = MemoryRecord.Kind.SEMANTIC
    namespace: str = ""
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    expires_at: datetime | None = None
    occurred_at: datetime | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    #: Close the current record of ``key`` (when it says something else) instead of
    #: overwriting it: services/supersession.py.
    supersede: bool = False

    @property
    def content_hash(self) -> str:
        return content_hash(self.content)


def _has_nul(value: str) -> bool:
    return "\x00" in value


def _check_json(value: Any, path: str, errors: dict[str, list[str]], depth: int = 0) -> None:  # noqa: C901
    if depth > 20:
        errors.setdefault(path, []).append("is nested too deeply (at most 20 levels).")
    elif isinstance(value, dict):
        for key, inner in value.items():
            if not isinstance(key, str):
                errors.setdefault(path, []).append("keys must be strings.")
                return
            if _has_nul(key):
                errors.setdefault(path, []).append("keys may not contain NUL characters.")
                return
            _check_json(inner, f"{path}.{key}", errors, depth + 1)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            _check_json(inner, f"{path}[{index}]", errors, depth + 1)
    elif isinstance(value, str):
        if _has_nul(value):
            errors.setdefault(path, []).append("may not contain NUL characters.")
    elif isinstance(value, float):
        if not math.isfinite(value):
            errors.setdefault(path, []).append("must be a finite number.")
    elif value is not None and not isinstance(value, bool | int):
        errors.setdefault(path, []).append(f"{type(value).__name__} is not a JSON value.")


def _validate_text(
    value: Any,
    path: str,
    errors: dict[str, list[str]],
    *,
    max_length: int,
    blank: bool,
    name: bool = False,
) -> str | None:
    """``value`` if it is usable text; else an error under ``path`` and None. ``name``:
    it names something (a namespace, a key, a tag), so control and invisible format
    characters are refused too (``boundary.has_invisible``)."""
    if not isinstance(value, str):
        errors.setdefault(path, []).append("must be a string.")
        return None
    if _has_nul(value):
        errors.setdefault(path, []).append("may not contain NUL characters.")
        return None
    if name and boundary.has_invisible(value):
        errors.setdefault(path, []).append(boundary.INVISIBLE)
        return None
    if not blank and not value.strip():
        errors.setdefault(path, []).append("may not be blank.")
        return None
    if len(value) > max_length:
        errors.setdefault(path, []).append(f"is longer than {max_length} characters.")
        return None
    return value


def parse_moment(value: Any, *, dates: bool = False) -> datetime | None:
    """A ``datetime`` or an ISO 8601 date-time as a ``datetime`` (naive when it names no
    time zone); with ``dates``, also a date alone (a ``date`` or ``"2025-03-01"``), as
    its start in UTC. None for anything else."""
    moment = value
    if isinstance(value, str):
        if not value.isascii():
            # Django's parsers read any script's digits ("٢٠٢٥-٠٣-٠١"); ISO 8601 is ASCII.
            return None
        try:
            # A date first: parse_datetime reads "2025-03-01" as a naive midnight.
            moment = (parse_date(value) if dates else None) or parse_datetime(value)
        except ValueError:
            return None
    if dates and isinstance(moment, date) and not isinstance(moment, datetime):
        moment = datetime.combine(moment, time.min, tzinfo=UTC)
    return moment if isinstance(moment, datetime) else None


def validate_moment(
    value: Any,
    path: str,
    errors: dict[str, list[str]],
    *,
    bounds: tuple[datetime, datetime],
    dates: bool = False,
) -> datetime | None:
    """:func:`parse_moment`, inside ``bounds``; an error under ``path`` otherwise."""
    moment = parse_moment(value, dates=dates)
    if moment is None:
        shape = "date-time with a time zone" + (", or a date (its start in UTC)" if dates else "")
        errors.setdefault(path, []).append(f"must be an ISO 8601 {shape}.")
        return None
    if timezone.is_naive(moment):
        errors.setdefault(path, []).append("must include a time zone.")
        return None
    try:
        in_range = bounds[0] <= moment <= bounds[1]
    except OverflowError:  # an offset that moves the moment outside datetime's years
        in_range = False
    if not in_range:
        errors.setdefault(path, []).append(
            f"must be between {bounds[0]:%Y-%m-%d} and {bounds[1]:%Y-%m-%d} (UTC)."
        )
        return None
    return moment


def _validate_expiry(
    raw: Mapping[str, Any], path: str, errors: dict[str, list[str]], now: datetime
) -> datetime | None:
    expires_at = raw.get("expires_at")
    ttl = raw.get("ttl_seconds")
    if expires_at is not None and ttl is not None:
        errors.setdefault(f"{path}.ttl_seconds", []).append(
            "give either expires_at or ttl_seconds, not both."
        )
        return None
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_TTL_SECONDS:
            errors.setdefault(f"{path}.ttl_seconds", []).append(
                f"must be an integer from 1 to {MAX_TTL_SECONDS}."
            )
            return None
        return now + timedelta(seconds=ttl)
    if expires_at is None:
        return None
    return validate_moment(expires_at, f"{path}.expires_at", errors, bounds=EXPIRY_RANGE)


def _validate_session(metadata: Mapping[str, Any], path: str, errors: dict[str, list[str]]) -> None:
    """``metadata["session"]``, when given, names a conversation: a short string or an
    integer (the turns index holds it)."""
    if SESSION_KEY not in metadata:
        return
    value = metadata[SESSION_KEY]
    text = value if isinstance(value, str) else None
    if isinstance(value, int) and abs(value) < 10**SESSION_MAX_LENGTH:
        text = str(value)
    if isinstance(value, bool) or text is None or not text.strip():
        errors.setdefault(f"{path}.{SESSION_KEY}", []).append(
            "names a conversation: a non-blank string or an integer."
        )
    elif len(text) > SESSION_MAX_LENGTH:
        errors.setdefault(f"{path}.{SESSION_KEY}", []).append(
            f"is longer than {SESSION_MAX_LENGTH} characters."
        )


def validate_items(raw_items: Any) -> list[WriteItem]:  # noqa: C901
    """Validate a batch of raw items (mappings); raise :class:`ValidationFailed`.

    One pass over the batch, a block per field, collecting every error before raising
    (a client fixes them all at once): longer than most functions here on purpose, each
    field's rule reads where the field is read; the reusable checks are the helpers."""
    limits = bounds()
    if not isinstance(raw_items, list | tuple):
        raise ValidationFailed({"items": ["must be a list."]})
    if len(raw_items) > limits.MAX_WRITE_ITEMS:
        raise ValidationFailed({"items": [f"at most {limits.MAX_WRITE_ITEMS} items per write."]})
    item_fields = field_names(ItemInSerializer)
    errors: dict[str, list[str]] = {}
    items: list[WriteItem] = []
    seen_keys: dict[tuple[str, str], int] = {}
    now = timezone.now()
    for index, raw in enumerate(raw_items):
        path = f"items[{index}]"
        if isinstance(raw, WriteItem):
            items.append(raw)
            continue
        if not isinstance(raw, Mapping):
            errors.setdefault(path, []).append("must be an object.")
            continue
        unknown = sorted(set(raw) - item_fields, key=str)
        for name in unknown:
            errors.setdefault(f"{path}.{name}", []).append("is not a field of a memory item.")
        content = _validate_text(
            raw.get("content"),
            f"{path}.content",
            errors,
            max_length=limits.MAX_CONTENT_LENGTH,
            blank=False,
        )
        key = raw.get("key")
        if key is not None:
            key = _validate_text(
                key,
                f"{path}.key",
                errors,
                max_length=limits.MAX_KEY_LENGTH,
                blank=False,
                name=True,
            )
        kind = raw.get("kind", MemoryRecord.Kind.SEMANTIC)
        if kind not in MemoryRecord.Kind.values:
            errors.setdefault(f"{path}.kind", []).append(
                f"must be one of {', '.join(MemoryRecord.Kind.values)}."
            )
        namespace = raw.get("namespace", "")
        namespace = _validate_text(
            "" if namespace is None else namespace,
            f"{path}.namespace",
            errors,
            max_length=limits.MAX_NAMESPACE_LENGTH,
            blank=True,
            name=True,
        )
        tags = _validate_tags(raw.get("tags", []), f"{path}.tags", errors, limits)
        metadata = raw.get("metadata", {})
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            errors.setdefault(f"{path}.metadata", []).append("must be an object.")
        else:
            _check_json(metadata, f"{path}.metadata", errors)
            if f"{path}.metadata" not in errors:
                size = len(json.dumps(metadata, ensure_ascii=False).encode("utf-8"))
                if size > limits.MAX_METADATA_BYTES:
                    errors.setdefault(f"{path}.metadata", []).append(
                        f"is {size} bytes of JSON; at most {limits.MAX_METADATA_BYTES}."
                    )
            _validate_session(metadata, f"{path}.metadata", errors)
            _validate_indexed_values(metadata, f"{path}.metadata", errors)
        expires_at = _validate_expiry(raw, path, errors, now)
        occurred_at = raw.get("occurred_at")
        if occurred_at is not None:
            occurred_at = validate_moment(
                occurred_at, f"{path}.occurred_at", errors, bounds=OCCURRED_RANGE, dates=True
            )
        valid_from, valid_until = (
            validate_moment(raw[name], f"{path}.{name}", errors, bounds=OCCURRED_RANGE, dates=True)
            if raw.get(name) is not None
            else None
            for name in ("valid_from", "valid_until")
        )
        if valid_from is not None and valid_until is not None and valid_until <= valid_from:
            errors.setdefault(f"{path}.valid_until", []).append("must be later than valid_from.")
        supersede = raw.get("supersede", False)
        if not isinstance(supersede, bool):
            errors.setdefault(f"{path}.supersede", []).append("must be true or false.")
        elif supersede and key is None:
            errors.setdefault(f"{path}.supersede", []).append(
                "needs a key: the record it supersedes is the one holding the key."
            )
        if key is not None and namespace is not None:
            first = seen_keys.setdefault((namespace, key), index)
            if first != index:
                errors.setdefault(f"{path}.key", []).append(
                    f"repeats the key of items[{first}] in the same namespace."
                )
        if any(error_path.startswith(path) for error_path in errors):
            continue
        assert content is not None and namespace is not None and tags is not None
        items.append(
            WriteItem(
                content=content,
                key=key,
                kind=kind,
                namespace=namespace,
                tags=tags,
                metadata=metadata,
                expires_at=expires_at,
                occurred_at=occurred_at,
                valid_from=valid_from,
                valid_until=valid_until,
                supersede=supersede,
            )
        )
    if errors:
        raise ValidationFailed(errors)
    return items


def _validate_indexed_values(
    metadata: Mapping[str, Any], path: str, errors: dict[str, list[str]]
) -> None:
    """The value of a key in ``INDEXED_METADATA_KEYS`` is an entry of its btree index,
    which holds at most about 2.7 kB: larger ones are refused here, not by the index."""
    for key in memoryhub_settings.INDEXED_METADATA_KEYS or ():
        if key not in metadata:
            continue
        size = len(json.dumps(metadata[key], ensure_ascii=False).encode("utf-8"))
        if size > MAX_INDEXED_VALUE_BYTES:
            errors.setdefault(f"{path}.{key}", []).append(
                f"is {size} bytes of JSON; an indexed key's value is at most"
                f" {MAX_INDEXED_VALUE_BYTES} (INDEXED_METADATA_KEYS)."
            )


def _validate_tags(
    value: Any, path: str, errors: dict[str, list[str]], limits: Bounds
) -> tuple[str, ...] | None:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        errors.setdefault(path, []).append("must be a list of strings.")
        return None
    if len(value) > limits.MAX_TAGS:
        errors.setdefault(path, []).append(f"at most {limits.MAX_TAGS} tags.")
        return None
    tags: list[str] = []
    for index, tag in enumerate(value):
        checked = _validate_text(
            tag,
            f"{path}[{index}]",
            errors,
            max_length=limits.MAX_TAG_LENGTH,
            blank=False,
            name=True,
        )
        if checked is not None and checked not in tags:
            tags.append(checked)
    return tuple(tags)


# --- knowledge bases ------------------------------------------------------------------
