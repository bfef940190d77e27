"""The API's fixed cost, itemised: where the time between the query service and the API goes.

One query request through gunicorn is the service's work plus a fixed cost: API-key
authentication, the throttle, the access log line, JSON in and out, Django (middleware,
URL resolving, view dispatch) and gunicorn with HTTP. ``measure(...)`` times each, with
the same questions for every layer and the settings the benchmark's gunicorn runs with
(``SERVED``, ``DEBUG=0``, JSON logs):

* measured directly, in process: the service; authentication (the failed-authentication
  check, the key's one lookup statement with its domain, the SHA-512 check); the
  throttle's sliding window (and the same call with throttling off); the access log
  middleware around a response that costs nothing (and, of it and the service, the
  Prometheus metrics a request counts); the body's JSON parse; the response (items,
  grounding, JSON render);
* measured as wholes: the request through Django's ``WSGIHandler`` in process, once as
  served, once counting no metrics and once with the service answered from memory (the
  fixed cost in process),
  and the request through gunicorn over one keep-alive connection;
* by difference: Django's own share (the fixed cost in process less the parts above) and
  gunicorn + HTTP (through gunicorn less through ``WSGIHandler``).

Figures are p50 and p95 in ms; a difference is the difference of the percentiles (not
the percentile of differences), and ``unattributed`` is what the parts do not explain
of the gap (API less service): run-to-run noise and what the whole pays that its parts
measured alone do not (a colder CPU cache between statements, more live objects).
"""

from __future__ import annotations

import io
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from itertools import cycle
from typing import Any
from unittest import mock

from benchmarks.load import percentiles

K = 10
#: ``MEMORYHUB`` of the benchmark's gunicorn: the site's defaults (``THROTTLE_RATE``
#: 1200/min on the local-memory cache), with no query cache, as ``config.settings`` runs
#: without ``REDIS_URL`` (``tests.worker_settings`` replaces ``MEMORYHUB`` whole, so it
#: is said here).
SERVED: dict[str, Any] = {"CACHE_TTL": 0}
#: Requests per layer.
REQUESTS = 120
#: The parts in the order of a request, and how each was obtained.
PARTS = {
    "authentication": "measured",
    "throttle": "measured",
    "access log": "measured",
    "JSON parse": "measured",
    "response (items, grounding, JSON)": "measured",
    "Django (middleware, URL, view, DRF)": "difference",
    "gunicorn + HTTP": "difference",
}


