"""Listing a knowledge base's namespaces and key directories (GET namespaces), a query's
key_prefix, and the records list's where: paged, bounded, per tenant."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryhub import policy
from memoryhub.models import MemoryRecord
from memoryhub.services import records, write
from tests.factories import key_client

pytestmark = pytest.mark.django_db

READ = {"can_read": True}


def put(tenant: Any, namespace: str, key: str | None, content: str = "note", **extra: Any) -> None:
    item = {"content": content, "namespace": namespace, "key": key, **extra}
    write.write(tenant.scope, [item], principal=policy.SYSTEM)


@pytest.fixture
def filled(tenant, other_tenant):
    """acme: four namespaces, keys in directories; globex: the same names, other keys."""
    for namespace, key in [
        ("user:alice", "memories/#a"),
        ("user:alice", "memories/#b"),
        ("user:alice", "memories/deep/#c"),
        ("user:alice", "prefs/#theme"),
        ("user:alice", "loose"),
        ("user:bob", "memories/#a"),
        ("", None),
        ("team:x", None),
    ]:
        put(tenant, namespace, key, f"note {namespace} {key}")
    put(other_tenant, "user:alice", "secret/#x")
    put(other_tenant, "user:zed", None)
    return tenant


def listing(client: Any, **params: Any) -> Any:
    return client.get("/api/v1/domains/support/namespaces", params)


def walk(client: Any, **params: Any) -> list[dict[str, str]]:
    """Every row, page by page."""
    rows: list[dict[str, str]] = []
    cursor = None
    while True:
        page = listing(client, **params, **({"cursor": cursor} if cursor else {}))
        assert page.status_code == 200, page.json()
        rows += page.json()["results"]
        cursor = page.json()["next"]
        if cursor is None:
            return rows


def test_namespaces_are_listed_in_code_point_order_for_the_keys_org_only(filled, other_tenant):
    acme = key_client(filled, **READ)
    assert walk(acme) == [
        {"namespace": ""},
        {"namespace": "team:x"},
        {"namespace": "user:alice"},
        {"namespace": "user:bob"},
    ]
    globex = key_client(other_tenant, **READ)
    assert walk(globex) == [{"namespace": "user:alice"}, {"namespace": "user:zed"}]


def test_pages_of_one_row_walk_the_same_listing(filled):
    client = key_client(filled, **READ)
    first = listing(client, limit=1).json()
    assert first["results"] == [{"namespace": ""}] and first["next"]
    assert walk(client, limit=1) == walk(client)
    assert walk(client, prefix="user:", limit=1) == [
        {"namespace": "user:alice"},
        {"namespace": "user:bob"},
    ]


def test_a_delimiter_lists_each_key_directory_once(filled, other_tenant):
    client = key_client(filled, **READ)
    everything = walk(client, delimiter="#")
    assert everything == [
        {"namespace": "user:alice", "key_prefix": "memories/#"},
        {"namespace": "user:alice", "key_prefix": "memories/deep/#"},
        {"namespace": "user:alice", "key_prefix": "prefs/#"},
        {"namespace": "user:bob", "key_prefix": "memories/#"},
    ]
    assert walk(client, delimiter="#", limit=1) == everything
    assert walk(client, delimiter="#", namespace="user:alice", key_prefix="memories/") == [
        {"namespace": "user:alice", "key_prefix": "memories/#"},
        {"namespace": "user:alice", "key_prefix": "memories/deep/#"},
    ]
    # The first delimiter after the key prefix ends the directory.
    assert walk(client, delimiter="/", namespace="user:alice", key_prefix="memories/") == [
        {"namespace": "user:alice", "key_prefix": "memories/deep/"},
    ]
    assert walk(key_client(other_tenant, **READ), delimiter="#") == [
        {"namespace": "user:alice", "key_prefix": "secret/#"},
    ]


def test_expired_records_name_no_namespace(tenant):
    put(tenant, "user:gone", "k/#1", expires_at=(timezone.now() + timedelta(hours=1)).isoformat())
    MemoryRecord.unscoped.update(expires_at=timezone.now() - timedelta(seconds=1))
    put(tenant, "user:here", "k/#1")
    client = key_client(tenant, **READ)
    assert walk(client) == [{"namespace": "user:here"}]
    assert walk(client, delimiter="#") == [{"namespace": "user:here", "key_prefix": "k/#"}]


def test_a_page_is_one_statement_that_seeks_the_path_index(tenant):
    for start in range(0, 300, 100):
        items = [
            {"content": f"n{i}", "namespace": f"user:{i:04d}", "key": f"d{i % 3}/#k"}
            for i in range(start, start + 100)
        ]
        write.write(tenant.scope, items, principal=policy.SYSTEM)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryhub_memoryrecord")
    with CaptureQueriesContext(connection) as queries:
        page = records.list_namespaces(tenant.scope, {"delimiter": "#", "limit": "5"})
    assert len(page.rows) == 5 and page.next
    walks = [q["sql"] for q in queries.captured_queries if "WITH RECURSIVE" in q["sql"]]
    assert len(walks) == 1
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + walks[0])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "memoryhub_record_path_idx" in plan


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"delimiter": "ab"}, "delimiter"),
        ({"key_prefix": "x/"}, "key_prefix"),
        ({"namespace": "a", "prefix": "b"}, "prefix"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"sort": "up"}, "sort"),
        ({"source": "nope"}, "sources"),
        ({"delimiter": "\U0010ffff"}, "delimiter"),  # no successor
        ({"delimiter": "\ud7ff"}, "delimiter"),  # its successor is a surrogate
        ({"delimiter": "\n"}, "delimiter"),
        # A forged cursor: the JSON of ["\ud800"], a lone surrogate.
        ({"cursor": base64.urlsafe_b64encode(b'["\\ud800"]').decode()}, "cursor"),
        (
            {"cursor": base64.urlsafe_b64encode(b'["a", "\\ud800"]').decode(), "delimiter": "#"},
            "cursor",
        ),
    ],
)
def test_bad_parameters_are_a_400_naming_them(tenant, params, field):
    response = listing(key_client(tenant, **READ), **params)
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()


def test_the_listing_needs_the_read_permission_and_the_keys_own_domain(tenant, other_tenant):
    put(other_tenant, "user:alice", "secret/#x")
    assert listing(key_client(tenant, can_write=True, can_read=False)).status_code == 403
    from tests.factories import DomainFactory

    DomainFactory(org=other_tenant.org, slug="legal")
    foreign = key_client(tenant, **READ).get("/api/v1/domains/legal/namespaces")
    assert foreign.status_code == 404
    assert foreign.json()["code"] == "domain_not_found"


def test_a_query_with_key_prefix_finds_only_those_keys(filled, other_tenant):
    client = key_client(filled, **READ)

    def keys(**body: Any) -> list[str | None]:
        response = client.post(
            "/api/v1/domains/support/query",
            {"query": "note", "namespaces": ["user:alice"], "mode": "keyword", **body},
            format="json",
        )
        assert response.status_code == 200, response.json()
        return sorted(item["key"] for item in response.json()["items"])

    assert keys(key_prefix="memories/") == ["memories/#a", "memories/#b", "memories/deep/#c"]
    assert keys(key_prefix="memories/#") == ["memories/#a", "memories/#b"]
    assert keys(key_prefix="") == [
        "loose",
        "memories/#a",
        "memories/#b",
        "memories/deep/#c",
        "prefs/#theme",
    ]
    assert keys(key_prefix="secret/") == []  # globex's key
    bad = client.post(
        "/api/v1/domains/support/query", {"query": "note", "key_prefix": 5}, format="json"
    )
    assert bad.status_code == 400 and "key_prefix" in bad.json()["errors"]


def test_the_records_list_takes_a_where_filter(tenant, other_tenant):
    put(tenant, "user:alice", "a", metadata={"team": "billing", "n": 3})
    put(tenant, "user:alice", "b", metadata={"team": "support", "n": 7})
    put(other_tenant, "user:alice", "c", metadata={"team": "billing", "n": 3})
    client = key_client(tenant, **READ)

    def keys(where: str) -> list[str]:
        response = client.get("/api/v1/domains/support/records", {"where": where})
        assert response.status_code == 200, response.json()
        return sorted(row["key"] for row in response.json()["results"])

    assert keys('{"team": "billing"}') == ["a"]
    assert keys('{"n": {"$gt": 4}}') == ["b"]
    hostile = ["[" * 5000, '{"a": "\\ud800"}', '{"\\ud800": 1}', '{"a": 1, "a": 2}']
    for bad in ("{not json", '{"n": {"$near": 1}}', "[1]", *hostile):
        response = client.get("/api/v1/domains/support/records", {"where": bad})
        assert response.status_code == 400
        assert any(path.startswith("where") for path in response.json()["errors"]), bad
