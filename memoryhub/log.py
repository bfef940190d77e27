"""Structured logs: one JSON object per line, with the request (or task) they belong to.

``RequestLogMiddleware`` gives every request an id (a sane incoming ``X-Request-ID``, or
a new one), echoes it in the response and writes one access line per request: method,
path (never the query string), status and duration. The API views add the org slug and
the API key's prefix once the key is known. ``RequestContextFilter`` stamps every log
record with that context and, inside a Celery task, the task's id and name;
``JsonFormatter`` renders a record as one JSON line.

What is logged is metadata only: never memory content, query text, a namespace in a
query string, or an API key (its public prefix identifies it).

Why this is hand-written (weighed against the libraries):

* python-json-logger renders every ``extra``, objects included (Django's
  ``django.request`` passes the request, whose repr holds the query string), writes the
  context's ``None`` fields as nulls, and spreads a dict message into the line. Keeping
  this contract meant rewriting its ``add_fields`` whole, which is this formatter, and
  was no faster; so it would be a dependency for its ``json.dumps`` call.
* structlog's ``ProcessorFormatter`` is slower per record, renders the same objects and
  nulls, and a reusable app must not configure structlog for its host.
* django-guid keeps an incoming id only if it is a UUID (``req-42.a:b`` would be
  replaced) or else any string unchecked, is configured from the host's settings, and
  writes no access line; django-structlog takes ``X-Request-ID`` unchecked or not at
  all. Neither binds the org and key prefix, which the API adds once the key is known.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from celery._state import get_current_task
from django.http import HttpRequest, HttpResponse

from . import metrics

__all__ = [
    "REQUEST_ID_HEADER",
    "TASK_REQUEST_ID_HEADER",
    "JsonFormatter",
    "RequestContext",
    "RequestContextFilter",
    "RequestLogMiddleware",
    "TextFormatter",
    "bind",
    "current",
    "request_context",
    "stamp_task_headers",
]

REQUEST_ID_HEADER = "X-Request-ID"
#: An incoming request id is kept only if it looks like an id: no spaces, quotes or
#: control characters that could forge or break a log line, and not too long.
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

access_logger = logging.getLogger("memoryhub.access")


@dataclass(slots=True)
class RequestContext:
    request_id: str
    org: str | None = None
    key_prefix: str | None = None


_context: ContextVar[RequestContext | None] = ContextVar("memoryhub_log_context", default=None)


def current() -> RequestContext | None:
    """The context of the request being served, if any."""
    return _context.get()


@contextmanager
def request_context(request_id: str | None = None) -> Iterator[RequestContext]:
    """Log everything inside the block under ``request_id`` (a new one by default)."""
    context = RequestContext(request_id=request_id or uuid.uuid4().hex)
    token = _context.set(context)
    try:
        yield context
    finally:
        _context.reset(token)


def bind(*, org: str | None = None, key_prefix: str | None = None) -> None:
    """Add who is calling to the current request's log context (no-op outside one)."""
    context = _context.get()
    if context is None:
        return
    if org is not None:
        context.org = org
    if key_prefix is not None:
        context.key_prefix = key_prefix


def incoming_request_id(value: str | None) -> str | None:
    """``value`` if it is a sane request id, else ``None`` (a new one is generated)."""
    if value and SANE_REQUEST_ID.fullmatch(value):
        return value
    return None


def _current_task() -> Any:
    return get_current_task()


#: The message header that carries the enqueuing request's id to the task's log lines.
TASK_REQUEST_ID_HEADER = "memoryhub_request_id"


def stamp_task_headers(headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
    """Celery ``before_task_publish``: a task enqueued by a request carries its id."""
    context = _context.get()
    if headers is not None and context is not None:
        headers[TASK_REQUEST_ID_HEADER] = context.request_id


def _task_request_id(request: Any) -> str | None:
    value = getattr(request, TASK_REQUEST_ID_HEADER, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(TASK_REQUEST_ID_HEADER)
    return incoming_request_id(value) if isinstance(value, str) else None


class RequestContextFilter(logging.Filter):
    """Stamp records with ``request_id``, ``org``, ``key_prefix``, ``task_id``, ``task_name``.

    Attach it to handlers (not loggers) so records of every logger are stamped.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        context = _context.get()
        record.request_id = context.request_id if context else None
        record.org = context.org if context else None
        record.key_prefix = context.key_prefix if context else None
        task = _current_task()
        request = getattr(task, "request", None) if task is not None else None
        task_id = getattr(request, "id", None)
        record.task_id = task_id
        record.task_name = getattr(task, "name", None) if task_id else None
        if task_id and getattr(record, "request_id", None) is None:
            record.request_id = _task_request_id(request)  # the request that enqueued it
        return True


#: Attributes every LogRecord has; anything else on a record came in ``extra``.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_CONTEXT = ("request_id", "org", "key_prefix", "task_id", "task_name")
_PRIMITIVE = (str, int, float, bool, type(None))


class JsonFormatter(logging.Formatter):
    """One JSON object per record: timestamp, level, logger, message, context, extras.

    Only primitive ``extra`` values are kept: Django passes the request object itself
    (whose repr holds the query string), and objects have no business in a log line.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _CONTEXT:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        for name, value in record.__dict__.items():
            if name in _STANDARD or name in _CONTEXT or name in entry:
                continue
            if isinstance(value, _PRIMITIVE):
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The development format: readable, with the request id when there is one."""

    def __init__(self) -> None:
        super().__init__("[%(asctime)s] %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = getattr(record, "request_id", None)
        task_id = getattr(record, "task_id", None)
        if request_id:
            line += f" [request_id={request_id}]"
        if task_id:
            line += f" [task_id={task_id}]"
        return line


class RequestLogMiddleware:
    """Request id in and out, and one access log line per request. Put it first."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = incoming_request_id(request.headers.get(REQUEST_ID_HEADER))
        started = time.perf_counter()
        with request_context(request_id) as context:
            request.request_id = context.request_id  # type: ignore[attr-defined]
            response = self.get_response(request)
            response[REQUEST_ID_HEADER] = context.request_id
            seconds = time.perf_counter() - started
            metrics.observe_request(request, response.status_code, seconds)
            duration_ms = round(seconds * 1000, 2)
            access_logger.info(
                "%s %s %s %.2fms",
                request.method,
                request.path,
                response.status_code,
                duration_ms,
                extra={
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "duration_ms": duration_ms,
                },
            )
        return response
