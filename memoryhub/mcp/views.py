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

The exchange is a REST API request in every way that matters: the same API keys
(``Authorization: Api-Key <key>`` or ``Bearer <key>``, which MCP clients send), the same
per-key throttle and failed-authentication limit, bounded JSON bodies, the access log
with the key's org and prefix. Its failures (401, 413, 429) are JSON-RPC errors whose
``data`` is the REST API's ``{code, detail}`` body, at the same HTTP status.
"""

from __future__ import annotations

import json
import logging
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
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from pydantic import BaseModel, ValidationError
from rest_framework import exceptions, permissions
from rest_framework.request import Request

from tenants.models import ApiKey, Domain

from .. import boundary
from ..api.authentication import ApiKeyAuthentication
from ..api.parsers import BoundedJSONParser
from ..api.views import MemoryAPIView
from . import resources, tools
from .errors import jsonrpc_code, rest_error

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


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


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
        if "method" not in message or "id" not in message:
            return HttpResponse(status=202)  # a notification, or a client's response
        request_id = message["id"]  # a string or an integer: the framing said so
        method = message["method"]
        params = message.get("params")
        surrogate = boundary.surrogate_path(params)
        if surrogate is not None:
            body = {
                "code": "invalid",
                "detail": "The request is invalid; see errors.",
                "errors": {surrogate: [boundary.UNPAIRED_SURROGATE]},
            }
            return _error(
                request_id, ErrorData(code=INVALID_PARAMS, message="Invalid params.", data=body)
            )
        handler = METHODS.get(method)
        if handler is None:
            return _error(
                request_id, ErrorData(code=METHOD_NOT_FOUND, message=f"Unknown method {method}.")
            )
        try:
            result = handler(request, params or {})
        except _Failure as failure:
            self._log(method, params, failure.error)
            return _error(request_id, failure.error)
        self._log(method, params, result)
        envelope = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=_dump(result))
        return JsonResponse(envelope.model_dump(by_alias=True, mode="json"))

    @staticmethod
    def _log(method: str, params: dict[str, Any] | None, outcome: Any) -> None:
        """One line per call: the method, the tool, and the error code if it failed
        (metadata only: never arguments or results)."""
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
            extra={"mcp_method": method, "tool": tool, "outcome": code},
        )


# --- methods ------------------------------------------------------------------------------


def _initialize(request: Request, params: dict[str, Any]) -> InitializeResult:
    try:
        asked = InitializeRequestParams.model_validate(params)
    except ValidationError as exc:
        raise _invalid_params(exc) from None
    version = asked.protocol_version
    if version not in HANDSHAKE_PROTOCOL_VERSIONS:
        version = LATEST_HANDSHAKE_VERSION
    try:
        server_version = package_version("django-memoryhub")
    except PackageNotFoundError:  # running from a checkout that is not installed
        server_version = "0"
    return InitializeResult(
        protocol_version=version,
        capabilities=ServerCapabilities(
            tools=ToolsCapability(list_changed=False),
            resources=ResourcesCapability(subscribe=False, list_changed=False),
        ),
        server_info=Implementation(name=SERVER_NAME, version=server_version),
        instructions=INSTRUCTIONS,
    )


def _ping(request: Request, params: dict[str, Any]) -> EmptyResult:
    return EmptyResult()


def _schema_domains(request: Request) -> list[str] | None:
    """``None`` for a domain-bound key (the domain is implied), else its org's slugs."""
    api_key = tools.calling_key(request)
    if api_key.domain is not None:
        return None

    return list(
        Domain.objects.filter(org_id=api_key.org_id).order_by("slug").values_list("slug", flat=True)
    )


def _list_tools(request: Request, params: dict[str, Any]) -> ListToolsResult:
    return ListToolsResult(tools=tools.describe(_schema_domains(request)))


def _call_tool(request: Request, params: dict[str, Any]) -> CallToolResult:
    try:
        asked = CallToolRequestParams.model_validate(params)
    except ValidationError as exc:
        raise _invalid_params(exc) from None
    tool = tools.TOOLS.get(asked.name)
    if tool is None:
        raise _Failure(INVALID_PARAMS, f"Unknown tool {asked.name}.")
    try:
        result = tools.call(request, tool, asked.arguments or {})
    except Exception as exc:
        _, body, _ = rest_error(exc, request)
        failure = tools.jsonable(body)
        return CallToolResult(
            content=[TextContent(text=json.dumps(failure))],
            structured_content=failure,
            is_error=True,
        )
    return CallToolResult(content=[TextContent(text=json.dumps(result))], structured_content=result)


def _resource_failure(exc: Exception, request: Request) -> _Failure:
    status, body, _ = rest_error(exc, request)
    return _Failure(jsonrpc_code(status, body), str(body["detail"]), tools.jsonable(body))


def _list_resources(request: Request, params: dict[str, Any]) -> ListResourcesResult:
    try:
        return ListResourcesResult(resources=resources.list_resources(request))
    except Exception as exc:
        raise _resource_failure(exc, request) from None


def _list_templates(request: Request, params: dict[str, Any]) -> ListResourceTemplatesResult:
    return ListResourceTemplatesResult(resource_templates=resources.templates())


def _read_resource(request: Request, params: dict[str, Any]) -> ReadResourceResult:
    try:
        asked = ReadResourceRequestParams.model_validate(params)
    except ValidationError as exc:
        raise _invalid_params(exc) from None
    try:
        return ReadResourceResult(contents=list(resources.read(request, str(asked.uri))))
    except Exception as exc:
        raise _resource_failure(exc, request) from None


METHODS = {
    "initialize": _initialize,
    "ping": _ping,
    "tools/list": _list_tools,
    "tools/call": _call_tool,
    "resources/list": _list_resources,
    "resources/templates/list": _list_templates,
    "resources/read": _read_resource,
}
