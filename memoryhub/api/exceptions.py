"""Errors as stable JSON: ``{"code", "detail", "errors"?}``, with precise status codes.

Domain exceptions from the services map here: ``ValidationFailed`` (and ``FilterError``)
→ 400 with ``errors`` naming each field, ``UnknownSource`` → 400, ``WriteRefused`` → 403
``{"code": "write_refused", "source", "n"}``, ``PolicyDenied`` → 403
``permission_denied``, ``RecordNotFound`` → 404, an ``Idempotency-Key`` sent before
with another request → 422, a body Django finds too big → 413, a database that cannot
be reached or that cancelled a transaction (a deadlock, a shard being moved; run again
in the service first) → 503. Every 400 carries ``errors`` (an unparsable body under
``non_field_errors``). Anything unexpected is logged and answered as JSON too.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .. import metrics
from ..exceptions import (
    PolicyDenied,
    RecordNotFound,
    UnknownSource,
    ValidationFailed,
    WriteRefused,
)
from ..scope import ScopeRequired
from ..services.idempotency import HEADER, IdempotencyKeyReused
from ..services.store.transient import is_transient
from .parsers import RequestTooLarge

logger = logging.getLogger(__name__)


def _first_code(codes: Any) -> str:
    if isinstance(codes, str):
        return codes
    if isinstance(codes, list) and codes:
        return _first_code(codes[0])
    if isinstance(codes, dict) and codes:
        return _first_code(next(iter(codes.values())))
    return "error"


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error details as ``{"path": ["message", ...]}``."""
    if isinstance(detail, dict):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            flat.update(_flatten(value, path))
        return flat
    if isinstance(detail, list) and detail and all(not isinstance(v, dict | list) for v in detail):
        return {prefix or "non_field_errors": [str(v) for v in detail]}
    if isinstance(detail, list):
        flat = {}
        for index, value in enumerate(detail):
            flat.update(_flatten(value, f"{prefix}[{index}]"))
        return flat
    return {prefix or "non_field_errors": [str(detail)]}


def _body(code: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"code": code, "detail": detail, **extra}


#: The refusals before any work that metrics count, by reason.
REFUSAL_REASONS: tuple[tuple[type[exceptions.APIException], str], ...] = (
    (exceptions.NotAuthenticated, "authentication"),
    (exceptions.AuthenticationFailed, "authentication"),
    (exceptions.Throttled, "throttled"),
    (exceptions.PermissionDenied, "permission"),
)


def _count_refusal(exc: Exception, context: dict[str, Any]) -> None:
    request = context.get("request")
    for kind, reason in REFUSAL_REASONS:
        if isinstance(exc, kind) and request is not None:
            metrics.observe_refusal(request, reason)
            return


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:  # noqa: C901
    if isinstance(exc, ValidationFailed):
        return Response(
            _body(exc.code, "The request is invalid; see errors.", errors=exc.errors),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, UnknownSource):
        return Response(
            _body(exc.code, str(exc), errors={"sources": [str(exc)]}),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, WriteRefused):
        return Response(
            _body(exc.code, str(exc), source=exc.source, n=exc.n),
            status=status.HTTP_403_FORBIDDEN,
        )
    if isinstance(exc, IdempotencyKeyReused):
        return Response(
            _body(exc.code, str(exc), errors={HEADER: [str(exc)]}),
            status=status.HTTP_422_UNPROCESSABLE_ENTITY,
        )
    if isinstance(exc, RecordNotFound):
        exc = exceptions.NotFound("No such record.", code="record_not_found")
    elif isinstance(exc, PolicyDenied):
        exc = exceptions.PermissionDenied(str(exc), code=exc.code)
    elif isinstance(exc, ScopeRequired):
        exc = exceptions.PermissionDenied(str(exc), code="scope_required")
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = RequestTooLarge()
    elif is_transient(exc):
        logger.warning("transaction cancelled by the database: %s", type(exc).__name__)
        return Response(
            _body("service_unavailable", "The database cancelled the request; retry it."),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "1"},
        )
    elif isinstance(exc, OperationalError | InterfaceError):
        logger.warning("database unavailable: %s", type(exc).__name__)
        return Response(
            _body("service_unavailable", "The database is unavailable; retry shortly."),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "5"},
        )
    _count_refusal(exc, context)
    response = drf_exception_handler(exc, context)
    if response is None:
        logger.exception("unhandled error in the API", exc_info=exc)
        return Response(
            _body("server_error", "An unexpected error occurred."),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    assert isinstance(exc, exceptions.APIException)
    if isinstance(exc, exceptions.ValidationError):
        response.data = _body(
            "invalid", "The request is invalid; see errors.", errors=_flatten(exc.detail)
        )
    elif isinstance(exc, exceptions.ParseError):
        # Every 400 names what is wrong; an unreadable body is wrong as a whole.
        response.data = _body(
            _first_code(exc.get_codes()),
            str(exc.detail),
            errors={"non_field_errors": [str(exc.detail)]},
        )
    else:
        response.data = _body(_first_code(exc.get_codes()), str(exc.detail))
    if response.status_code == status.HTTP_401_UNAUTHORIZED:
        response["WWW-Authenticate"] = 'Api-Key realm="api"'
    return response
