"""Consolidation: turning a namespace's new episodes into changes to its semantic facts.

An :class:`Extractor` reads the new :class:`Episode` turns and the most similar existing
:class:`Fact` records and proposes :class:`Operation` s (add, update, delete, none) that
:func:`validate_operations` has checked. Two ship here:

* :class:`BuiltinExtractor`: English sentence patterns and near-duplicate counting, no
  model, deterministic;
* :class:`OpenAICompatibleExtractor`: any ``/chat/completions`` endpoint with JSON-schema
  answers.

:func:`extractor_from_env` chooses between them. This package holds no models, tasks or
queries: the write path decides when to call an extractor and how to apply its answer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

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
from .openai import Attempt, Omitted, OpenAICompatibleExtractor

__all__ = [
    "MAX_FACT_CHARS",
    "MAX_KEY_CHARS",
    "Attempt",
    "BuiltinExtractor",
    "Episode",
    "ExtractionError",
    "Extractor",
    "ExtractorUnavailable",
    "Fact",
    "MalformedAnswer",
    "Omitted",
    "OpenAICompatibleExtractor",
    "Operation",
    "OperationName",
    "extractor_from_env",
    "validate_operations",
]

BASE_URL_VARIABLE = "MEMORYHUB_LLM_BASE_URL"
MODEL_VARIABLE = "MEMORYHUB_LLM_MODEL"
API_KEY_VARIABLE = "MEMORYHUB_LLM_API_KEY"


def extractor_from_env(environ: Mapping[str, str] = os.environ) -> Extractor:
    """:class:`OpenAICompatibleExtractor` when ``MEMORYHUB_LLM_BASE_URL`` and
    ``MEMORYHUB_LLM_MODEL`` are set (with the key in ``MEMORYHUB_LLM_API_KEY``, if any),
    :class:`BuiltinExtractor` when neither is.

    Setting only one of the two raises :class:`ValueError`: a half-configured model
    would otherwise fall back to the built-in without anyone noticing.
    """
    base_url = environ.get(BASE_URL_VARIABLE, "").strip()
    model = environ.get(MODEL_VARIABLE, "").strip()
    if base_url and model:
        return OpenAICompatibleExtractor(base_url, model, api_key=environ.get(API_KEY_VARIABLE, ""))
    if base_url or model:
        missing = MODEL_VARIABLE if base_url else BASE_URL_VARIABLE
        raise ValueError(f"{missing} must be set too, or neither of the two")
    return BuiltinExtractor()
