"""Traces over OTLP to a receiver this test owns: one trace runs from an API write on a
gunicorn site through the indexing task on a Celery worker, with the GenAI memory
conventions' attributes, and no content, key or data subject's namespace anywhere in it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from memoryhub import tracing
from tests.factories import create_api_key
from tests.programs import (
    database_url,
    serving,
    site_environment,
    start_gunicorn,
    start_worker,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

trace_service = pytest.importorskip(
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    reason="the tracing extra is not installed",
)


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: every body it is sent, and the spans in them."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def spans(self) -> list[dict]:
        with self.lock:
            bodies = list(self.bodies)
        found = []
        for body in bodies:
            request = trace_service.ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                service = next(
                    a.value.string_value
                    for a in resource.resource.attributes
                    if a.key == "service.name"
                )
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        found.append(
                            {
                                "service": service,
                                "name": span.name,
                                "trace": span.trace_id.hex(),
                                "attributes": {a.key: _value(a.value) for a in span.attributes},
                            }
                        )
        return found


def _value(value) -> object:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving(Receiver()) as server:
        yield server


@pytest.mark.parametrize(
    "options",
    [(), ("--preload", "--config", "python:config.gunicorn")],
    ids=["gunicorn", "preloaded as docker-compose runs it"],
)
def test_one_trace_runs_from_an_api_write_through_the_indexing_task(
    tenant, receiver, redis, workers, tmp_path, options
):
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    workers.append(
        start_worker(
            redis.url(), tmp_path / "worker.log", env={**otel, "OTEL_SERVICE_NAME": "worker"}
        )
    )
    site_env = {
        **site_environment(database_url()),
        **otel,
        "OTEL_SERVICE_NAME": "web",
        "CELERY_BROKER_URL": redis.url(),
    }
    site = start_gunicorn(site_env, tmp_path / "gunicorn.log", workers=1, options=options)
    try:
        _, key = create_api_key(org=tenant.org, can_read=True, can_write=True)
        client = httpx.Client(
            base_url=site.url(""), headers={"Authorization": f"Api-Key {key}"}, timeout=30
        )
        secret = {
            "content": "Alice keeps her savings in Zurich.",
            "key": "finance/bank",
            "namespace": "user:alice",
        }
        written = client.post("/api/v1/domains/support/records", json={"items": [secret]})
        assert written.status_code == 202, written.text
        listed = client.get(
            "/api/v1/domains/support/records",
            params={"namespace": "user:alice", "key_prefix": "finance/"},
        )
        assert listed.status_code == 200, listed.text
        asked = client.post(
            "/api/v1/domains/support/query",
            json={"query": "where are the savings", "namespaces": ["user:alice"]},
        )
        assert asked.status_code == 200

        def indexed_in_the_same_trace() -> bool:
            spans = receiver.spans()
            writes = [s for s in spans if s["name"].startswith("update_memory")]
            indexes = [s for s in spans if s["name"] == "memoryhub.index"]
            return any(w["trace"] == i["trace"] for w in writes for i in indexes)

        wait_for(indexed_in_the_same_trace, timeout=60, what="the write and its indexing")
    finally:
        site.stop()

    spans = receiver.spans()
    [write] = [s for s in spans if s["name"].startswith("update_memory")]
    trace = [s for s in spans if s["trace"] == write["trace"]]
    assert {s["service"] for s in trace} == {"web", "worker"}
    names = {s["name"] for s in trace}
    assert any(name.startswith("POST") for name in names), names  # Django's server span
    assert any("index_records" in name for name in names), names  # Celery's task spans
    store = str(tenant.domain.pk)
    assert write["name"] == f"update_memory {store}"
    assert write["attributes"]["gen_ai.operation.name"] == "update_memory"
    assert write["attributes"]["gen_ai.memory.store.id"] == store
    assert write["attributes"]["gen_ai.memory.record.count"] == 1
    [index] = [s for s in trace if s["name"] == "memoryhub.index"]
    assert index["service"] == "worker" and index["attributes"]["gen_ai.memory.record.count"] == 1
    [search] = [s for s in spans if s["name"].startswith("search_memory")]
    assert search["attributes"]["gen_ai.operation.name"] == "search_memory"
    assert search["attributes"]["memoryhub.query.mode"] == "hybrid"
    assert search["attributes"]["gen_ai.memory.record.count"] == 1
    everything = b"".join(receiver.bodies)
    private_values = (b"Alice", b"Zurich", b"user:alice", b"finance/bank", b"savings")
    quoted = (b"user%3Aalice", b"finance%2F", b"finance/")  # as a query string has them
    for private in private_values + quoted:
        assert private not in everything, private


def test_off_without_an_endpoint_a_span_is_nothing(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert tracing.enabled() is False
    with tracing.span("search_memory", store=1) as current:
        assert current is None
