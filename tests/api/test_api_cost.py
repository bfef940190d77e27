"""The API's fixed cost, itemised (``benchmarks/api_cost.py``) and reported.

The measurement runs for real against a tiny dataset: the test database, the site's
middleware in process, and a gunicorn serving the same database (no Redis). No figure
is asserted, only the table's shape and that it adds up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import override_settings

from benchmarks import api_cost
from benchmarks.load import start_gunicorn, stop
from benchmarks.report import API_P95_ALLOWANCE_MS, api_cost_section, targets_table, write_report
from memoryhub.scope import Scope
from memoryhub.services import write
from tenants.models import ApiKey
from tests.factories import DomainFactory, OrgFactory

QUESTIONS = ["refund policy for orders", "shipping address change", "invoice currency"]


@pytest.mark.django_db(transaction=True)
def test_the_fixed_cost_is_itemised_and_adds_up_to_the_gap(tmp_path):
    scopes = []
    for slug in ("acme", "globex"):
        domain = DomainFactory(org=OrgFactory(slug=slug), slug="docs")
        scope = Scope.for_domain(domain)
        write.write(
            scope,
            [
                {"content": f"{slug} {question} number {n}"}
                for question in QUESTIONS
                for n in range(5)
            ],
        )
        scopes.append(scope)
    _, key = ApiKey.objects.create_key(name="bench", org_id=scopes[0].org_id, can_read=True)
    server, base_url = start_gunicorn(tmp_path, memoryhub=api_cost.SERVED)
    try:
        cost = api_cost.measure(scopes[0], key, QUESTIONS, base_url, mode="vector", requests=12)
    finally:
        stop(server)

    assert list(cost["layers"]) == [
        "service",
        "WSGI in process",
        "WSGI in process, metrics off",
        "WSGI in process, service from memory",
        "API (gunicorn)",
    ]
    assert list(cost["parts"]) == list(api_cost.PARTS)
    for figures in [*cost["layers"].values(), *cost["parts"].values(), *cost["details"].values()]:
        assert set(figures) == {"p50", "p95"}
        assert figures["p50"] >= 0 and figures["p95"] >= 0
    for q in ("p50", "p95"):
        parts = sum(part[q] for part in cost["parts"].values())
        assert cost["sum"][q] == pytest.approx(parts, abs=0.002)
        assert cost["gap"][q] == pytest.approx(
            cost["layers"]["API (gunicorn)"][q] - cost["layers"]["service"][q], abs=0.002
        )
        assert cost["sum"][q] + cost["unattributed"][q] == pytest.approx(cost["gap"][q], abs=0.002)
    # The key lookup and the service's statement(s): nothing else reaches the database.
    assert 2 <= cost["statements"] <= 3
    # Every request was answered (a refusal raises), with acme's items, never globex's.
    assert cost["response_bytes"] > 0
    with override_settings(SECURE_SSL_REDIRECT=False):
        answer = api_cost._call(
            api_cost._wsgi_handler(),
            "/api/v1/domains/docs/query",
            key,
            {"query": QUESTIONS[0], "k": 10, "mode": "vector"},
        ).decode()
    assert "acme refund policy" in answer and "globex" not in answer
    assert cost["served"] == api_cost.SERVED
    json.dumps(cost)  # stored in results.json


def test_itemise_takes_django_and_gunicorn_by_difference_and_never_below_zero():
    figure = lambda p50, p95: {"p50": p50, "p95": p95}  # noqa: E731
    layers = {
        "service": figure(2.0, 3.0),
        "WSGI in process": figure(3.3, 4.4),
        "WSGI in process, service from memory": figure(1.2, 1.5),
        "API (gunicorn)": figure(4.2, 6.0),
    }
    measured = {
        "authentication": figure(0.4, 0.6),
        "throttle": figure(0.02, 0.03),
        "access log": figure(0.03, 0.04),
        "JSON parse": figure(0.01, 0.01),
        "response (items, grounding, JSON)": figure(0.1, 0.9),
        "authentication: lookup statement": figure(0.3, 0.4),
    }
    cost = api_cost.itemise(layers, measured)
    assert cost["parts"]["Django (middleware, URL, view, DRF)"] == figure(0.64, 0.0)
    assert cost["parts"]["gunicorn + HTTP"] == figure(0.9, 1.6)
    assert cost["details"] == {"authentication: lookup statement": figure(0.3, 0.4)}
    assert cost["gap"] == figure(2.2, 3.0)
    assert cost["sum"] == figure(2.1, 3.18)
    assert cost["unattributed"] == figure(0.1, -0.18)


def results_without_api_cost() -> dict:
    """The committed medium run's results, as a run before the itemisation wrote them."""
    results = json.loads((Path(api_cost.__file__).parent / "results-medium.json").read_text())
    results.pop("api_cost", None)
    return results


def with_api_cost(results: dict) -> dict:
    figure = {"p50": 1.0, "p95": 2.0}
    cost = {
        "mode": "vector",
        "requests": 120,
        "statements": 2,
        "response_bytes": 5300,
        "served": api_cost.SERVED,
        "layers": {"service": figure, "API (gunicorn)": figure},
        "parts": {name: figure for name in api_cost.PARTS},
        "details": {"authentication: lookup statement": figure},
        "sum": figure,
        "gap": figure,
        "unattributed": {"p50": 0.1, "p95": -0.2},
    }
    return {**results, "api_cost": {tenant: cost for tenant in results["latency_ms"]}}


