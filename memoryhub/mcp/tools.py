"""The MCP tools: each is a REST endpoint's twin, calling the same service.

A tool names the policy action it needs, describes its arguments as JSON Schema (with
the bounds of ``MEMORYHUB``, read when the list is asked for) and runs against the scope
``resolve_domain`` gave it. The schema is also the list of arguments a call may send:
anything else is refused by name, as the REST API refuses unknown fields. Every other
rule (types, bounds, the read-only policy, erasure) is the services' own, so a tool
fails with the code and ``errors`` the REST API answers. Before any of it, the arguments
pass the input boundary (``memoryhub.boundary``), as a REST body passes its parser.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp_types import Tool as ToolShape
from mcp_types import ToolAnnotations
from rest_framework.request import Request
from rest_framework.utils.encoders import JSONEncoder

from tenants.models import ApiKey

from .. import boundary, filters, policy
from ..api import serializers as s
from ..api.authentication import request_api_key
from ..api.permissions import request_principal, require, resolve_domain
from ..conf import MAX_HALF_LIFE_SECONDS, memoryhub_settings
from ..models import MemoryRecord
from ..scope import Scope
from ..services import forget as forget_service
from ..services import history as history_service
from ..services import query as query_service
from ..services import records as records_service
from ..services import write as write_service
from ..services.errors import ValidationFailed

__all__ = ["TOOLS", "Tool", "call", "calling_key", "describe", "jsonable", "scope_for"]

Action = policy.Action
Arguments = dict[str, Any]


def jsonable(value: Any) -> Any:
    """``value`` with UUIDs, dates and decimals as the REST API renders them."""
    return json.loads(json.dumps(value, cls=JSONEncoder))


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    action: Action
    #: The arguments' JSON Schema properties (built per call: bounds are settings).
    properties: Callable[[], dict[str, Any]]
    required: tuple[str, ...]
    run: Callable[[Request, Scope, Arguments], dict[str, Any]]
    read_only: bool = False
    destructive: bool = False

    def input_schema(self, domains: list[str] | None) -> dict[str, Any]:
        """The schema for a key: an org-wide key (``domains`` lists its org's) must name
        the domain; a domain-bound key (``None``) may leave it out."""
        domain: dict[str, Any] = {
            "type": "string",
            "description": "The domain (slug). A key bound to one domain may leave it out.",
        }
        if domains is not None:
            domain["enum"] = domains
        required = [*self.required, "domain"] if domains is not None else list(self.required)
        return {
            "type": "object",
            "properties": {"domain": domain, **self.properties()},
            "required": required,
            "additionalProperties": False,
        }


def _strings(description: str, max_items: int = query_service.MAX_FILTER_VALUES) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "string"},
        "maxItems": max_items,
        "description": description,
    }


def _record_id() -> dict[str, Any]:
    return {"id": {"type": "string", "format": "uuid", "description": "The record's id."}}


def _item_properties(*, updating: bool = False) -> dict[str, Any]:
    settings = memoryhub_settings
    properties: dict[str, Any] = {
        "content": {"type": "string", "minLength": 1, "maxLength": settings.MAX_CONTENT_LENGTH},
        "key": {
            "type": ["string", "null"],
            "maxLength": settings.MAX_KEY_LENGTH,
            "description": "Upsert by key: a write with the same key (in the same "
            "knowledge base and namespace) replaces the record.",
        },
        "kind": {"type": "string", "enum": list(MemoryRecord.Kind.values)},
        "namespace": {
            "type": "string",
            "maxLength": settings.MAX_NAMESPACE_LENGTH,
            "description": 'A data subject ("user:alice"); "" (default) is shared.',
        },
        "tags": {
            "type": "array",
            "items": {"type": "string", "maxLength": settings.MAX_TAG_LENGTH},
            "maxItems": settings.MAX_TAGS,
        },
        "metadata": {"type": "object", "description": "JSON, filterable with where."},
        "expires_at": {"type": ["string", "null"], "format": "date-time"},
        "occurred_at": {
            "type": ["string", "null"],
            "description": "When it happened or was said: ISO 8601 with a time zone, or a "
            "date (its start in UTC); default: now. A conversation turn names its session "
            'in metadata.session ("chat-7f3a").',
        },
        "ttl_seconds": {
            "type": "integer",
            "minimum": 1,
            "maximum": write_service.MAX_TTL_SECONDS,
        },
    }
    if updating:
        del properties["namespace"]  # a record's namespace and knowledge base are fixed
    return properties


# --- query --------------------------------------------------------------------------------


def _query_properties() -> dict[str, Any]:
    settings = memoryhub_settings
    return {
        "query": {"type": "string", "minLength": 1, "maxLength": settings.MAX_QUERY_LENGTH},
        "k": {
            "type": "integer",
            "minimum": 1,
            "maximum": settings.MAX_K,
            "default": settings.DEFAULT_K,
        },
        "mode": {"type": "string", "enum": list(query_service.MODES), "default": "hybrid"},
        "sources": _strings("Knowledge bases to search (default: all of the domain's)."),
        "namespaces": _strings(
            'Namespaces to search (default [""], the shared one); add "user:alice" for '
            "a data subject's own memory."
        ),
        "kinds": {
            "type": "array",
            "items": {"type": "string", "enum": list(MemoryRecord.Kind.values)},
            "maxItems": len(MemoryRecord.Kind.values),
        },
        "tags": _strings("Only records with all of these tags."),
        "where": {
            "type": "object",
            "description": 'A metadata filter: {"team": "billing"}, {"price": {"$lt": 10}}, '
            f"{', '.join(['$and', '$or', *sorted(filters.OPERATORS)])}.",
        },
        "min_score": {"type": "number", "minimum": -1, "maximum": 1},
        "rerank": {
            "type": "boolean",
            "default": True,
            "description": "false keeps the search's order when a reranker is configured.",
        },
        "explain": {
            "type": "boolean",
            "default": False,
            "description": "true: each item's rank and score in the vector and keyword "
            "legs (legs).",
        },
        "occurred_after": {
            "type": "string",
            "description": "Only memory that occurred at or after this moment (ISO 8601 "
            "with a time zone, or a date: its start in UTC).",
        },
        "occurred_before": {
            "type": "string",
            "description": "Only memory that occurred before this moment (exclusive).",
        },
        "recency_half_life": {
            "type": "number",
            "minimum": 0,
            "maximum": MAX_HALF_LIFE_SECONDS,
            "description": "Favour recent memory: scores halve every this many seconds "
            "of age (0: off; default: the server's setting).",
        },
        "context_turns": {
            "type": "integer",
            "minimum": 0,
            "maximum": settings.MAX_CONTEXT_TURNS,
            "description": "Return each hit's neighbouring turns of its conversation "
            "(metadata.session), this many before and after it.",
        },
    }


def _query(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    result = query_service.query(scope, **arguments)
    return {
        "items": result.item_dicts(),
        "grounding": query_service.render_grounding(result.items),
        "reranked": result.reranked,
    }


# --- write and update --------------------------------------------------------------------


def _write_properties() -> dict[str, Any]:
    return {
        "items": {
            "type": "array",
            "maxItems": memoryhub_settings.MAX_WRITE_ITEMS,
            "items": {
                "type": "object",
                "properties": _item_properties(),
                "required": ["content"],
                "additionalProperties": False,
            },
        },
        "source": {"type": "string", "description": "The knowledge base (default memory)."},
        "sources": _strings("Several knowledge bases (instead of source)."),
        "consolidate": {
            "type": "boolean",
            "description": "Consolidate these episodic items into semantic facts once indexed.",
        },
    }


def _write(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    result = write_service.write_body(scope, arguments, principal=request_principal(request))
    return {
        "accepted": result.accepted,
        "refused": result.refused,
        "failed": result.failed,
        "records": [s.record_result(record) for record in result.records],
    }


def _update_properties() -> dict[str, Any]:
    return {
        **_record_id(),
        "fields": {
            "type": "object",
            "properties": _item_properties(updating=True),
            "additionalProperties": False,
            "description": "The fields to change; the others keep their values.",
        },
    }


def _update(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    record_id = _id(arguments)
    records_service.get_record(scope, record_id)
    result = write_service.update_record(
        scope,
        record_id,
        arguments.get("fields", {}),
        partial=True,
        principal=request_principal(request),
    )
    principal = request_principal(request)
    if not policy.allows(principal, Action.READ, org_id=scope.org_id, domain_id=scope.domain_id):
        return {"id": result.id, "status": result.status}  # no content without read
    return dict(s.RecordSerializer(records_service.get_record(scope, record_id)).data)


# --- reading records --------------------------------------------------------------------


def _id(arguments: Arguments) -> str:
    record_id = arguments.get("id")
    if not isinstance(record_id, str):
        raise ValidationFailed({"id": ["must be a record id."]})
    return record_id


def _get(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    return dict(s.RecordSerializer(records_service.get_record(scope, _id(arguments))).data)


def _history(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    return dict(s.RecordHistorySerializer(history_service.history(scope, _id(arguments))).data)


def _sources(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    return {"sources": records_service.summarize_sources(scope)}


# --- forget -----------------------------------------------------------------------------


def _forget_properties() -> dict[str, Any]:
    return {
        "namespace": {
            "type": "string",
            "description": 'A data subject ("user:alice"): erases their memory everywhere. '
            'The shared namespace "" needs sources.',
        },
        "key": {"type": "string", "minLength": 1},
        "source": {"type": "string", "minLength": 1, "description": "One knowledge base."},
        "sources": _strings("Several knowledge bases (instead of source).", 64),
    }


def _forget(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    forget_request = forget_service.ForgetRequest.from_body(arguments)
    if forget_request.is_subject_erasure:
        require(request, Action.ERASE_SUBJECT, scope)
    result = forget_service.forget(scope, forget_request, principal=request_principal(request))
    return {
        "deleted": result.deleted,
        "by_source": result.by_source,
        "refused": result.refused,
        "receipt": result.receipt,
    }


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "memory_query",
            "Search the domain's memory (hybrid vector and keyword search by default). "
            "Returns the items, best first, and a grounding block to put in a prompt.",
            Action.READ,
            _query_properties,
            ("query",),
            _query,
            read_only=True,
        ),
        Tool(
            "memory_write",
            "Remember items: each is a record of a knowledge base (default memory). A "
            "key makes it an upsert; identical content is deduplicated. Returns the "
            "accepted, refused and failed knowledge bases and the record ids.",
            Action.WRITE,
            _write_properties,
            ("items",),
            _write,
        ),
        Tool(
            "memory_get",
            "One record by id.",
            Action.READ,
            _record_id,
            ("id",),
            _get,
            read_only=True,
        ),
        Tool(
            "memory_update",
            "Change some fields of one record by id; the previous state stays in its history.",
            Action.UPDATE,
            _update_properties,
            ("id", "fields"),
            _update,
        ),
        Tool(
            "memory_history",
            "A record's versions, newest (its current state) first.",
            Action.READ,
            _record_id,
            ("id",),
            _history,
            read_only=True,
        ),
        Tool(
            "memory_forget",
            "Erase memory by namespace (a data subject), key or knowledge base. Needs "
            "the forget permission; returns the counts and the erasure's receipt id.",
            Action.FORGET,
            _forget_properties,
            (),
            _forget,
            destructive=True,
        ),
        Tool(
            "memory_sources",
            "The domain's knowledge bases: description, read-only flag, record count.",
            Action.READ,
            dict,
            (),
            _sources,
            read_only=True,
        ),
    )
}


def describe(domains: list[str] | None) -> list[ToolShape]:
    """The tools as ``tools/list`` lists them for a key (see :meth:`Tool.input_schema`)."""
    return [
        ToolShape(
            name=tool.name,
            description=tool.description,
            input_schema=tool.input_schema(domains),
            annotations=ToolAnnotations(
                read_only_hint=tool.read_only,
                destructive_hint=tool.destructive,
                idempotent_hint=tool.read_only,
                open_world_hint=False,
            ),
        )
        for tool in TOOLS.values()
    ]


def calling_key(request: Request) -> ApiKey:
    """The key of an MCP request (the view admits no other caller)."""
    api_key = request_api_key(request)
    assert api_key is not None
    return api_key


def scope_for(request: Request, slug: Any, action: Action) -> Scope:
    """The caller's scope in domain ``slug`` (by default a bound key's own domain)."""
    if slug is None:
        api_key = calling_key(request)
        if api_key.domain is None:
            raise ValidationFailed(
                {"domain": ["This key is not bound to a domain: name the domain."]}
            )
        slug = api_key.domain.slug
    return resolve_domain(request, boundary.check_slug(slug), action)


def call(request: Request, tool: Tool, arguments: Arguments) -> dict[str, Any]:
    """Run ``tool``: the arguments through the input boundary (nothing the database
    cannot hold, nothing nested too deeply), then the domain and the policy (as the
    REST API's URL and key are), then the arguments' names, then the service."""
    arguments = dict(boundary.check_json(arguments))
    scope = scope_for(request, arguments.pop("domain", None), tool.action)
    unknown = sorted(set(arguments) - set(tool.properties()))
    if unknown:
        raise ValidationFailed({name: [f"is not an argument of {tool.name}."] for name in unknown})
    missing = [name for name in tool.required if name not in arguments]
    if missing:
        raise ValidationFailed({name: ["This field is required."] for name in missing})
    return jsonable(tool.run(request, scope, arguments))
