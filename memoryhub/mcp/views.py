"""The MCP endpoint: JSON-RPC over Streamable HTTP, stateless, in one WSGI view.

A POST carries one JSON-RPC 2.0 message. A request is answered with one
``application/json`` JSON-RPC response (no server-sent events: nothing here streams); a
notification or a client's response is acknowledged with ``202``. A body that is empty
or not JSON, or gives a key twice, is a parse error (-32700); a batch, another
``jsonrpc`` version or a message that is neither a request, a notification nor a
response is an invalid request (-32600); both at HTTP 400. Every error names the
request's id when the body has one, those raised before the body is read (a bad key, a
throttle) too. There are no sessions, so no ``Mcp-Session-Id``, and GET (the
server-to-client stream) and DELETE are ``405``.

Two protocol eras are served (``revisions``): 2026-07-28, where every request carries
its version and the client's capabilities in ``params._meta`` and ``server/discover``
replaces the handshake, and the ``initialize`` handshake of 2024-11-05 to 2025-11-25.
Each request is answered in its own revision's shapes; at 2026-07-28 a protocol error
is answered at the HTTP status the spec gives its code (400, or 404 for an unknown
method), in the handshake era at 200.

The exchange is a REST API request in every way that matters: the same API keys
(``Authorization: Api-Key <key>`` or ``Bearer <key>``, which MCP clients send), the same
per-key throttle and failed-authentication limit, bounded JSON bodies, the access log
with the key's org and prefix. Its failures (401, 413, 429) are JSON-RPC errors whose
``data`` is the REST API's ``{code, detail}`` body, at the same HTTP status.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any

from django.http import HttpResponse, JsonResponse
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    CallToolRequestParams,
    CallToolResult,
    DiscoverResult,
    EmptyResult,
    ErrorData,
    Implementation,
    InitializeRequestParams,
    InitializeResult,
    JSONRPCError,
    JSONRPCResponse,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    ReadResourceRequestParams,
    ReadResourceResult,
    ResourcesCapability,
    ServerCapabilities,
    TextContent,
    ToolsCapability,
)
from mcp_types import methods as protocol_methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError
from rest_framework import exceptions, permissions
from rest_framework.request import Request

from tenants.models import ApiKey, Domain

from .. import boundary
from ..api.authentication import ApiKeyAuthentication
from ..api.parsers import BoundedJSONParser
from ..api.views import MemoryAPIView
from . import resources, revisions, tools
from .errors import RESOURCE_NOT_FOUND, jsonrpc_code, rest_error
from .revisions import Revision

__all__ = ["McpKeyAuthentication", "McpView"]

logger = logging.getLogger(__name__)

SERVER_NAME = "memoryhub"
INSTRUCTIONS = (
    "Long-term memory shared by agents. Call memory_query before answering to ground "
    "the answer in what is known, and memory_write to remember what you learn; "
    'namespaces keep a data subject\'s memory apart ("user:alice"), "" is shared. '
    "Tool failures carry a code (invalid, permission_denied, domain_not_found, "
    "record_not_found, write_refused, ...) and, for invalid input, errors per field."
)


class McpKeyAuthentication(ApiKeyAuthentication):
    """An API key as ``Api-Key <key>`` or ``Bearer <key>``; the caller acts as
    ``mcp:<prefix>``."""

    keywords = ("Api-Key", "Bearer")
    door = "mcp"

    def authenticate_header(self, request: Request) -> str:
        return 'Api-Key realm="mcp"'


class McpJSONParser(BoundedJSONParser):
    """The REST API's bounded JSON, with lone surrogates left for the view to refuse
    once it knows the request's id."""

    refuse_surrogates = False


class HasApiKey(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, ApiKey)


class _Failure(Exception):
    """A JSON-RPC error answer to the request being handled."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.error = ErrorData(code=code, message=message, data=data)


def _error(request_id: Any, error: ErrorData, status: int = 200) -> JsonResponse:
    body = JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
    return JsonResponse(body.model_dump(by_alias=True, mode="json"), status=status)


def _valid_id(value: Any) -> int | str | None:
    """A request id as MCP allows it (a string or an integer, never null), else None."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return value


def _framing_problem(message: dict[str, Any]) -> str | None:
    """What makes ``message`` no JSON-RPC 2.0 request, notification or response, or None.

    A request has a ``method`` (a string), an ``id`` (a string or an integer) and maybe
    ``params`` (an object); a notification is a request without an ``id``; a response
    has an ``id`` and exactly one of ``result`` and ``error``.
    """
    if message.get("jsonrpc") != "2.0":
        return 'Invalid request: "jsonrpc" must be "2.0".'
    if "method" in message:
        if not isinstance(message["method"], str):
            return 'Invalid request: "method" must be a string.'
        if not isinstance(message.get("params"), dict | None):
            return 'Invalid request: "params" must be an object.'
        if "id" in message and _valid_id(message["id"]) is None:
            return 'Invalid request: "id" must be a string or an integer.'
        return None
    if _valid_id(message.get("id")) is None or ("result" in message) == ("error" in message):
        return "Invalid request: neither a request, a notification nor a response."
    return None


