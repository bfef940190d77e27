"""The MCP tools: each is a REST endpoint's twin, calling the same service.

A tool names the policy action it needs, describes its arguments as JSON Schema and runs
against the scope ``resolve_domain`` gave it. The schema is generated from the request
the tool takes, as declared in ``memoryhub.vocabulary`` (with the bounds of
``MEMORYHUB``, read when the list is asked for), and is also the list of arguments a
call may send: anything else is refused by name, as the REST API refuses unknown fields.
Every other rule (types, bounds, the read-only policy, erasure) is the services' own, so
a tool fails with the code and ``errors`` the REST API answers. Before any of it, the
arguments pass the input boundary (``memoryhub.boundary``), as a REST body passes its
parser.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError
from mcp_types import Tool as ToolShape
from mcp_types import ToolAnnotations
from rest_framework.request import Request
from rest_framework.utils.encoders import JSONEncoder

from tenants.models import ApiKey

from .. import boundary, policy, vocabulary
from ..api import serializers as s
from ..api.authentication import request_api_key
from ..api.permissions import request_principal, resolve_domain
from ..cache import canonical_json
from ..exceptions import ValidationFailed
from ..scope import Scope
from ..services import forget as forget_service
from ..services import history as history_service
from ..services import idempotency, supersession, updates
from ..services import query as query_service
from ..services import records as records_service
from ..services import write as write_service

__all__ = ["TOOLS", "Tool", "call", "calling_key", "describe", "jsonable", "scope_for"]

Action = policy.Action
Arguments = dict[str, Any]

#: The argument of the tools that change memory that makes their retries safe.
IDEMPOTENCY_ARGUMENT = "idempotency_key"


def jsonable(value: Any) -> Any:
    """``value`` with UUIDs, dates and decimals as the REST API renders them."""
    return json.loads(json.dumps(value, cls=JSONEncoder))


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    action: Action
    #: The arguments as a JSON Schema object (built per call: bounds are settings).
    arguments: Callable[[], dict[str, Any]]
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
        arguments = self.arguments()
        required = list(arguments.get("required", ()))
        if domains is not None:
            required.append("domain")
        properties = {"domain": domain, **arguments["properties"]}
        if not self.read_only:
            properties[IDEMPOTENCY_ARGUMENT] = {
                "type": "string",
                "minLength": 1,
                "maxLength": idempotency.MAX_KEY_LENGTH,
                "description": "A key of your choosing that makes a retry safe: the same"
                " call sent again with the same key is answered as the first time"
                " instead of acting twice (as REST's Idempotency-Key header).",
            }
        return {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }


def _declared(
    request: type[vocabulary.Request], *, without: frozenset[str] = frozenset()
) -> Callable[[], dict[str, Any]]:
    """The arguments of a tool that takes ``request`` (``memoryhub.vocabulary``)."""
    return lambda: vocabulary.json_schema(request, without=without)


def _record_id() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid", "description": "The record's id."}
        },
        "required": ["id"],
    }


# --- query --------------------------------------------------------------------------------


def _query(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    return s.query_result(query_service.query(scope, **arguments))


# --- write and update --------------------------------------------------------------------


def _write(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    result = write_service.write_body(scope, arguments, principal=request_principal(request))
    return {
        "accepted": result.accepted,
        "refused": result.refused,
        "failed": result.failed,
        "records": [s.record_result(record) for record in result.records],
    }


def _update_arguments() -> dict[str, Any]:
    arguments = _record_id()
    arguments["properties"]["fields"] = {
        **vocabulary.json_schema(vocabulary.RecordUpdate),
        "description": "The fields to change; the others keep their values.",
    }
    arguments["required"].append("fields")
    return arguments


def _update(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    updated = updates.update_record_for(
        scope,
        _id(arguments),
        arguments.get("fields", {}),
        partial=True,
        principal=request_principal(request),
    )
    if updated.record is None:
        return {"id": updated.id, "status": updated.status}
    return dict(s.RecordSerializer(updated.record).data)


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


def _timeline(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    record_id = _id(arguments)
    links = supersession.timeline(scope, record_id)
    return dict(s.TimelineSerializer({"record": record_id, "links": links}).data)


def _sources(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    return {"sources": records_service.summarize_sources(scope)}


# --- forget -----------------------------------------------------------------------------


def _forget(request: Request, scope: Scope, arguments: Arguments) -> dict[str, Any]:
    forget_request = forget_service.ForgetRequest.from_body(arguments)
    result = forget_service.forget(scope, forget_request, principal=request_principal(request))
    return s.forget_result(result)


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "memory_query",
            "Search the domain's memory (hybrid vector and keyword search by default). "
            "Returns the items, best first, and a grounding block to put in a prompt.",
            Action.READ,
            _declared(vocabulary.QueryBody, without=frozenset({"format"})),
            _query,
            read_only=True,
        ),
        Tool(
            "memory_write",
            "Remember items: each is a record of a knowledge base (default memory). A "
            "key makes it an upsert; identical content is deduplicated. Returns the "
            "accepted, refused and failed knowledge bases and the record ids.",
            Action.WRITE,
            _declared(vocabulary.WriteBody),
            _write,
        ),
        Tool(
            "memory_get",
            "One record by id.",
            Action.READ,
            _record_id,
            _get,
            read_only=True,
        ),
        Tool(
            "memory_update",
            "Change some fields of one record by id; the previous state stays in its history.",
            Action.UPDATE,
            _update_arguments,
            _update,
        ),
        Tool(
            "memory_history",
            "A record's versions, newest (its current state) first.",
            Action.READ,
            _record_id,
            _history,
            read_only=True,
        ),
        Tool(
            "memory_timeline",
            "A fact's timeline: what it superseded and what superseded it, oldest first, "
            "each with when it was valid.",
            Action.READ,
            _record_id,
            _timeline,
            read_only=True,
        ),
        Tool(
            "memory_forget",
            "Erase memory by namespace (a data subject), key or knowledge base. Needs "
            "the forget permission; returns the counts and the erasure's receipt id.",
            Action.FORGET,
            _declared(vocabulary.ForgetBody, without=frozenset({"all"})),
            _forget,
            destructive=True,
        ),
        Tool(
            "memory_sources",
            "The domain's knowledge bases: description, read-only flag, record count.",
            Action.READ,
            lambda: {"type": "object", "properties": {}},
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
    key = None if tool.read_only else arguments.pop(IDEMPOTENCY_ARGUMENT, None)
    declared = tool.arguments()
    unknown = sorted(set(arguments) - set(declared["properties"]))
    if unknown:
        raise ValidationFailed({name: [f"is not an argument of {tool.name}."] for name in unknown})
    missing = [name for name in declared.get("required", ()) if name not in arguments]
    if missing:
        raise ValidationFailed({name: ["This field is required."] for name in missing})
    if key is None:
        return jsonable(tool.run(request, scope, arguments))
    return _answered_once(request, scope, tool, arguments, key)


def _answered_once(
    request: Request, scope: Scope, tool: Tool, arguments: Arguments, key: Any
) -> dict[str, Any]:
    """A changing tool's call with an ``idempotency_key``: its first answer, kept in the
    transaction that acted and given again to the same call sent again
    (``services.idempotency``). A failure is not kept; what it recorded (a refusal's
    count) commits, and it is raised."""
    if not isinstance(key, str):
        raise ValidationFailed({IDEMPOTENCY_ARGUMENT: ["must be a string."]})
    try:
        idempotency.check_key(key)
    except ValidationFailed:
        raise ValidationFailed(
            {IDEMPOTENCY_ARGUMENT: ["must be 1 to 255 printable ASCII characters."]}
        ) from None
    failures: list[Exception] = []

    def act() -> idempotency.Answer:
        try:
            return idempotency.Answer(200, jsonable(tool.run(request, scope, arguments)))
        except DatabaseError:
            raise  # the transaction is lost: nothing to answer from inside it
        except Exception as exc:
            failures.append(exc)
            return idempotency.Answer(400, None)

    answer = idempotency.answer_once(
        scope,
        f"key:{calling_key(request).prefix}",
        key,
        idempotency.fingerprint("MCP", tool.name, canonical_json(arguments).encode()),
        act,
    )
    if failures:
        raise failures[0]
    return dict(answer.body)
