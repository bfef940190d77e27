"""The protocol revisions the endpoint serves, and how a message says which one it speaks.

``/mcp/`` serves both eras of MCP side by side (a "dual-era" server in the spec's words):

- **2026-07-28** (``MODERN_PROTOCOL_VERSIONS``): no handshake and no session. Every
  request carries its envelope in ``params._meta`` (the protocol version, the client's
  capabilities and, optionally, its name and version) and repeats the version in the
  ``MCP-Protocol-Version`` header, the method in ``Mcp-Method`` and, for ``tools/call``
  and ``resources/read``, the tool name or URI in ``Mcp-Name``. ``server/discover``
  names the versions served; ``initialize`` and ``ping`` do not exist at this revision.
- **2024-11-05 to 2025-11-25** (``HANDSHAKE_PROTOCOL_VERSIONS``): ``initialize`` first,
  then plain requests whose ``MCP-Protocol-Version`` header, when sent, names the
  negotiated revision. A request without the header is 2025-03-26, the spec's default
  for clients older than the header.

A request is read as 2026-07-28 when its header names anything but a handshake revision
or its ``_meta`` carries the envelope's protocol-version key; it then passes the spec's
checks in the order the official SDK runs them (``mcp.shared.inbound``; ``mcp`` itself
is only a test dependency here, and ``tests/mcp`` holds both to the same answers): the
envelope is there, the headers agree with the body, and the version is one served. A
failure is :class:`Rejected`, answered at HTTP 400. Every other request is the handshake
era and is served as it always was.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    DEFAULT_NEGOTIATED_VERSION,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorData,
    Implementation,
    UnsupportedProtocolVersionErrorData,
)
from mcp_types import methods as protocol_methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

__all__ = [
    "HTTP_STATUS",
    "METHOD_HEADER",
    "NAME_HEADER",
    "SERVED_VERSIONS",
    "VERSION_HEADER",
    "Rejected",
    "Revision",
    "read_request",
    "refuse_message",
    "unsupported",
]

#: Every version served, newest first: what ``server/discover`` and an unsupported
#: version's error name.
SERVED_VERSIONS: Final[tuple[str, ...]] = (
    *reversed(MODERN_PROTOCOL_VERSIONS),
    *reversed(HANDSHAKE_PROTOCOL_VERSIONS),
)

VERSION_HEADER: Final = "MCP-Protocol-Version"
METHOD_HEADER: Final = "Mcp-Method"
NAME_HEADER: Final = "Mcp-Name"

#: The methods whose ``Mcp-Name`` header repeats a parameter, and that parameter.
NAMED_PARAMETER: Final[Mapping[str, str]] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
}

#: The HTTP status of a 2026-07-28 JSON-RPC error, by code (the spec's: a bad request is
#: 400, an unknown method 404); other codes are answered at 200.
HTTP_STATUS: Final[Mapping[int, int]] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}

#: What a 2026-07-28 request's ``params._meta`` must hold (the client's name is optional).
ENVELOPE_KEYS: Final = (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY)

_BASE64_SENTINEL = re.compile(r"=\?base64\?(?P<payload>.*)\?=")


class Rejected(Exception):
    """A request its revision refuses before any method runs (answered at HTTP 400)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.error = ErrorData(code=code, message=message, data=data)


@dataclass(frozen=True)
class Revision:
    """The protocol version a request speaks."""

    version: str

    @property
    def modern(self) -> bool:
        """Whether this is the per-request envelope era (no handshake, no session)."""
        return self.version in MODERN_PROTOCOL_VERSIONS

    def serves(self, method: str) -> bool:
        """Whether ``method`` exists at this revision (``ping`` and ``initialize`` are
        gone at 2026-07-28, ``server/discover`` is new)."""
        return (method, self.version) in protocol_methods.CLIENT_REQUESTS

    def status(self, code: int) -> int:
        """The HTTP status of a JSON-RPC error with ``code``: the handshake era answers
        a method's failure at 200, 2026-07-28 at the status the spec gives the code."""
        return HTTP_STATUS.get(code, 200) if self.modern else 200

    def shape(self, method: str, result: BaseModel, server: Implementation) -> dict[str, Any]:
        """``result`` as this revision's schema has it on the wire: fields the revision
        does not define dropped, and at 2026-07-28 the ``server``'s name and version in
        ``_meta`` (which the spec asks of every answer)."""
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        shaped = protocol_methods.serialize_server_result(method, self.version, dumped)
        if self.modern:
            identity = server.model_dump(by_alias=True, mode="json", exclude_none=True)
            shaped["_meta"] = {**shaped.get("_meta", {}), SERVER_INFO_META_KEY: identity}
        return shaped


