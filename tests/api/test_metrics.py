"""``GET /metrics``: Prometheus's text format, for a bearer token or loopback only; each
door's work moves its metric, with two orgs, and no label holds an org, a namespace, a
key or content."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from memoryhub.services import knowledge_bases
from tests.factories import key_client

pytestmark = pytest.mark.django_db


def scrape(**headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = Client().get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_each_door_moves_its_metric_and_no_label_names_a_tenant(tenant, other_tenant, committed):
    acme = key_client(tenant, can_read=True, can_write=True, can_forget=True)
    globex = key_client(other_tenant, can_read=True, can_write=True)
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    records = "/api/v1/domains/support/records"
    written_route = "api/v1/domains/<slug:domain>/records"
    before = scrape()

    item = {"content": "Alice invoices in EUR.", "key": "prefs/currency", "namespace": "user:alice"}
    assert acme.post(records, {"items": [item]}, format="json").status_code == 202
    assert (
        globex.post(records, {"items": [item, {"content": "Bob: USD."}]}, format="json").status_code
        == 202
    )
    assert (
        globex.post(records, {"items": [{"content": "Bob: USD."}]}, format="json").status_code
        == 202
    )
    refused = acme.post(records, {"source": "handbook", "items": [{"content": "x"}]}, format="json")
    assert refused.status_code == 403
    query = {"query": "invoices", "mode": "hybrid", "namespaces": ["user:alice"]}
    assert globex.post("/api/v1/domains/support/query", query, format="json").status_code == 200
    forget = {"key": "prefs/currency", "namespace": "user:alice"}
    assert acme.post("/api/v1/domains/support/forget", forget, format="json").status_code == 200
    stranger = Client(HTTP_AUTHORIZATION="Api-Key not-a-key")
    assert stranger.post(records, {}, content_type="application/json").status_code in (401, 403)

    after = scrape()
    moved = {
        (name, labels): after[(name, labels)] - before.get((name, labels), 0.0)
        for name, labels in after
        if after[(name, labels)] != before.get((name, labels), 0.0)
    }
    assert (
        value(after, "memoryhub_write_items_total", outcome="accepted")
        - value(before, "memoryhub_write_items_total", outcome="accepted")
        == 3
    )
    assert moved[("memoryhub_write_items_total", (("outcome", "deduplicated"),))] == 1
    assert moved[("memoryhub_write_items_total", (("outcome", "refused"),))] == 1
    assert sum(v for (n, _), v in moved.items() if n == "memoryhub_queries_total") == 1
    assert moved[("memoryhub_erasures_total", (("kind", "key"), ("outcome", "done")))] == 1
    assert (
        moved[
            ("memoryhub_refused_requests_total", (("door", "rest"), ("reason", "authentication")))
        ]
        == 1
    )
    status = {"door": "rest", "route": written_route, "method": "POST"}
    assert (
        value(after, "memoryhub_requests_total", **status, status="202")
        - value(before, "memoryhub_requests_total", **status, status="202")
        == 3
    )
    assert (
        moved[("memoryhub_requests_total", tuple(sorted({**status, "status": "403"}.items())))] == 1
    )
    assert value(after, "memoryhub_records_pending") >= 0

    every_label = " ".join(value for _, labels in after for _, value in labels)
    for private in ("acme", "globex", "user:alice", "prefs/currency", "Alice", "invoices"):
        assert private not in every_label, private


def test_metrics_answers_loopback_only_without_a_token():
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="::1").get("/metrics").status_code == 200
    refused = Client(REMOTE_ADDR="10.0.0.5").get("/metrics")
    assert refused.status_code == 403
    assert "METRICS_TOKEN" in refused.json()["detail"]


def test_with_a_token_metrics_needs_it_from_every_address(settings):
    settings.MEMORYHUB = {**settings.MEMORYHUB, "METRICS_TOKEN": "s3cret-token"}
    for address in ("127.0.0.1", "10.0.0.5"):
        client = Client(REMOTE_ADDR=address)
        missing = client.get("/metrics")
        assert missing.status_code == 401 and missing["WWW-Authenticate"].startswith("Bearer")
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
        right = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
        assert right.status_code == 200
        assert b"memoryhub_requests_total" in right.content


def test_metrics_is_not_the_apis_throttled_door(settings):
    settings.MEMORYHUB = {**settings.MEMORYHUB, "THROTTLE_RATE": "1/minute"}
    for _ in range(3):
        assert Client().get("/metrics").status_code == 200


def test_metrics_answers_without_the_state_when_the_database_is_away(monkeypatch):
    from django.db import OperationalError

    from memoryhub.services import health

    def away() -> dict:
        raise OperationalError("the database is away")

    monkeypatch.setattr(health, "state", away)
    samples = scrape()
    assert value(samples, "memoryhub_state_up") == 0
    assert ("memoryhub_records_pending", ()) not in samples
    assert any(name == "memoryhub_requests_total" for name, _ in samples)


def test_a_method_a_client_makes_up_is_no_label_of_its_own():
    Client().generic("FROBNICATE", "/livez")
    samples = scrape()
    methods = {
        dict(labels).get("method") for name, labels in samples if name == "memoryhub_requests_total"
    }
    assert "FROBNICATE" not in methods and "other" in methods


def test_a_misnamed_knowledge_base_is_an_invalid_erasure_not_a_failed_one(tenant):
    acme = key_client(tenant, can_read=True, can_write=True, can_forget=True)
    before = scrape()
    forget = {"key": "k", "sources": ["no-such-base"]}
    assert acme.post("/api/v1/domains/support/forget", forget, format="json").status_code == 400
    after = scrape()
    for outcome, moved in (("invalid", 1), ("failed", 0)):
        labels = {"kind": "key", "outcome": outcome}
        assert (
            value(after, "memoryhub_erasures_total", **labels)
            - value(before, "memoryhub_erasures_total", **labels)
            == moved
        ), outcome


def test_a_proxy_on_the_same_host_does_not_make_its_clients_loopback():
    proxied = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert proxied.get("/metrics").status_code == 403
    assert (
        Client(REMOTE_ADDR="127.0.0.1", HTTP_FORWARDED="for=203.0.113.9")
        .get("/metrics")
        .status_code
        == 403
    )
