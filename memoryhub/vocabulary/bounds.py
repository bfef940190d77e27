"""The ``MEMORYHUB`` settings that bound the requests' fields."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields

from ..conf import DEFAULTS, memoryhub_settings

__all__ = ["Bounds", "bounds", "current", "fixed"]


@dataclass(frozen=True, slots=True)
class Bounds:
    """The ``MEMORYHUB`` settings that bound the requests' fields, as they are now: what
    the schemas state and the rules enforce (:func:`bounds`)."""

    MAX_WRITE_ITEMS: int
    MAX_CONTENT_LENGTH: int
    MAX_KEY_LENGTH: int
    MAX_NAMESPACE_LENGTH: int
    MAX_METADATA_BYTES: int
    MAX_TAGS: int
    MAX_TAG_LENGTH: int
    MAX_QUERY_LENGTH: int
    MAX_K: int
    DEFAULT_K: int
    MAX_CONTEXT_TURNS: int


def bounds() -> Bounds:
    """The :class:`Bounds` the settings give now (read on each call, never cached)."""
    given = memoryhub_settings.user_settings
    return Bounds(*(given.get(name, DEFAULTS[name]) for name in _BOUND_SETTINGS))


_BOUND_SETTINGS = tuple(bound.name for bound in fields(Bounds))


_fixed: ContextVar[Bounds | None] = ContextVar("memoryhub_request_bounds", default=None)


@contextmanager
def fixed() -> Iterator[Bounds]:
    """The bounds of one request's check: the settings read once, not for each field."""
    token = _fixed.set(bounds())
    try:
        yield _fixed.get()  # type: ignore[misc]
    finally:
        _fixed.reset(token)


def current() -> Bounds:
    """The bounds of the request being checked (:func:`fixed`), else :func:`bounds`."""
    return _fixed.get() or bounds()
