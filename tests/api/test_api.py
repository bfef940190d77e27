"""The REST API: every status code, body shape and rule, against the real database."""

from __future__ import annotations

import json
import uuid
from unittest.mock import ANY

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from memoryhub import policy
from memoryhub.api.exceptions import exception_handler
from memoryhub.exceptions import PolicyDenied
from memoryhub.models import KnowledgeBase, MemoryRecord, Observation
from memoryhub.scope import tenant_scope
from memoryhub.services import knowledge_bases, write
from tests.conftest import without_receipt
from tests.factories import DomainFactory, MembershipFactory, UserFactory, create_api_key

pytestmark = pytest.mark.django_db


def client_for(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


@pytest.fixture
def api(tenant):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    return client_for(key)


def url(path: str, domain: str = "support") -> str:
    return f"/api/v1/domains/{domain}/{path}"


def post(client, path, body, domain="support", **extra):
    return client.post(url(path, domain), body, format="json", **extra)


# --- write --------------------------------------------------------------------------------


def test_write_returns_202_with_ids_and_per_kb_report(api, tenant):
    response = post(
        api,
        "records",
        {
            "items": [
                {"content": "Alice prefers EUR.", "key": "currency", "namespace": "user:alice"}
            ]
        },
    )
    assert response.status_code == 202
    body = response.json()
    assert (body["accepted"], body["refused"], body["failed"]) == (["memory"], [], {})
    [record] = body["records"]
    assert set(record) == {"id", "key", "status", "deduplicated", "source"}
    assert record["key"] == "currency"
    with tenant_scope(tenant.scope):
        assert MemoryRecord.objects.get(pk=record["id"]).namespace == "user:alice"


@pytest.mark.django_db(transaction=True)
def test_wait_returns_once_indexed(tenant):
    _, key = create_api_key(org=tenant.org, can_write=True)
    response = client_for(key).post(
        url("records") + "?wait=5", {"items": [{"content": "read your writes"}]}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["records"][0]["status"] == "indexed"


@pytest.mark.parametrize("wait", ["-1", "31", "soon"])
def test_wait_is_bounded(api, wait):
    response = api.post(url("records") + f"?wait={wait}", {"items": []}, format="json")
    assert response.status_code == 400
    assert "wait" in response.json()["errors"]


def test_validation_errors_name_item_and_field(api, tenant):
    response = post(api, "records", {"items": [{"content": "ok"}, {"content": "ok", "tags": [1]}]})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert body["errors"] == {"items[1].tags[0]": ["must be a string."]}
    with tenant_scope(tenant.scope):
        assert not MemoryRecord.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "items"),
        ({"items": "x"}, "items"),
        ({"items": [], "source": "memory", "sources": ["memory"]}, "sources"),
        ({"items": [], "source": 5}, "source"),
        ({"items": [], "colour": "red"}, "colour"),
        ({"items": [], "sources": ["nope"]}, "sources"),
    ],
)
def test_write_body_errors(api, body, field):
    response = post(api, "records", body)
    assert response.status_code == 400
    assert field in response.json()["errors"]


@pytest.mark.parametrize("body", [[], "text", 5, None])
def test_a_body_that_is_not_an_object_is_400(api, body):
    response = api.post(url("records"), json.dumps(body), content_type="application/json")
    assert response.status_code == 400


