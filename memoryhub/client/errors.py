"""What the client raises when the server answers with an error status.

Every error is an :class:`HttpMemoryError` (``status``, the JSON ``code``, ``detail``,
``errors``). Where the server says what memoryhub's domain errors say in process, the
error is that domain error too (:mod:`memoryhub.exceptions`), so one ``except`` serves a
local and a remote memory alike: a read-only knowledge base's refusal is
``WriteRefused``, a knowledge base the domain lacks ``UnknownSource``, invalid input
``ValidationFailed``, and a key without the permission (403 ``permission_denied``)
``PolicyDenied``. Anything else (401, a domain the key cannot see: 404, 429, 5xx) is a
plain ``HttpMemoryError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from ..exceptions import PolicyDenied, UnknownSource, ValidationFailed, WriteRefused

__all__ = [
    "HttpMemoryError",
    "HttpPolicyDenied",
    "HttpUnknownSource",
    "HttpValidationFailed",
    "HttpWriteRefused",
    "error_for",
]


class HttpMemoryError(RuntimeError):
    """The API answered with an error (``status`` and its JSON ``code``)."""

    def __init__(self, status: int, code: str, detail: str, errors: Any = None) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.errors = errors
        super().__init__(f"HTTP {status} {code}: {detail}{_summary(errors)}")


#: How much of the per-field errors a message repeats (``errors`` holds them all).
SUMMARY_LENGTH = 300


def _summary(errors: Any) -> str:
    """`` (field: what is wrong; ...)``: a traceback shows which field without ``.errors``."""
    if not isinstance(errors, dict) or not errors:
        return ""
    parts = []
    for field, messages in errors.items():
        said = " ".join(map(str, messages)) if isinstance(messages, list) else str(messages)
        parts.append(f"{field}: {said}")
    text = "; ".join(parts)
    if len(text) > SUMMARY_LENGTH:
        text = text[: SUMMARY_LENGTH - 3] + "..."
    return f" ({text})"


class HttpWriteRefused(HttpMemoryError, WriteRefused):
    """403 ``write_refused``: a read-only knowledge base refused the write (``source``,
    ``n``)."""


class HttpUnknownSource(HttpMemoryError, UnknownSource):
    """400 ``unknown_source``: the domain has no knowledge base of that ``name``."""


class HttpValidationFailed(HttpMemoryError, ValidationFailed):
    """400: the server rejected the input; ``errors`` names each field."""


class HttpPolicyDenied(HttpMemoryError, PolicyDenied):
    """403 ``permission_denied``: the API key lacks the permission for ``action``."""


def error_for(response: httpx.Response, *, sources: Sequence[str], action: str) -> HttpMemoryError:
    """The error for an error ``response`` to a call that named the knowledge bases
    ``sources`` and needed the permission ``action`` (a ``memoryhub.policy.Action``
    value): those fill in what the server's body leaves out."""
    try:
        payload = response.json()
    except ValueError:
        payload = {}
    if not isinstance(payload, dict):
        payload = {}
    status = response.status_code
    code = str(payload.get("code", "error"))
    detail = str(payload.get("detail", response.text[:200]))
    errors = payload.get("errors")
    error: HttpMemoryError
    if status == 403 and code == "write_refused":
        error = HttpWriteRefused(status, code, detail, errors)
        error.source = str(payload.get("source", sources[0] if sources else ""))
        error.n = int(payload.get("n", 0))
    elif status == 403 and code == "permission_denied":
        error = HttpPolicyDenied(status, code, detail, errors)
        error.action = action
    elif status == 400 and code == "unknown_source":
        error = HttpUnknownSource(status, code, detail, errors)
        # The body names the knowledge base only in its message: one the call named.
        named = [name for name in sources if repr(name) in detail] or [*sources, ""]
        error.name = named[0]
    elif status == 400 and isinstance(errors, dict) and errors:
        error = HttpValidationFailed(status, code, detail, errors)
    else:
        error = HttpMemoryError(status, code, detail, errors)
    return error
