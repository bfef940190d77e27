"""Consolidation: turning a namespace's new episodes into changes to its semantic facts.

An :class:`Extractor` reads the new :class:`Episode` turns and the most similar existing
:class:`Fact` records and proposes :class:`Operation` s (add, update, delete, none) that
:func:`validate_operations` has checked. One ships here:

* :class:`BuiltinExtractor`: English sentence patterns and near-duplicate counting, no
  model, deterministic;
This package holds no models, tasks or
queries: the write path decides when to call an extractor and how to apply its answer.
"""

from __future__ import annotations

from .base import (
    MAX_FACT_CHARS,
    MAX_KEY_CHARS,
    Episode,
    ExtractionError,
    Extractor,
    ExtractorUnavailable,
    Fact,
    MalformedAnswer,
    Operation,
    OperationName,
    validate_operations,
)
from .builtin import BuiltinExtractor

__all__ = [
    "MAX_FACT_CHARS",
    "MAX_KEY_CHARS",
    "BuiltinExtractor",
    "Episode",
    "ExtractionError",
    "Extractor",
    "ExtractorUnavailable",
    "Fact",
    "MalformedAnswer",
    "Operation",
    "OperationName",
    "validate_operations",
]