def test_malformed_json_is_400_json(api):
    response = api.post(url("query"), "{nope", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"


def test_unsupported_media_type_is_415(api):
    response = api.post(url("query"), "query=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


def test_read_only_kb_refuses_with_403_body(api, tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    response = post(api, "records", {"source": "handbook", "items": [{"content": "guess"}]})
    assert response.status_code == 403
    assert response.json() == {
        "code": "write_refused",
        "detail": "Knowledge base 'handbook' is read-only; 1 item(s) refused.",
        "source": "handbook",
        "n": 1,
    }
    empty = post(api, "records", {"source": "handbook", "items": []})
    assert (empty.status_code, empty.json()["n"]) == (403, 0)
    assert KnowledgeBase.unscoped.get(name="handbook").refused_writes == 2


def test_multi_kb_write_reports_buckets(api, tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    knowledge_bases.ensure_knowledge_base(
        tenant.scope, "lenient", read_only=True, on_write="ignore"
    )
    response = post(
        api, "records", {"sources": ["memory", "handbook", "lenient"], "items": [{"content": "x"}]}
    )
    assert response.status_code == 202
    body = response.json()
    assert body["accepted"] == ["memory"]
    assert body["refused"] == ["lenient"]
    assert body["failed"] == {"handbook": "write_refused"}


def test_oversize_body_is_413_json(api, settings):
    settings.MEMORYHUB = {"MAX_BODY_BYTES": 2048}
    response = post(api, "records", {"items": [{"content": "x" * 5000}]})
    assert response.status_code == 413
    assert response.json()["code"] == "request_too_large"
    assert MemoryRecord.unscoped.count() == 0


def test_a_policy_denied_that_reaches_the_api_is_a_403_naming_the_permission():
    """``PolicyDenied`` is no Django ``PermissionDenied`` (the HTTP client raises it
    without Django): the API's handler answers it as its own 403."""
    response = exception_handler(PolicyDenied(policy.Action.FORGET), {})
    assert response is not None
    assert response.status_code == 403
    assert response.data == {
        "code": "permission_denied",
        "detail": "This credential lacks the forget permission.",
    }


def test_throttle_is_429_with_retry_after(tenant, settings):
    settings.MEMORYHUB = {"THROTTLE_RATE": "3/min"}
    _, key = create_api_key(org=tenant.org)
    _, other_key = create_api_key(org=tenant.org)
    client = client_for(key)
    codes = [client.get(url("sources")).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    throttled = client.get(url("sources"))
    assert throttled.json()["code"] == "throttled"
    assert int(throttled["Retry-After"]) > 0
    assert client_for(other_key).get(url("sources")).status_code == 200  # per key


# --- query --------------------------------------------------------------------------------


def test_query_returns_items_and_grounding(api, tenant):
    post(
        api,
        "records",
        {"items": [{"content": "Refunds take 5 days.", "metadata": {"team": "billing"}}]},
    )
    response = post(api, "query", {"query": "refunds", "k": 3, "where": {"team": "billing"}})
    assert response.status_code == 200
    body = response.json()
    [item] = body["items"]
    assert set(item) >= {
        "id",
        "content",
        "source",
        "score",
        "metadata",
        "key",
        "kind",
        "namespace",
        "tags",
        "created_at",
    }
    assert item["source"] == "memory"
    assert body["grounding"] == "Relevant context:\n[memory] Refunds take 5 days."
    empty = post(api, "query", {"query": "refunds", "where": {"team": "nobody"}})
    assert empty.json() == {"items": [], "grounding": None, "reranked": False, "usage": ANY}


def test_query_explain_gives_each_items_legs(api):
    post(api, "records", {"items": [{"content": "Refunds take 5 days."}]})
    plain = post(api, "query", {"query": "refunds", "k": 2}).json()
    assert all("legs" not in item for item in plain["items"])
    [top] = post(api, "query", {"query": "refunds", "k": 2, "explain": True}).json()["items"]
    assert top["content"] == "Refunds take 5 days."
    # Not yet embedded here (no worker ran): the vector leg did not find them.
    assert top["legs"] == {"vector": None, "keyword": {"rank": 1, "score": ANY}}
    assert top["legs"]["keyword"]["score"] > 0


def test_query_filter_errors_name_the_path(api):
    response = post(
        api, "query", {"query": "x", "where": {"$and": [{"a": 1}, {"price": {"$gte": [1]}}]}}
    )
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "where.$and[1].price.$gte": ["$gte takes a number or a string."]
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "query"),
        ({"query": "x", "k": 0}, "k"),
        ({"query": "x", "mode": "psychic"}, "mode"),
        ({"query": "x", "format": "html"}, "format"),
        ({"query": "x", "sources": ["nope"]}, "sources"),
        ({"query": "x", "explain": "yes"}, "explain"),
    ],
)
def test_query_errors(api, body, field):
    response = post(api, "query", body)
    assert response.status_code == 400
    assert field in response.json()["errors"]


# --- records ------------------------------------------------------------------------------


def test_list_is_newest_first_filtered_and_cursor_paginated(api, tenant):
    write.write(
        tenant.scope,
        [
            {"content": f"note {n}", "key": f"k{n}", "tags": ["even"] if n % 2 == 0 else []}
            for n in range(5)
        ],
    )
    write.write(tenant.scope, [{"content": "alice note", "namespace": "user:alice"}])
    page = api.get(url("records") + "?page_size=2").json()
    assert [r["content"] for r in page["results"]] == ["alice note", "note 4"]
    second = api.get(page["next"]).json()
    assert [r["content"] for r in second["results"]] == ["note 3", "note 2"]
    assert [r["content"] for r in api.get(url("records") + "?tag=even").json()["results"]] == [
        "note 4",
        "note 2",
        "note 0",
    ]
    assert [
        r["content"] for r in api.get(url("records") + "?namespace=user:alice").json()["results"]
    ] == ["alice note"]
    assert [r["key"] for r in api.get(url("records") + "?key_prefix=k1").json()["results"]] == [
        "k1"
    ]
    assert api.get(url("records") + "?status=pending").json()["results"][0]["status"] == "pending"
    assert api.get(url("records") + "?colour=red").status_code == 400
    assert api.get(url("records") + "?kind=dream").status_code == 400


def test_list_ordered_by_update_puts_the_last_changed_record_first(api, tenant):
    write.write(tenant.scope, [{"content": f"note {n}", "key": f"k{n}"} for n in range(3)])
    write.write(tenant.scope, [{"content": "note 0, changed", "key": "k0"}])

    def listed(query: str) -> list[str]:
        return [r["key"] for r in api.get(url("records") + query).json()["results"]]

    assert listed("") == ["k2", "k1", "k0"]
    assert listed("?ordering=created") == ["k2", "k1", "k0"]
    assert listed("?ordering=updated") == ["k0", "k2", "k1"]
    page = api.get(url("records") + "?ordering=updated&page_size=2").json()
    assert [r["key"] for r in page["results"]] == ["k0", "k2"]
    assert [r["key"] for r in api.get(page["next"]).json()["results"]] == ["k1"]
    refused = api.get(url("records") + "?ordering=content")
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"ordering": ["must be one of created, updated."]}


def test_an_empty_key_prefix_lists_the_records_that_have_a_key(api, tenant):
    write.write(tenant.scope, [{"content": "keyed", "key": "k"}, {"content": "keyless"}])
    listed = api.get(url("records") + "?key_prefix=").json()["results"]
    assert [r["content"] for r in listed] == ["keyed"]
    assert len(api.get(url("records")).json()["results"]) == 2


def test_get_put_patch_delete_a_record(api, tenant):
    [record] = write.write(tenant.scope, [{"content": "old", "key": "k", "tags": ["a"]}]).records
    detail = url(f"records/{record.id}")
    got = api.get(detail).json()
    assert (got["content"], got["source"], got["tags"]) == ("old", "memory", ["a"])
    patched = api.patch(detail, {"tags": ["b"]}, format="json")
    assert patched.status_code == 200
    assert (patched.json()["content"], patched.json()["tags"]) == ("old", ["b"])
    replaced = api.put(detail, {"content": "new"}, format="json").json()
    assert (replaced["content"], replaced["tags"], replaced["key"], replaced["status"]) == (
        "new",
        [],
        None,
        "pending",
    )
    assert api.put(detail, {"content": "x", "namespace": "u:b"}, format="json").status_code == 400
    assert api.patch(detail, {"content": ""}, format="json").json()["errors"] == {
        "content": ["may not be blank."]
    }
    deleted = api.delete(detail)
    assert without_receipt(deleted.json()) == {
        "deleted": 1,
        "by_source": {"memory": 1},
        "refused": [],
    }
    assert api.get(detail).status_code == 404
    assert api.delete(detail).status_code == 404


def test_a_patch_reads_its_record_twice_and_answers_what_a_get_shows(api, tenant, other_tenant):
    """Once to check it, once locked to change it: the door read it twice more (a
    look for a 404, and the answer read again after the save)."""
    [record] = write.write(tenant.scope, [{"content": "old", "key": "k"}]).records
    [theirs] = write.write(other_tenant.scope, [{"content": "globex", "key": "k"}]).records
    detail = url(f"records/{record.id}")
    table = MemoryRecord._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        patched = api.patch(detail, {"tags": ["b"], "content": "new"}, format="json")
    assert patched.status_code == 200
    its_id = f""""{table}"."id" = '{uuid.UUID(record.id).hex}'"""
    reads = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith("SELECT") and its_id in q["sql"] and "NOT (" not in q["sql"]
    ]
    assert len(reads) == 2, "\n".join(r[-300:] for r in reads)
    shown = api.get(detail).json()
    assert patched.json() == shown
    assert (shown["content"], shown["tags"], shown["status"]) == ("new", ["b"], "pending")
    # Another org's record is a 404, and stays as it was.
    probe = api.patch(url(f"records/{theirs.id}"), {"content": "x"}, format="json")
    assert probe.status_code == 404
    assert MemoryRecord.unscoped.get(pk=theirs.id).content == "globex"