def test_the_p95_target_is_a_fixed_allowance_over_raw_sql():
    results = results_without_api_cost()
    tenant = "1% tenant"
    latency = results["latency_ms"][tenant]
    latency["raw sql vector"] = {"p50": 1.0, "p95": 1.5, "p99": 3.0}
    latency["api vector"] = {"p50": 4.0, "p95": 1.5 + API_P95_ALLOWANCE_MS, "p99": 20.0}
    latency["raw sql hybrid"] = {"p50": 1.0, "p95": 1.5, "p99": 3.0}
    latency["api hybrid"] = {"p50": 4.0, "p95": 1.6 + API_P95_ALLOWANCE_MS, "p99": 20.0}
    table = targets_table(results)
    assert "within 2x" not in table
    assert f"| {tenant}, vector: API p95 ≤ raw SQL p95 + 6 ms | +6.0 ms | met |" in table
    assert f"| {tenant}, hybrid: API p95 ≤ raw SQL p95 + 6 ms | +6.1 ms | **not met** |" in table
    assert f"| {tenant}, vector: API p50 within 5 ms of raw SQL p50 | +3.0 ms | met |" in table


def test_the_report_itemises_the_fixed_cost_and_says_why_the_target_changed(tmp_path):
    report = tmp_path / "REPORT.md"
    write_report(with_api_cost(results_without_api_cost()), report)
    text = report.read_text()
    section = text.split("## The API's fixed cost", 1)[1].split("\n## ", 1)[0]
    for name in api_cost.PARTS:
        assert f"| {name} | 1.0 | 2.0 |" in section
    assert "| gunicorn + HTTP | 1.0 | 2.0 | difference |" in section
    assert "| **API − service** (the gap) | 1.0 | 2.0 |" in section
    assert "| unattributed | 0.1 | -0.2 |" in section
    assert "2 SQL statements per request" in section
    assert "From raw SQL to the API (vector, p50 of the latency rows above)" in section
    assert "`MGET`, `EXISTS` and `INCRBY`" in section
    assert "2× of it allows the API 1–2 ms" in section
    assert "2 vCPUs" in section


def test_results_measured_before_the_itemisation_still_render(tmp_path):
    results = results_without_api_cost()
    assert "api_cost" not in results
    assert api_cost_section(results) == []
    report = tmp_path / "REPORT.md"
    write_report(results, report)
    assert "## The API's fixed cost" not in report.read_text()
    assert "raw SQL p95 + 6 ms" in report.read_text()


class ColdFirstClient:
    """A client whose first request takes 200 ms, as a gunicorn worker's first does."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []

    def post_json(self, path: str, body: dict, headers: dict) -> bytes:
        import time

        if not self.bodies:
            time.sleep(0.2)
        self.bodies.append(body)
        return b"{}"


def test_the_latency_rows_leave_out_a_workers_first_request(tenant, other_tenant):
    from benchmarks.run import QUERIES, served_latency

    client = ColdFirstClient()
    questions = [f"refund question {n}" for n in range(QUERIES)]
    rows = served_latency(tenant.scope, questions, client, "key")
    assert rows["api vector"]["p99"] < 100
    assert len(client.bodies) == 2 * (len(questions) + 1)
    assert [body["query"] for body in client.bodies[1 : len(questions) + 1]] == questions


def test_the_1m_run_is_a_section_beside_the_100k_report(tmp_path):
    # The main report is the 100k run's (the run its targets are set for); the 1M run's
    # report goes into its own section, one heading level down, and stays when the
    # 100k run rewrites the report.
    medium = results_without_api_cost()
    large = {**medium, "scale": "large", "records": 1_000_000, "tenants": 1_000}
    report = tmp_path / "REPORT.md"
    write_report(medium, report)
    write_report(large, report)
    text = report.read_text()
    assert text.startswith("# memoryhub benchmarks")
    assert "<!-- scale-large:begin -->\n## The 1,000,000-record run (large)" in text
    assert "### Targets" in text.split("<!-- scale-large:begin -->")[1]
    write_report(medium, report)
    again = report.read_text()
    assert again.count("<!-- scale-large:begin -->") == 1
    assert "1,000 tenants" in again.split("<!-- scale-large:begin -->")[1]


def test_quieting_the_logs_never_hands_the_processs_stderr_to_a_handler(tmp_path):
    # A file handler not yet opened (delay=True) has no stream: were the measurement to
    # give it sys.stderr afterwards, closing the handler (a later logging
    # reconfiguration) would close the process's stderr (pytest's capture file, in CI).
    import logging
    import sys

    root = logging.getLogger()
    lazy = logging.FileHandler(tmp_path / "lazy.log", delay=True)
    console = logging.StreamHandler(sys.stdout)
    root.addHandler(lazy)
    root.addHandler(console)
    try:
        with api_cost._logs_to_devnull():
            assert console.stream is not sys.stdout
        assert lazy.stream is None
        assert console.stream is sys.stdout
    finally:
        root.removeHandler(lazy)
        root.removeHandler(console)
        lazy.close()
