"""Prometheus metrics: what the platform team that runs memoryhub scrapes.

Counters and histograms are kept by ``prometheus_client`` in each process; under
gunicorn or Celery's prefork pool, set ``PROMETHEUS_MULTIPROC_DIR`` (a directory the
processes share, emptied at each start) and the scrape reads every process's values.
The state of the deployment (records pending and the oldest one's age, the broker's
queue, import jobs by state) is read from the database and the broker when scraped
(:class:`Deployment`), so every web process answers the same.

A label holds only what has few values: a door, a route's pattern, a status code, a
mode, a plan, an outcome. Never an org, a domain, a namespace, a key or content.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

__all__ = [
    "Deployment",
    "exposition",
    "observe_consolidation",
    "observe_erasure",
    "observe_indexing",
    "observe_query",
    "observe_request",
    "observe_writes",
]

logger = logging.getLogger(__name__)

#: The methods a request's label names; any other is ``other`` (a client chooses it).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

Observe = TypeVar("Observe", bound=Callable[..., None])


def never_raises(observe: Observe) -> Observe:
    """Counting never fails the work it counts (a full disk under
    ``PROMETHEUS_MULTIPROC_DIR``, say): it is logged instead."""

    @functools.wraps(observe)
    def counted(*args: Any, **kwargs: Any) -> None:
        try:
            observe(*args, **kwargs)
        except Exception:
            logger.exception("could not count %s", observe.__name__)

    return counted  # type: ignore[return-value]


#: The media type of :func:`exposition`'s answer.
CONTENT_TYPE = CONTENT_TYPE_LATEST

#: Latency buckets, in seconds: a query takes milliseconds, an erasure may take minutes.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

REQUESTS = Counter(
    "memoryhub_requests",
    "Requests answered, by door (rest, mcp, admin, probe, other), route and status.",
    ["door", "route", "method", "status"],
)
REQUEST_SECONDS = Histogram(
    "memoryhub_request_duration_seconds",
    "Time to answer a request, by door and route.",
    ["door", "route"],
    buckets=BUCKETS,
)
QUERIES = Counter(
    "memoryhub_queries",
    "Queries answered by the query service, by mode and plan (exact, hnsw, hnsw-tenant, "
    "keyword, cached).",
    ["mode", "plan"],
)
QUERY_SECONDS = Histogram(
    "memoryhub_query_duration_seconds",
    "Time the query service took, by mode and plan.",
    ["mode", "plan"],
    buckets=BUCKETS,
)
WRITES = Counter(
    "memoryhub_write_items",
    "Items written, by outcome: accepted (a record created or updated), deduplicated "
    "(merged into a record holding the same content), refused (by a read-only knowledge "
    "base), failed.",
    ["outcome"],
)
REFUSALS = Counter(
    "memoryhub_refused_requests",
    "Requests refused before any work, by door and reason (authentication, throttled, permission).",
    ["door", "reason"],
)
ERASURES = Counter(
    "memoryhub_erasures",
    "Erasures run, by what they erased (subject, key, source, domain, import) and outcome "
    "(done; refused: a read-only knowledge base refused it; invalid: the request named a "
    "knowledge base the domain lacks; failed: an error, nothing erased).",
    ["kind", "outcome"],
)
ERASURE_SECONDS = Histogram(
    "memoryhub_erasure_duration_seconds",
    "Time an erasure took, by what it erased.",
    ["kind"],
    buckets=BUCKETS,
)


INDEXED = Counter(
    "memoryhub_records_indexed", "Records embedded and stored (searchable by vector)."
)
INDEXING_ERRORS = Counter(
    "memoryhub_indexing_errors",
    "Records in a batch the embedder failed (each attempt; they are tried again).",
)
INDEXING_FAILED = Counter(
    "memoryhub_records_failed",
    "Records marked failed: the embedder failed them INDEX_MAX_ATTEMPTS times.",
)
CONSOLIDATIONS = Counter(
    "memoryhub_consolidation_runs",
    "Consolidation runs of a namespace's turns, by outcome (done, busy: another run held "
    "the namespace, unavailable: the extractor could not be reached, failed).",
    ["outcome"],
)

#: Every metric this process keeps.
METRICS: tuple[Collector, ...] = (REQUESTS, REQUEST_SECONDS, QUERIES, QUERY_SECONDS, WRITES)
METRICS += (REFUSALS, ERASURES, ERASURE_SECONDS, INDEXED, INDEXING_ERRORS, INDEXING_FAILED)
METRICS += (CONSOLIDATIONS,)


def _door(route: str) -> str:
    if route.startswith("api/"):
        return "rest"
    if route.startswith("mcp"):
        return "mcp"
    if route.startswith("admin/"):
        return "admin"
    if route in ("livez", "readyz", "metrics"):
        return "probe"
    return "other"


def route_of(request: Any) -> str:
    """The pattern of the URL that answered ``request`` (``api/v1/domains/<slug:domain>/
    query``): a path's slugs and ids are not labels."""
    match = getattr(request, "resolver_match", None)
    return getattr(match, "route", None) or "unmatched"