def measure(
    scope: Any,
    key: str,
    questions: list[str],
    base_url: str,
    *,
    domain: str = "docs",
    mode: str = "hybrid",
    requests: int = REQUESTS,
    served: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Itemise one ``mode`` query request of ``scope`` (API key ``key``, domain slug
    ``domain``) against the gunicorn at ``base_url``; ``requests`` of each layer, the
    questions taken in turn. ``served`` is the server's ``MEMORYHUB`` (``SERVED``)."""
    from django.test import override_settings

    served = SERVED if served is None else served
    asked = [question for question, _ in zip(cycle(questions), range(requests), strict=False)]
    path = f"/api/v1/domains/{domain}/query"
    bodies = [{"query": question, "k": K, "mode": mode} for question in asked]
    with ExitStack() as stack:
        stack.enter_context(override_settings(MEMORYHUB=served, SECURE_SSL_REDIRECT=False))
        stack.enter_context(_logs_to_devnull())
        layers = {"service": _service(scope, asked, mode)}
        answers = _answers(scope, asked, mode)
        handler = _wsgi_handler()
        layers["WSGI in process"] = _timed(lambda body: _call(handler, path, key, body), bodies)
        with _metrics_off():
            layers["WSGI in process, metrics off"] = _timed(
                lambda body: _call(handler, path, key, body), bodies
            )
        with _service_from_memory(answers):
            layers["WSGI in process, service from memory"] = _timed(
                lambda body: _call(handler, path, key, body), bodies
            )
        statements = _statements(handler, path, key, bodies[0])
        response_bytes = len(_call(handler, path, key, bodies[0]))
        layers["API (gunicorn)"] = _through_gunicorn(base_url, path, key, bodies)
        measured = _parts(key, domain, bodies, answers)
    return itemise(
        layers,
        measured,
        mode=mode,
        requests=requests,
        statements=statements,
        response_bytes=response_bytes,
        served=served,
    )


def itemise(
    layers: dict[str, dict[str, float]],
    measured: dict[str, dict[str, float]],
    **about: Any,
) -> dict[str, Any]:
    """The table: the measured parts, Django's and gunicorn's shares by difference (at
    least 0), their sum, the gap (API less service) and what the parts leave of it."""
    fixed = layers["WSGI in process, service from memory"]
    parts = {name: measured[name] for name in PARTS if name in measured}
    inside = {q: sum(part[q] for part in parts.values()) for q in ("p50", "p95")}
    parts["Django (middleware, URL, view, DRF)"] = {
        q: round(max(0.0, fixed[q] - inside[q]), 3) for q in ("p50", "p95")
    }
    parts["gunicorn + HTTP"] = {
        q: round(max(0.0, layers["API (gunicorn)"][q] - layers["WSGI in process"][q]), 3)
        for q in ("p50", "p95")
    }
    total = {q: round(sum(part[q] for part in parts.values()), 3) for q in ("p50", "p95")}
    gap = {q: round(layers["API (gunicorn)"][q] - layers["service"][q], 3) for q in ("p50", "p95")}
    return {
        **about,
        "layers": layers,
        "parts": parts,
        "details": {name: value for name, value in measured.items() if name not in parts},
        "sum": total,
        "gap": gap,
        "unattributed": {q: round(gap[q] - total[q], 3) for q in ("p50", "p95")},
    }


# --- the wholes ------------------------------------------------------------------------------


def _timed(fn: Callable[[Any], Any], inputs: list[Any]) -> dict[str, float]:
    """p50 and p95 of ``fn`` over ``inputs``, after one untimed call (first-use costs:
    a model loaded again after the settings override, URL patterns compiled)."""
    fn(inputs[0])
    samples = []
    for value in inputs:
        started = time.perf_counter()
        fn(value)
        samples.append(time.perf_counter() - started)
    figures = percentiles(samples)
    return {"p50": figures["p50"], "p95": figures["p95"]}


def _service(scope: Any, asked: list[str], mode: str) -> dict[str, float]:
    from memoryhub.services import query as query_service

    return _timed(
        lambda question: query_service.query(scope, query=question, k=K, mode=mode), asked
    )


@contextmanager
def _logs_to_devnull() -> Iterator[None]:
    """The root logger's handlers write to ``/dev/null`` meanwhile (gunicorn's go to a
    file): the in-process requests' access lines pay for formatting and a write, and do
    not fill the terminal."""
    # Not a file handler (pytest's log file is one): its stream may not be open yet, and
    # a stream handed to it is closed with it.
    handlers = [
        h
        for h in logging.getLogger().handlers
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
    ]
    with open(os.devnull, "w") as sink:
        previous = [handler.stream for handler in handlers]
        for handler in handlers:
            handler.setStream(sink)
        try:
            yield
        finally:
            # Each handler's own stream again (never sys.stderr in place of one: a
            # handler that closes its stream would close the process's).
            for handler, stream in zip(handlers, previous, strict=True):
                handler.setStream(stream)


def _wsgi_handler() -> Any:
    from django.core.handlers.wsgi import WSGIHandler

    return WSGIHandler()  # built now: the middleware reads the overridden settings


def _environ(path: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """What gunicorn hands the application for ``KeepAliveClient.post_json``."""
    import json

    payload = json.dumps(body).encode()
    return {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "RAW_URI": path,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "REMOTE_PORT": "50000",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(payload)),
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_ACCEPT_ENCODING": "identity",
        "HTTP_AUTHORIZATION": f"Api-Key {key}",
        "wsgi.input": io.BytesIO(payload),
        "wsgi.errors": sys.stderr,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
    }


def _call(handler: Any, path: str, key: str, body: dict[str, Any]) -> bytes:
    status: list[str] = []
    response = handler(_environ(path, key, body), lambda code, headers: status.append(code))
    try:
        content = b"".join(response)
    finally:
        response.close()
    if not status[0].startswith("200"):
        raise RuntimeError(f"{path}: {status[0]}: {content[:200]!r}")
    return content


def _answers(scope: Any, asked: list[str], mode: str) -> dict[str, Any]:
    """Each distinct question's real answer."""
    from memoryhub.services import query as query_service

    return {q: query_service.query(scope, query=q, k=K, mode=mode) for q in dict.fromkeys(asked)}


@contextmanager
def _service_from_memory(answers: dict[str, Any]) -> Iterator[None]:
    """The view's service call answers each question from ``answers``."""
    from memoryhub.services import query as query_service

    with mock.patch.object(query_service, "query", lambda scope, **body: answers[body["query"]]):
        yield


def _through_gunicorn(base_url: str, path: str, key: str, bodies: list[Any]) -> dict[str, float]:
    """The requests over one keep-alive connection, as the latency rows send them."""
    from benchmarks.run import KeepAliveClient

    client = KeepAliveClient(base_url)
    headers = {"Authorization": f"Api-Key {key}"}
    try:
        client.post_json(path, bodies[0], headers)  # the connection, opened once
        return _timed(lambda body: client.post_json(path, body, headers), bodies)
    finally:
        client.close()


def _statements(handler: Any, path: str, key: str, body: dict[str, Any]) -> int:
    """SQL statements one request sends (the service's included)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        _call(handler, path, key, body)
    return len(captured.captured_queries)


# --- the parts -------------------------------------------------------------------------------


def _drf_request(key: str, domain: str, body: dict[str, Any]) -> Any:
    import json

    from django.test import RequestFactory
    from rest_framework.request import Request

    django_request = RequestFactory().post(
        f"/api/v1/domains/{domain}/query",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Api-Key {key}",
    )
    return Request(django_request, parser_context={"kwargs": {"domain": domain}})


def _parts(
    key: str, domain: str, bodies: list[dict[str, Any]], answers: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """Each step of the request's fixed cost on its own (and some of their pieces)."""
    from memoryhub.api.authentication import ApiKeyAuthentication
    from tenants.models import ApiKey

    parts: dict[str, dict[str, float]] = {}
    requests = [_drf_request(key, domain, body) for body in bodies]
    authentication = ApiKeyAuthentication()
    parts["authentication"] = _timed(authentication.authenticate, requests)
    api_key = ApiKey.objects.get_from_key(key, domain_slug=domain)
    prefix = key.partition(".")[0]
    parts["authentication: lookup statement"] = _timed(
        lambda _: ApiKey.objects._lookup(prefix, domain), requests
    )
    parts["authentication: key hash check"] = _timed(lambda _: api_key.is_valid(key), requests)
    parts.update(_throttle(requests))
    parts["access log"] = _access_log(requests)
    parts["metrics: a request's and a query's"] = _metrics(requests)
    parts.update(_json(bodies, [answers[body["query"]] for body in bodies]))
    return parts


@contextmanager
def _metrics_off() -> Iterator[None]:
    """Nothing counted for ``/metrics``: the request as it would cost without them."""
    from memoryhub import metrics

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    names = ("observe_request", "observe_query", "observe_writes", "observe_refusal")
    with ExitStack() as stack:
        for name in names:
            stack.enter_context(mock.patch.object(metrics, name, nothing))
        yield


def _metrics(requests: list[Any]) -> dict[str, float]:
    """What a query request counts for ``/metrics``: its request (in the access log
    middleware, so part of that figure too) and its query (in the service)."""
    from memoryhub import metrics

    def count(request: Any) -> None:
        metrics.observe_request(request._request, 200, 0.005)
        metrics.observe_query("hybrid", metrics.plan_of("hybrid+hnsw", cached=False), 0.005)

    return _timed(count, requests)


def _throttle(requests: list[Any]) -> dict[str, dict[str, float]]:
    """``ApiKeyRateThrottle.allow_request`` as served, and with ``THROTTLE_RATE`` None;
    a key of its own (never saved), so the requests measured elsewhere do not count."""
    from django.conf import settings
    from django.test import override_settings

    from memoryhub.api.throttling import ApiKeyRateThrottle
    from tenants.models import ApiKey

    unsaved = ApiKey(prefix="cost" + uuid.uuid4().hex[:8])
    for request in requests:
        request.user, request.auth = None, unsaved

    def allow(request: Any) -> None:
        assert ApiKeyRateThrottle().allow_request(request, None)

    figures = {"throttle": _timed(allow, requests)}
    with override_settings(MEMORYHUB={**settings.MEMORYHUB, "THROTTLE_RATE": None}):
        figures["throttle: with THROTTLE_RATE None"] = _timed(allow, requests)
    return figures


def _access_log(requests: list[Any]) -> dict[str, float]:
    """``RequestLogMiddleware`` around a view that costs nothing: the request id, the
    log context, the access line through the site's handlers (JSON formatter)."""
    from django.http import HttpResponse

    from memoryhub.log import RequestLogMiddleware

    response = HttpResponse()
    middleware = RequestLogMiddleware(lambda request: response)
    return _timed(lambda request: middleware(request._request), requests)


def _json(bodies: list[dict[str, Any]], results: list[Any]) -> dict[str, dict[str, float]]:
    """The body's parse (memoryhub's bounded parser), and the response: the view's
    dict (items, grounding) and DRF's JSON rendering of it."""
    import json

    from rest_framework.renderers import JSONRenderer

    from memoryhub.api.parsers import BoundedJSONParser
    from memoryhub.services import query as query_service

    payloads = [json.dumps(body).encode() for body in bodies]
    parser = BoundedJSONParser()

    def parse(payload: bytes) -> None:
        parser.parse(io.BytesIO(payload), "application/json", {"encoding": "utf-8"})

    renderer = JSONRenderer()

    def shape(result: Any) -> dict[str, Any]:
        return {
            "items": result.item_dicts(),
            "grounding": query_service.render_grounding(result.items),
            "reranked": result.reranked,
        }

    def respond(result: Any) -> None:
        renderer.render(shape(result), "application/json", {})

    shaped = [shape(result) for result in results]
    return {
        "JSON parse": _timed(parse, payloads),
        "response (items, grounding, JSON)": _timed(respond, results),
        "response: JSON render only": _timed(
            lambda data: renderer.render(data, "application/json", {}), shaped
        ),
    }
