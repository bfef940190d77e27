"""The request vocabulary: each request a door accepts, declared once, with its rules.

A write (and its item, which is also an import's line), an update by id, a query, a
forget and a listing of namespaces are each one model here (``write``, ``query``,
``forget``), the only
place that names their fields, types, choices, help texts and bounds, and the only place
that checks them. Everything else is read from them:

* the commands the services take: a valid :class:`WriteItem`, ``services.query``'s
  ``QueryRequest`` and ``services.forget``'s ``ForgetRequest`` are these models;
* the REST API's OpenAPI document (:func:`openapi_schema`, through drf-spectacular);
* the MCP tools' input schemas (:func:`json_schema`).

A refusal is :class:`~memoryhub.exceptions.ValidationFailed`, every message by path
(``items[2].tags``), the whole request's at once. Bounds that are ``MEMORYHUB`` settings
(:func:`bounds`) are read when a request is checked and when a schema is asked for,
never at import, so every door states and enforces what the operator set.
"""

from .base import Request, field_names, json_schema, openapi_schema
from .bounds import Bounds, bounds
from .forget import MAX_SOURCE_NAME_LENGTH, ForgetBody
from .query import (
    FORMATS,
    MAX_FILTER_VALUE_LENGTH,
    MAX_FILTER_VALUES,
    MAX_NAMESPACE_PAGE,
    MAX_TOKENS,
    MODES,
    NamespaceListing,
    QueryBody,
)
from .rules import EXPIRY_RANGE, OCCURRED_RANGE, Refused, Rule, parse_moment
from .subjects import SubjectExportBody
from .write import (
    MAX_TTL_SECONDS,
    OCCURRED_HELP,
    ItemFields,
    RecordUpdate,
    WriteBody,
    WriteItem,
    items_of,
)

__all__ = [
    "EXPIRY_RANGE",
    "FORMATS",
    "MAX_FILTER_VALUES",
    "MAX_FILTER_VALUE_LENGTH",
    "MAX_NAMESPACE_PAGE",
    "MAX_SOURCE_NAME_LENGTH",
    "MAX_TOKENS",
    "MAX_TTL_SECONDS",
    "MODES",
    "OCCURRED_HELP",
    "OCCURRED_RANGE",
    "Bounds",
    "ForgetBody",
    "ItemFields",
    "NamespaceListing",
    "QueryBody",
    "RecordUpdate",
    "Refused",
    "Request",
    "Rule",
    "SubjectExportBody",
    "WriteBody",
    "WriteItem",
    "bounds",
    "field_names",
    "items_of",
    "json_schema",
    "openapi_schema",
    "parse_moment",
]