@never_raises
def observe_request(request: Any, status: int, seconds: float) -> None:
    route = route_of(request)
    door = _door(route)
    method = request.method if request.method in METHODS else "other"
    REQUESTS.labels(door, route, method, str(status)).inc()
    REQUEST_SECONDS.labels(door, route).observe(seconds)


def door_of(request: Any) -> str:
    return _door(route_of(request))


@never_raises
def observe_refusal(request: Any, reason: str) -> None:
    REFUSALS.labels(door_of(request), reason).inc()


def plan_of(strategy: str, *, cached: bool) -> str:
    """A query's plan label from the strategy the service reports (``hybrid+hnsw``,
    ``exact+2models``…)."""
    if cached:
        return "cached"
    plan = strategy.removeprefix("hybrid+").split("+", 1)[0]
    return plan if plan in ("exact", "hnsw", "hnsw-tenant", "keyword") else "other"


@never_raises
def observe_query(mode: str, plan: str, seconds: float) -> None:
    """A query answered in ``mode`` by ``plan`` (:func:`plan_of`)."""
    QUERIES.labels(mode, plan).inc()
    QUERY_SECONDS.labels(mode, plan).observe(seconds)


@never_raises
def observe_writes(outcomes: dict[str, int]) -> None:
    for outcome, count in outcomes.items():
        if count:
            WRITES.labels(outcome).inc(count)


@never_raises
def observe_indexing(*, indexed: int = 0, errors: int = 0, failed: int = 0) -> None:
    INDEXED.inc(indexed)
    INDEXING_ERRORS.inc(errors)
    INDEXING_FAILED.inc(failed)


@never_raises
def observe_consolidation(outcome: str) -> None:
    CONSOLIDATIONS.labels(outcome).inc()


@never_raises
def observe_erasure(kind: str, outcome: str, seconds: float) -> None:
    ERASURES.labels(kind, outcome).inc()
    ERASURE_SECONDS.labels(kind).observe(seconds)


class Deployment(Collector):
    """The deployment's state, read when scraped (``services.health.state``): records
    pending and the oldest one's age, the broker's queue, import jobs by status."""

    def __init__(self, state: Callable[[], dict[str, Any]]) -> None:
        self.state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            state = self.state()
        except Exception as exc:  # the database or the broker away: the counters still
            logger.warning("could not read the deployment's state: %s", type(exc).__name__)
            yield GaugeMetricFamily(
                "memoryhub_state_up", "Whether the deployment's state could be read.", value=0
            )
            return
        yield GaugeMetricFamily(
            "memoryhub_state_up", "Whether the deployment's state could be read.", value=1
        )
        yield GaugeMetricFamily(
            "memoryhub_records_pending",
            "Records waiting to be indexed (counted up to PENDING_COUNT_CAP).",
            value=state["pending"],
        )
        yield GaugeMetricFamily(
            "memoryhub_oldest_pending_seconds",
            "How long the oldest record waiting to be indexed has waited (0: none waits).",
            value=state["oldest_pending_seconds"],
        )
        if state["queued"] is not None:
            yield GaugeMetricFamily(
                "memoryhub_queue_depth",
                "Indexing messages waiting in the broker's queue.",
                value=state["queued"],
            )
        jobs = GaugeMetricFamily(
            "memoryhub_import_jobs", "Import jobs by status.", labels=["status"]
        )
        for status, count in state["imports"].items():
            jobs.add_metric([status], count)
        yield jobs


def exposition(*collectors: Collector) -> bytes:
    """Every metric in Prometheus's text format: this process's (or, with
    ``PROMETHEUS_MULTIPROC_DIR``, every process's), then ``collectors``'."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        for metric in METRICS:
            registry.register(metric)
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)