def unsupported(requested: str) -> Rejected:
    """The answer to a version not served, naming those that are."""
    data = UnsupportedProtocolVersionErrorData(supported=list(SERVED_VERSIONS), requested=requested)
    return Rejected(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version; this server speaks {', '.join(SERVED_VERSIONS)}.",
        data.model_dump(mode="json"),
    )


def _mismatch(header: str, field: str) -> Rejected:
    detail = f"The {header} header must be sent and equal {field}."
    body = {"code": "header_mismatch", "detail": detail, "errors": {header: [detail]}}
    return Rejected(HEADER_MISMATCH, detail, body)


def _envelope_missing(keys: list[str]) -> Rejected:
    detail = "A 2026-07-28 request carries its envelope in params._meta."
    errors = {f"params._meta.{key}": ["This field is required."] for key in keys}
    body = {"code": "invalid", "detail": detail, "errors": errors}
    return Rejected(INVALID_PARAMS, detail, body)


def _decoded(value: str | None) -> str | None:
    """A header value with the spec's ``=?base64?…?=`` sentinel decoded; ``None`` for
    a sentinel that is not canonical base64 of UTF-8 (it matches no body value)."""
    if value is None:
        return None
    match = _BASE64_SENTINEL.fullmatch(value)
    if match is None:
        return value
    payload = match["payload"]
    try:
        raw = base64.b64decode(payload, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return text if base64.b64encode(raw).decode("ascii") == payload else None


def read_request(message: Mapping[str, Any], headers: Mapping[str, str]) -> Revision:
    """The revision of a request (a message with ``method`` and ``id``).

    Raises :class:`Rejected` for a 2026-07-28 request without its envelope, with headers
    that disagree with its body, or for a version not served.
    """
    header = headers.get(VERSION_HEADER)
    params = message.get("params") or {}
    meta = params.get("_meta")
    enveloped = isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta
    if not enveloped:
        if header is None:
            return Revision(DEFAULT_NEGOTIATED_VERSION)
        if header in HANDSHAKE_PROTOCOL_VERSIONS:
            return Revision(header)
        if header not in MODERN_PROTOCOL_VERSIONS:
            raise unsupported(header)
    if not isinstance(meta, Mapping):
        raise _envelope_missing(list(ENVELOPE_KEYS))
    missing = [key for key in ENVELOPE_KEYS if key not in meta]
    if missing:
        raise _envelope_missing(missing)
    version = meta[PROTOCOL_VERSION_META_KEY]
    # Header against body before the version is judged, so that a client contradicting
    # itself is told so rather than told its body's version is not served.
    if header is None or header != version:
        raise _mismatch(VERSION_HEADER, f"params._meta's {PROTOCOL_VERSION_META_KEY}")
    method = message["method"]
    if headers.get(METHOD_HEADER) != method:
        raise _mismatch(METHOD_HEADER, "method")
    named = NAMED_PARAMETER.get(method)
    named_value = params.get(named) if named is not None else None
    if named_value is not None and _decoded(headers.get(NAME_HEADER)) != named_value:
        raise _mismatch(NAME_HEADER, f"params.{named}")
    if version not in MODERN_PROTOCOL_VERSIONS:
        raise unsupported(version)
    return Revision(version)


def refuse_message(message: Mapping[str, Any], headers: Mapping[str, str]) -> Rejected | None:
    """Why a notification or a client's response is refused, or ``None`` to accept it.

    Either is accepted (``202``) at every version served; a version not served is told
    which are. A client's response at 2026-07-28 is refused: there are no server
    requests for it to answer.
    """
    header = headers.get(VERSION_HEADER)
    if header is not None and header not in SERVED_VERSIONS:
        return unsupported(header)
    if "method" not in message and header in MODERN_PROTOCOL_VERSIONS:
        return Rejected(INVALID_REQUEST, "At 2026-07-28 a client sends no responses.")
    return None