def test_update_key_collision_is_400(api, tenant):
    _, second = write.write(
        tenant.scope, [{"content": "a", "key": "a"}, {"content": "b", "key": "b"}]
    ).records
    response = api.patch(url(f"records/{second.id}"), {"key": "a"}, format="json")
    assert response.status_code == 400
    assert "key" in response.json()["errors"]


def test_reopening_a_superseded_fact_is_400_naming_valid_until(api, tenant, other_tenant):
    def fact(content: str, when: str) -> dict:
        return {"content": content, "key": "city", "valid_from": when, "supersede": True}

    [old] = write.write(tenant.scope, [fact("Paris", "2026-01-01T00:00:00Z")]).records
    write.write(tenant.scope, [fact("Lyon", "2026-05-01T00:00:00Z")])
    [theirs] = write.write(other_tenant.scope, [fact("Oslo", "2026-01-01T00:00:00Z")]).records
    for until in (None, "2026-06-01T00:00:00Z"):
        response = api.patch(url(f"records/{old.id}"), {"valid_until": until}, format="json")
        assert response.status_code == 400
        assert "valid_until" in response.json()["errors"]
    assert (
        api.patch(url(f"records/{theirs.id}"), {"valid_until": None}, format="json").status_code
        == 404
    )
    detail = api.get(url(f"records/{old.id}")).json()
    assert detail["valid_until"].startswith("2026-05-01")


