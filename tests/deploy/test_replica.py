"""The read replica: memory reads go to it, writes and reads after a write to the
primary."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from memoryhub.models import MemoryRecord, Observation
from memoryhub.routing import replica_reads
from tenants.models import Domain
from tests.factories import create_api_key

# --- read replica --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replica_alias(django_db_setup) -> Iterator[str]:
    """A ``replica`` alias mirroring the test database, in a read-only session.

    Added before the test cases start, so they can declare it in ``databases``.
    """
    alias = copy.deepcopy(connections["default"].settings_dict)
    alias["TEST"] = {**alias.get("TEST", {}), "MIRROR": "default"}
    # A hot standby refuses writes; so does this session, so a misrouted write fails.
    options = {**alias.get("OPTIONS", {}), "options": "-c default_transaction_read_only=on"}
    alias["OPTIONS"] = options
    connections.settings["replica"] = alias
    try:
        yield "replica"
    finally:
        connections["replica"].close()
        del connections["replica"]
        del connections.settings["replica"]


@pytest.fixture
def replica(replica_alias: str, settings) -> str:
    settings.DATABASE_ROUTERS = ["config.routers.ReplicaRouter"]
    return replica_alias


ON_REPLICA = pytest.mark.django_db(transaction=True, databases=["default", "replica"])


def memory_queries(alias: str, context: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in context.captured_queries if "memoryhub_memoryrecord" in q["sql"]]


@ON_REPLICA
def test_get_endpoints_read_memory_from_the_replica(tenant, replica):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    written = client.post(
        "/api/v1/domains/support/records?wait=5",
        {"items": [{"content": "Replicated fact", "namespace": "user:bob"}]},
        format="json",
    )
    assert written.status_code == 200
    record_id = written.json()["records"][0]["id"]
    with (
        CaptureQueriesContext(connections["default"]) as primary,
        CaptureQueriesContext(connections[replica]) as secondary,
    ):
        listed = client.get("/api/v1/domains/support/records?namespace=user:bob")
        one = client.get(f"/api/v1/domains/support/records/{record_id}")
        sources = client.get("/api/v1/domains/support/sources")
    assert listed.json()["results"][0]["content"] == "Replicated fact"
    assert one.json()["id"] == record_id
    assert sources.json()[0]["name"] == "memory"
    assert memory_queries(replica, secondary)
    assert not memory_queries("default", primary)
    # Tenancy and keys (revocation) are read from the primary.
    assert not any("tenants_" in q["sql"] for q in secondary.captured_queries)


@ON_REPLICA
def test_writes_queries_and_forgets_use_the_primary(tenant, replica):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    with CaptureQueriesContext(connections[replica]) as secondary:
        written = client.post(
            "/api/v1/domains/support/records?wait=5",
            {"items": [{"content": "Primary fact", "namespace": "user:eve"}]},
            format="json",
        )
        found = client.post(
            "/api/v1/domains/support/query",
            {"query": "primary fact", "namespaces": ["user:eve"]},
            format="json",
        )
        forgotten = client.post(
            "/api/v1/domains/support/forget", {"namespace": "user:eve"}, format="json"
        )
    assert written.status_code == 200
    assert found.json()["items"][0]["content"] == "Primary fact"
    assert forgotten.json()["deleted"] == 1
    assert secondary.captured_queries == []


@ON_REPLICA
def test_replica_reads_stop_inside_a_transaction_and_after_a_write(tenant, replica):
    records = MemoryRecord.unscoped.all()
    assert records.db == "default"  # not marked read-only
    with replica_reads():
        assert records.db == replica
        assert Domain.objects.all().db == "default"
        with transaction.atomic():
            assert records.db == "default"
        assert records.db == replica
        Observation.unscoped.create(kind="scope.refused", org=tenant.org, count=1)
        assert records.db == "default"
    with replica_reads():
        assert records.db == replica
