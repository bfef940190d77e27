"""OpenTelemetry traces: the Django, Celery and psycopg instrumentations, and memoryhub's
own spans, named and attributed by the GenAI memory conventions (a query is
``search_memory``, a write ``update_memory``, an erasure ``delete_memory``).

Off unless an OTLP endpoint is configured by OpenTelemetry's own environment variables
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; with
``OTEL_SERVICE_NAME``, ``OTEL_BSP_*`` and the rest as OpenTelemetry reads them) and
``OTEL_SDK_DISABLED`` is not ``true``: then :func:`configure` (called
from ``MemoryhubConfig.ready`` and in each Celery pool child) exports over OTLP/HTTP. Off, a
span of :func:`span` costs one check. It needs the ``tracing`` extra.

No span holds content, a query's text, a key or a namespace: a memory store is a
domain's number, a record its id.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["configure", "enabled", "span"]

logger = logging.getLogger(__name__)

#: What ``gen_ai.provider.name`` says of memoryhub's spans.
PROVIDER = "memoryhub"

#: The tracer of this process once :func:`configure` turned tracing on.
_tracer: Any = None
_configured_in: int | None = None


def enabled() -> bool:
    """Whether OpenTelemetry's environment asks for traces to be exported."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "").lower() == "none":
        return False
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure() -> bool:
    """Turn tracing on in this process when :func:`enabled` (once per process: call it
    again in a forked child); whether it is on."""
    global _tracer, _configured_in
    if _configured_in == os.getpid():
        return _tracer is not None
    _configured_in = os.getpid()
    if not enabled():
        _tracer = None
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.django import DjangoInstrumentor
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        logger.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but tracing is not installed (%s): "
            "pip install 'django-memoryhub[tracing]'",
            exc.name,
        )
        return False
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # The host set OpenTelemetry up itself: memoryhub's spans join its provider, and
        # its instrumentations are its own.
        _tracer = trace.get_tracer("memoryhub")
        return True
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "memoryhub"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    # The provider is passed, not made global (which is set once per process): a forked
    # child instruments again with a provider of its own.
    for instrumentor, options in (
        (DjangoInstrumentor(), {"request_hook": _without_query}),
        (CeleryInstrumentor(), {}),
        (PsycopgInstrumentor(), {}),
    ):
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        instrumentor.instrument(tracer_provider=provider, **options)
    _tracer = provider.get_tracer("memoryhub")
    return True


#: The attributes of a server span that carry a request's query string (which can name a
#: namespace or a key), by the conventions' old and new names.
QUERY_ATTRIBUTES = ("http.target", "http.url", "url.full", "url.query")


def _without_query(current: Any, request: Any) -> None:
    """Django's server span holds the path, never the query string."""
    if not current.is_recording():
        return
    path = request.path
    for name in QUERY_ATTRIBUTES:
        current.set_attribute(name, "" if name == "url.query" else path)


@contextmanager
def span(operation: str, *, store: int | None = None, **attributes: Any) -> Iterator[Any]:
    """A span of memoryhub's own, ``operation`` as the GenAI memory conventions name it
    (``search_memory``, ``update_memory``, ``delete_memory``) or memoryhub's
    (``memoryhub.index``); ``store``: the domain's id. Yields the span (None when
    tracing is off) for attributes known at its end."""
    if _tracer is None:
        yield None
        return
    named = {"gen_ai.operation.name": operation, "gen_ai.provider.name": PROVIDER}
    if store is not None:
        named["gen_ai.memory.store.id"] = str(store)
    named.update({key: value for key, value in attributes.items() if value is not None})
    title = operation if store is None else f"{operation} {store}"
    # An exception's message may quote a value (a database error names a key): the
    # span's status says it failed, its events do not say with what.
    with _tracer.start_as_current_span(title, attributes=named, record_exception=False) as current:
        yield current