def test_records_of_read_only_kbs_cannot_be_edited_through_the_api(api, tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    [record] = write.write(
        tenant.scope, [{"content": "curated"}], sources=["handbook"], principal=policy.SYSTEM
    ).records
    response = api.patch(url(f"records/{record.id}"), {"content": "edited"}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "write_refused"


@pytest.mark.parametrize("record_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000", "%00"])
def test_unknown_record_ids_are_404(api, record_id):
    response = api.get(url(f"records/{record_id}"))
    assert response.status_code == 404
    assert response.json()["code"] in ("record_not_found", "not_found")


# --- forget and sources -------------------------------------------------------------------


def test_forget(api, tenant):
    write.write(
        tenant.scope,
        [
            {"content": "alice 1", "namespace": "user:alice"},
            {"content": "bob", "namespace": "user:bob"},
        ],
    )
    empty = post(api, "forget", {})
    assert empty.status_code == 400
    assert empty.json()["code"] == "invalid"
    assert without_receipt(post(api, "forget", {"namespace": "user:alice"}).json()) == {
        "deleted": 1,
        "by_source": {"memory": 1},
        "refused": [],
    }
    assert post(api, "forget", {"all": "yes"}).status_code == 400
    assert post(api, "forget", {"everything": True}).status_code == 400
    assert post(api, "forget", {"all": True}).json()["deleted"] == 1


def test_sources_lists_kbs_with_policy_and_counts(api, tenant):
    knowledge_bases.ensure_knowledge_base(
        tenant.scope, "handbook", read_only=True, description="Curated"
    )
    write.write(tenant.scope, [{"content": "a"}, {"content": "b"}])
    assert api.get(url("sources")).json() == [
        {
            "name": "handbook",
            "description": "Curated",
            "read_only": True,
            "on_write": "refuse",
            "records": 0,
            "refused_writes": 0,
        },
        {
            "name": "memory",
            "description": "",
            "read_only": False,
            "on_write": "refuse",
            "records": 2,
            "refused_writes": 0,
        },
    ]


# --- auth, permissions, scope ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("grant", "method", "path", "body"),
    [
        ({"can_read": False}, "post", "query", {"query": "x"}),
        ({"can_read": False}, "get", "records", None),
        ({"can_read": False}, "get", "sources", None),
        ({"can_write": False}, "post", "records", {"items": []}),
        ({"can_forget": False}, "post", "forget", {"all": True}),
    ],
)
def test_missing_permission_is_403(tenant, grant, method, path, body):
    permissions = {"can_read": True, "can_write": True, "can_forget": True, **grant}
    _, key = create_api_key(org=tenant.org, **permissions)
    client = client_for(key)
    call = getattr(client, method)
    response = call(url(path), body, format="json") if body is not None else call(url(path))
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


