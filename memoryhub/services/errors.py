"""Kept for imports written before :mod:`memoryhub.exceptions` (their home now)."""

from ..exceptions import MemoryhubError, UnknownSource, ValidationFailed, WriteRefused

__all__ = ["MemoryhubError", "UnknownSource", "ValidationFailed", "WriteRefused"]