def _invalid_params(exc: ValidationError) -> _Failure:
    errors = {
        ".".join(str(part) for part in error["loc"]) or "params": [error["msg"]]
        for error in exc.errors()
    }
    body = {"code": "invalid", "detail": "The request is invalid; see errors.", "errors": errors}
    return _Failure(INVALID_PARAMS, "Invalid params.", body)


class McpView(MemoryAPIView):
    """``POST /mcp/``: one JSON-RPC message in, one out."""

    authentication_classes = [McpKeyAuthentication]
    permission_classes = [HasApiKey]
    parser_classes = [McpJSONParser]
    schema = None  # not part of the REST API's OpenAPI schema

    def get_authenticators(self) -> list[Any]:
        return [McpKeyAuthentication()]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        if request.method != "POST":  # no stream to open and no session to end
            raise exceptions.MethodNotAllowed(str(request.method))
        super().initial(request, *args, **kwargs)

    def handle_exception(self, exc: Exception) -> HttpResponse:  # type: ignore[override]
        status, body, headers = rest_error(exc, self.request)
        error = ErrorData(code=jsonrpc_code(status, body), message=body["detail"], data=body)
        response = _error(self._request_id(), error, status)
        for name, value in headers.items():
            response[name] = value
        if status == 401:
            response["WWW-Authenticate"] = McpKeyAuthentication().authenticate_header(self.request)
        if status == 405:
            response["Allow"] = "POST"
        return response

    def _request_id(self) -> Any:
        """The id of the request being answered, when its body reads as one: a bad key
        or a throttle is raised before the body is parsed, and its error still names
        the request it answers. (An unreadable body has no id to name.)"""
        try:
            message = self.request.data
        except Exception:
            return None
        return _valid_id(message.get("id")) if isinstance(message, dict) else None

    def post(self, request: Request) -> HttpResponse:
        if request.stream is None:  # an empty body is no message, not a notification
            return _error(
                None,
                ErrorData(code=PARSE_ERROR, message="The body is empty: send a JSON-RPC message."),
                400,
            )
        message = request.data
        if not isinstance(message, dict):
            return _error(
                None,
                ErrorData(
                    code=INVALID_REQUEST,
                    message="One JSON-RPC message, an object, per request (no batches).",
                ),
                400,
            )
        request_id = _valid_id(message.get("id"))
        problem = _framing_problem(message)
        if problem is not None:
            return _error(request_id, ErrorData(code=INVALID_REQUEST, message=problem), 400)
        if "method" not in message or "id" not in message:  # a notification, or a response
            refused = revisions.refuse_message(message, request.headers)
            if refused is not None:
                return _error(None, refused.error, 400)
            return HttpResponse(status=202)
        request_id = message["id"]  # a string or an integer: the framing said so
        method = message["method"]
        params = message.get("params")
        try:
            revision = revisions.read_request(message, request.headers)
        except revisions.Rejected as rejected:
            self._log(method, params, rejected.error, None)
            return _error(request_id, rejected.error, 400)
        surrogate = boundary.surrogate_path(params)
        if surrogate is not None:
            body = {
                "code": "invalid",
                "detail": "The request is invalid; see errors.",
                "errors": {surrogate: [boundary.UNPAIRED_SURROGATE]},
            }
            return _error(
                request_id,
                ErrorData(code=INVALID_PARAMS, message="Invalid params.", data=body),
                revision.status(INVALID_PARAMS),
            )
        handler = METHODS.get(method) if revision.serves(method) else None
        if handler is None:
            unknown = ErrorData(code=METHOD_NOT_FOUND, message=f"Unknown method {method}.")
            return _error(request_id, unknown, revision.status(METHOD_NOT_FOUND))
        try:
            if revision.modern:
                _check_params(method, revision, params)
            result = handler(Call(request, params or {}, revision))
        except _Failure as failure:
            self._log(method, params, failure.error, revision)
            return _error(request_id, failure.error, revision.status(failure.error.code))
        self._log(method, params, result, revision)
        shaped = revision.shape(method, result, _server_info())
        envelope = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=shaped)
        return JsonResponse(envelope.model_dump(by_alias=True, mode="json"))

    @staticmethod
    def _log(
        method: str, params: dict[str, Any] | None, outcome: Any, revision: Revision | None
    ) -> None:
        """One line per call: the method, the tool, the error code if it failed and the
        protocol version (metadata only: never arguments or results)."""
        code = "ok"
        if isinstance(outcome, CallToolResult) and outcome.is_error:
            code = (outcome.structured_content or {}).get("code", "error")
        elif isinstance(outcome, ErrorData):
            data = outcome.data if isinstance(outcome.data, dict) else {}
            code = str(data.get("code", outcome.code))
        tool = (params or {}).get("name") if method == "tools/call" else None
        tool = tool if isinstance(tool, str) else None
        logger.info(
            "mcp %s %s %s",
            method,
            tool or "-",
            code,
            extra={
                "mcp_method": method,
                "tool": tool,
                "outcome": code,
                "protocol_version": revision.version if revision else None,
            },
        )