def test_domain_bound_key_gets_404_elsewhere_and_it_is_observed(tenant):
    sales = DomainFactory(org=tenant.org, slug="sales")
    _, key = create_api_key(org=tenant.org, domain=sales, can_read=True)
    client = client_for(key)
    assert client.get(url("sources", "sales")).status_code == 200
    response = client.get(url("sources", "support"))
    assert response.status_code == 404
    assert response.json()["code"] == "domain_not_found"
    [refused] = Observation.unscoped.filter(kind="scope.refused")
    assert refused.org_id == tenant.org.pk
    assert refused.payload["reason"] == "outside the key's domain"


def test_revoked_key_is_401_everywhere(tenant):
    api_key, key = create_api_key(org=tenant.org)
    api_key.revoked = True
    api_key.save()
    for path in ("sources", "records"):
        assert client_for(key).get(url(path)).status_code == 401


def test_method_not_allowed_is_405_json(api):
    response = api.get(url("query"))
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_unknown_api_path_is_json_404(api):
    response = api.get("/api/v1/domains/support/nothing/here")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_staff_session_uses_memberships(tenant, other_tenant):
    member = MembershipFactory(org=tenant.org, user__is_staff=True).user
    client = APIClient()
    client.force_login(member)
    assert client.get(url("sources")).status_code == 200
    assert client.get(url("sources") + "?org=globex").status_code == 404
    viewer = MembershipFactory(org=tenant.org, role="viewer", user__is_staff=True).user
    client.force_login(viewer)
    assert client.post(url("records"), {"items": []}, format="json").status_code == 403
    outsider = UserFactory(is_staff=False)
    client.force_login(outsider)
    assert client.get(url("sources")).status_code == 403


def test_browsable_api_renders_for_staff(tenant):

    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    member = MembershipFactory(org=tenant.org, user__is_staff=True).user
    client = APIClient()
    client.force_login(member)
    response = client.get(url("sources"), HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "<title>Sources – Django REST framework</title>" in page
    assert "&quot;name&quot;: &quot;handbook&quot;" in page  # the domain's own source


def test_wait_does_not_hold_the_request_when_no_worker_is_seen(api, tenant):
    """Tasks go to a broker nobody consumes: ?wait returns at once, saying why."""
    import time

    from celery import current_app

    from memoryhub.models import WorkerHeartbeat

    WorkerHeartbeat.objects.all().delete()
    current_app.conf.task_always_eager = False
    try:
        started = time.monotonic()
        response = api.post(
            url("records") + "?wait=30", {"items": [{"content": "nobody indexes"}]}, format="json"
        )
        elapsed = time.monotonic() - started
    finally:
        current_app.conf.task_always_eager = True
    assert response.status_code == 202
    assert response.json()["pending_reason"] == "no_worker"
    assert response.json()["records"][0]["status"] == "pending"
    assert elapsed < 20  # it did not wait the 30 s for a worker that is not there


@pytest.mark.parametrize("path", ["domains/%0A/records", "domains/x%0A/namespaces", "%0A"])
def test_a_path_holding_a_line_break_is_a_json_404(api_client, path):
    """Found by the door fuzzer: the catch-all's ``.`` did not match a line break, so
    such a path fell through to Django's HTML 404."""
    response = api_client.get(f"/api/v1/{path}")
    assert (response.status_code, response["Content-Type"]) == (404, "application/json")
