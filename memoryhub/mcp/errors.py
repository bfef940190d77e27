"""Failures as the REST API words them, carried by MCP.

:func:`rest_error` asks the REST API's exception handler, so an MCP caller gets the same
``{code, detail, errors?}`` body (and the status it stands for) as a REST caller would for
the same failure. A tool's failure travels in its result (``isError``); a failure of the
exchange itself (authentication, throttling, a body too large, an unreadable resource)
is a JSON-RPC error whose ``data`` is that body.
"""

from __future__ import annotations

from typing import Any

from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR
from rest_framework import status

from ..api.exceptions import exception_handler

__all__ = [
    "AUTHENTICATION_FAILED",
    "FORBIDDEN",
    "RESOURCE_NOT_FOUND",
    "SERVICE_UNAVAILABLE",
    "THROTTLED",
    "TOO_LARGE",
    "jsonrpc_code",
    "rest_error",
]

# JSON-RPC codes of the implementation-defined band (-32000..-32019); the SDK itself
# uses -32000 and -32001.
AUTHENTICATION_FAILED = -32010
FORBIDDEN = -32011
THROTTLED = -32012
TOO_LARGE = -32013
SERVICE_UNAVAILABLE = -32014
#: "Resource not found" of protocol revisions up to 2025-11-25.
RESOURCE_NOT_FOUND = -32002

_CODES = {
    status.HTTP_400_BAD_REQUEST: INVALID_PARAMS,
    status.HTTP_401_UNAUTHORIZED: AUTHENTICATION_FAILED,
    status.HTTP_403_FORBIDDEN: FORBIDDEN,
    status.HTTP_404_NOT_FOUND: RESOURCE_NOT_FOUND,
    status.HTTP_405_METHOD_NOT_ALLOWED: INVALID_REQUEST,
    status.HTTP_411_LENGTH_REQUIRED: INVALID_REQUEST,
    status.HTTP_413_REQUEST_ENTITY_TOO_LARGE: TOO_LARGE,
    status.HTTP_415_UNSUPPORTED_MEDIA_TYPE: INVALID_REQUEST,
    status.HTTP_429_TOO_MANY_REQUESTS: THROTTLED,
    status.HTTP_503_SERVICE_UNAVAILABLE: SERVICE_UNAVAILABLE,
}


def rest_error(exc: Exception, request: Any = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """``(status, body, headers)`` of the REST API's answer to ``exc``."""
    response = exception_handler(exc, {"request": request, "view": None})
    assert response is not None  # the handler answers everything, unexpected errors too
    headers = {
        name: response[name] for name in ("Retry-After", "WWW-Authenticate") if name in response
    }
    return response.status_code, dict(response.data), headers


def jsonrpc_code(status_code: int, body: dict[str, Any]) -> int:
    """The JSON-RPC error code of a REST answer (a body that is not JSON: parse error)."""
    if body.get("code") == "parse_error":
        return PARSE_ERROR
    return _CODES.get(status_code, INTERNAL_ERROR)