# --- methods ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A request to a method: the HTTP request (its key), its params, its revision."""

    request: Request
    params: dict[str, Any]
    revision: Revision


def _check_params(method: str, revision: Revision, params: dict[str, Any] | None) -> None:
    """Refuse params that are not of ``method``'s shape at ``revision`` (its envelope
    in ``_meta`` included) as invalid params naming the field."""
    try:
        protocol_methods.validate_client_request(method, revision.version, params)
    except ValidationError as exc:
        raise _invalid_params(exc) from None


def _server_info() -> Implementation:
    """This server's name and version, as ``initialize`` and every 2026-07-28 answer
    give them."""
    try:
        server_version = package_version("django-memoryhub")
    except PackageNotFoundError:  # running from a checkout that is not installed
        server_version = "0"
    return Implementation(name=SERVER_NAME, version=server_version)


def _capabilities() -> ServerCapabilities:
    return ServerCapabilities(
        tools=ToolsCapability(list_changed=False),
        resources=ResourcesCapability(subscribe=False, list_changed=False),
    )


def _initialize(call: Call) -> InitializeResult:
    try:
        asked = InitializeRequestParams.model_validate(call.params)
    except ValidationError as exc:
        raise _invalid_params(exc) from None
    version = asked.protocol_version
    if version not in HANDSHAKE_PROTOCOL_VERSIONS:
        version = LATEST_HANDSHAKE_VERSION
    return InitializeResult(
        protocol_version=version,
        capabilities=_capabilities(),
        server_info=_server_info(),
        instructions=INSTRUCTIONS,
    )


def _discover(call: Call) -> DiscoverResult:
    return DiscoverResult(
        supported_versions=list(revisions.SERVED_VERSIONS),
        capabilities=_capabilities(),
        instructions=INSTRUCTIONS,
    )


def _ping(call: Call) -> EmptyResult:
    return EmptyResult()


def _schema_domains(request: Request) -> list[str] | None:
    """``None`` for a domain-bound key (the domain is implied), else its org's slugs."""
    api_key = tools.calling_key(request)
    if api_key.domain is not None:
        return None

    return list(
        Domain.objects.filter(org_id=api_key.org_id).order_by("slug").values_list("slug", flat=True)
    )


def _list_tools(call: Call) -> ListToolsResult:
    return ListToolsResult(tools=tools.describe(_schema_domains(call.request)))


def _call_tool(call: Call) -> CallToolResult:
    try:
        asked = CallToolRequestParams.model_validate(call.params)
    except ValidationError as exc:
        raise _invalid_params(exc) from None
    tool = tools.TOOLS.get(asked.name)
    if tool is None:
        raise _Failure(INVALID_PARAMS, f"Unknown tool {asked.name}.")
    try:
        result = tools.call(call.request, tool, asked.arguments or {})
    except Exception as exc:
        _, body, _ = rest_error(exc, call.request)
        failure = tools.jsonable(body)
        return CallToolResult(
            content=[TextContent(text=json.dumps(failure))],
            structured_content=failure,
            is_error=True,
        )
    return CallToolResult(content=[TextContent(text=json.dumps(result))], structured_content=result)


def _resource_failure(exc: Exception, call: Call, uri: str | None = None) -> _Failure:
    status, body, _ = rest_error(exc, call.request)
    code, data = jsonrpc_code(status, body), tools.jsonable(body)
    if code == RESOURCE_NOT_FOUND and call.revision.modern:
        # 2026-07-28 retired -32002: a resource not found is invalid params, naming the URI.
        code = INVALID_PARAMS
        data = {**data, "uri": uri} if uri is not None else data
    return _Failure(code, str(body["detail"]), data)


def _list_resources(call: Call) -> ListResourcesResult:
    try:
        return ListResourcesResult(resources=resources.list_resources(call.request))
    except Exception as exc:
        raise _resource_failure(exc, call) from None


def _list_templates(call: Call) -> ListResourceTemplatesResult:
    return ListResourceTemplatesResult(resource_templates=resources.templates())


def _read_resource(call: Call) -> ReadResourceResult:
    try:
        asked = ReadResourceRequestParams.model_validate(call.params)
    except ValidationError as exc:
        raise _invalid_params(exc) from None
    uri = str(asked.uri)
    try:
        return ReadResourceResult(contents=list(resources.read(call.request, uri)))
    except Exception as exc:
        raise _resource_failure(exc, call, uri) from None


#: Every method served; which exist at a request's revision is the protocol's table
#: (``Revision.serves``).
METHODS = {
    "initialize": _initialize,
    "server/discover": _discover,
    "ping": _ping,
    "tools/list": _list_tools,
    "tools/call": _call_tool,
    "resources/list": _list_resources,
    "resources/templates/list": _list_templates,
    "resources/read": _read_resource,
}
