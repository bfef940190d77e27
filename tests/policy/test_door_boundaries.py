"""Each door's input boundary: what an attack from outside found, one test per finding.

Every argument passes its door's boundary (``memoryhub.boundary``) before any database
call: a NUL byte, a control character, a string too long, JSON nested too deeply or an
id that is not an id is the door's clear error naming the argument (a JSON 400, a tool
error ``invalid``, a JSON-RPC error with the request's id, an admin 400), never a 500
or a hidden ``server_error``. JSON-RPC framing follows the specification, and the
failed-authentication limit holds when many clients guess at once.
"""

from __future__ import annotations

import json
import sys
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from memoryhub.api import throttling
from memoryhub.models import MemoryRecord
from memoryhub.services import knowledge_bases, write
from tenants.models import ApiKey, Domain
from tests.factories import MembershipFactory, create_api_key

pytestmark = pytest.mark.django_db

EVERYTHING = {"can_read": True, "can_write": True, "can_forget": True}


def rpc(client: APIClient, message: Any) -> Any:
    """POST one JSON-RPC message to ``/mcp/``; text or bytes go as they are."""
    text = message if isinstance(message, str | bytes) else json.dumps(message)
    return client.post("/mcp/", text, content_type="application/json")


def tools_call(name: Any, arguments: Any, request_id: int = 7) -> dict[str, Any]:
    """The ``tools/call`` request of tool ``name`` with ``arguments``."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


@pytest.fixture
def mcp(tenant):
    _, key = create_api_key(org=tenant.org, **EVERYTHING)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def call_tool(client: APIClient, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = rpc(client, tools_call(name, arguments))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == 7
    return body["result"]


TOOL_ARGUMENTS = {
    "memory_query": {"query": "refunds"},
    "memory_write": {"items": [{"content": "x"}]},
    "memory_get": {"id": "00000000-0000-0000-0000-000000000000"},
    "memory_update": {"id": "00000000-0000-0000-0000-000000000000", "fields": {"content": "y"}},
    "memory_history": {"id": "00000000-0000-0000-0000-000000000000"},
    "memory_timeline": {"id": "00000000-0000-0000-0000-000000000000"},
    "memory_forget": {"namespace": "user:alice"},
    "memory_sources": {},
}


# --- MCP tool arguments and resource URIs ---------------------------------------------------


@pytest.mark.parametrize("tool", sorted(TOOL_ARGUMENTS))
@pytest.mark.parametrize("domain", ["sup\x00port", "sup\x01port", "support\n", "x" * 300])
def test_a_hostile_domain_argument_is_an_invalid_argument_of_every_tool(mcp, tenant, tool, domain):
    result = call_tool(mcp, tool, {"domain": domain, **TOOL_ARGUMENTS[tool]})
    assert result["isError"] is True
    assert result["structuredContent"]["code"] == "invalid", result
    assert "domain" in result["structuredContent"]["errors"]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"query": "refunds", "namespaces": ["user:\x00alice"]}, "namespaces[0]"),
        ({"query": "refunds", "sources": ["mem\x00ory"]}, "sources[0]"),
        ({"query": "refunds", "where": {"te\x00am": "x"}}, "where"),
    ],
)
def test_a_nul_anywhere_in_the_arguments_names_its_path(mcp, tenant, arguments, field):
    result = call_tool(mcp, "memory_query", {"domain": "support", **arguments})
    assert result["isError"] is True
    assert result["structuredContent"]["code"] == "invalid", result
    assert any(path.startswith(field) for path in result["structuredContent"]["errors"]), result


def test_arguments_nested_too_deeply_are_refused_before_the_service(mcp, tenant):
    deep: Any = "x"
    for _ in range(200):
        deep = {"a": deep}
    result = call_tool(
        mcp, "memory_write", {"domain": "support", "items": [{"content": "x", "metadata": deep}]}
    )
    assert result["structuredContent"]["code"] == "invalid", result
    assert MemoryRecord.unscoped.count() == 0


@pytest.mark.parametrize(
    "uri",
    [
        "memoryhub://sup%00port/memory",
        "memoryhub://support/mem%00ory",
        "memoryhub://support/memory/%00",
    ],
)
def test_a_nul_in_a_resource_uri_is_invalid_params(mcp, tenant, uri):
    response = rpc(
        mcp, {"jsonrpc": "2.0", "id": "r1", "method": "resources/read", "params": {"uri": uri}}
    )
    body = response.json()
    assert body["id"] == "r1"
    assert body["error"]["code"] == -32602, body  # invalid params, not -32603
    assert body["error"]["data"]["code"] == "invalid"
    assert "uri" in body["error"]["data"]["errors"]


# --- JSON-RPC framing ------------------------------------------------------------------------


def test_an_empty_body_is_a_parse_error_not_a_notification(mcp):
    response = rpc(mcp, "")
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["code"] == -32700
    assert body["id"] is None


@pytest.mark.parametrize("version", ["1.0", 2.0, None, "2.0 "])
def test_only_jsonrpc_2_0_is_answered(mcp, version):
    response = rpc(mcp, {"jsonrpc": version, "id": 3, "method": "ping"})
    body = response.json()
    assert body["id"] == 3
    assert body["error"]["code"] == -32600, body


def test_a_message_without_jsonrpc_is_invalid(mcp):
    body = rpc(mcp, {"id": 3, "method": "ping"}).json()
    assert body == {"jsonrpc": "2.0", "id": 3, "error": body["error"]}
    assert body["error"]["code"] == -32600


def test_a_message_that_is_neither_request_notification_nor_response_is_invalid(mcp):
    response = rpc(mcp, {"jsonrpc": "2.0"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


def test_duplicate_keys_are_refused_and_nothing_runs(mcp, tenant):
    text = (
        '{"jsonrpc": "2.0", "id": 1, "method": "ping", "method": "tools/call", '
        '"params": {"name": "memory_write", "arguments": {"domain": "support", '
        '"items": [{"content": "sneaked in"}]}}}'
    )
    response = rpc(mcp, text)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700
    assert "method" in response.json()["error"]["message"]
    assert MemoryRecord.unscoped.count() == 0


def test_duplicate_keys_inside_arguments_are_refused_too(mcp, tenant):
    text = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
        '"memory_write", "arguments": {"domain": "support", "items": [{"content": "a", '
        '"content": "b"}]}}}'
    )
    assert rpc(mcp, text).json()["error"]["code"] == -32700
    assert MemoryRecord.unscoped.count() == 0


@pytest.mark.parametrize("batch", [[], [{"jsonrpc": "2.0", "id": 1, "method": "ping"}]])
def test_batches_are_refused_as_one_invalid_request(mcp, batch):
    response = rpc(mcp, batch)
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["code"] == -32600 and body["id"] is None


def test_a_bad_key_error_echoes_the_request_id(tenant):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer nope.nope")
    response = rpc(client, {"jsonrpc": "2.0", "id": "abc-1", "method": "ping"})
    assert response.status_code == 401
    assert response.json()["id"] == "abc-1"


def test_a_throttled_error_echoes_the_request_id(settings, tenant):
    settings.MEMORYHUB = {"THROTTLE_RATE": "1/min"}
    _, key = create_api_key(org=tenant.org, **EVERYTHING)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert rpc(client, {"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 200
    response = rpc(client, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
    assert response.status_code == 429
    assert response.json()["id"] == 2


# --- REST ------------------------------------------------------------------------------------


def test_a_long_tag_filter_says_it_is_too_long(tenant):
    _, key = create_api_key(org=tenant.org, **EVERYTHING)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    response = client.get("/api/v1/domains/support/records", {"tag": "t" * 30_000})
    assert response.status_code == 400
    assert response.json()["errors"] == {"tag": ["is longer than 255 characters."]}


def test_a_control_character_in_a_list_filter_is_named(tenant):
    _, key = create_api_key(org=tenant.org, **EVERYTHING)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    response = client.get("/api/v1/domains/support/records", {"namespace": "user:\x00a"})
    assert response.status_code == 400
    assert "namespace" in response.json()["errors"]


# --- the admin -------------------------------------------------------------------------------


@pytest.fixture
def operator(tenant) -> Client:
    user = MembershipFactory(org=tenant.org, role="operator", user__is_staff=True).user
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("changelist", "action", "selected"),
    [
        ("/admin/tenants/domain/", "erase_memory", "abc"),
        ("/admin/tenants/domain/", "erase_memory", "99999999999999999999999"),
        ("/admin/tenants/org/", "erase_memory", "1\x00"),
        ("/admin/tenants/domain/", "delete_selected", "abc"),
        ("/admin/memoryhub/memoryrecord/", "reembed", "not-a-uuid"),
        ("/admin/memoryhub/memoryrecord/", "delete_selected", "not-a-uuid"),
        ("/admin/memoryhub/knowledgebase/", "delete_selected", "x"),
        ("/admin/tenants/apikey/", "revoke_keys", "abc\x00def"),
        ("/admin/tenants/apikey/", "delete_selected", "abc\x00def"),
    ],
)
def test_an_action_on_an_id_that_is_not_an_id_is_a_400_naming_it(
    operator, tenant, changelist, action, selected
):
    write.write(tenant.scope, [{"content": "kept"}])
    before = MemoryRecord.unscoped.count()
    response = operator.post(changelist, {"action": action, "_selected_action": [selected]})
    assert response.status_code == 400, response.status_code
    assert b"_selected_action" in response.content
    assert MemoryRecord.unscoped.count() == before
    assert Domain.objects.filter(pk=tenant.domain.pk).exists()


def test_an_action_with_valid_and_invalid_ids_changes_nothing(operator, tenant):
    _, _ = create_api_key(org=tenant.org, name="keep me")
    api_key = ApiKey.objects.get(name="keep me")
    response = operator.post(
        "/admin/tenants/apikey/",
        {"action": "revoke_keys", "_selected_action": [api_key.pk, "bad\x00id"]},
    )
    assert response.status_code == 400
    api_key.refresh_from_db()
    assert api_key.revoked is False


def test_deeply_nested_metadata_in_the_record_form_is_a_form_error(operator, tenant):
    kb = knowledge_bases.ensure_knowledge_base(tenant.scope, "memory")
    metadata = "[" * 950 + "]" * 950
    response = operator.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": kb.pk,
            "namespace": "",
            "kind": "semantic",
            "content": "deep",
            "metadata": '{"a": ' + metadata + "}",
            "tags": "",
        },
    )
    assert response.status_code == 200  # the form again, with the error
    assert b"nested too deeply" in response.content
    assert MemoryRecord.unscoped.count() == 0


@pytest.mark.parametrize(
    "path",
    [
        "/admin/tenants/apikey/abc%00def/change/",
        "/admin/tenants/apikey/abc%00def/delete/",
        "/admin/tenants/apikey/abc%00def/history/",
        "/admin/memoryhub/memoryrecord/%00/restore/1/",
    ],
)
@pytest.mark.parametrize("method", ["get", "post"])
def test_a_nul_in_an_object_id_is_never_a_500(operator, path, method):
    response = getattr(operator, method)(path)
    assert response.status_code in (302, 400, 404, 405), response.status_code


def test_a_nul_in_a_posted_field_of_a_custom_page_is_a_form_error(operator, tenant):
    response = operator.post(
        "/admin/memoryhub/memoryrecord/erase-subject/",
        {"org": tenant.org.pk, "domain": tenant.domain.pk, "namespace": "user:\x00alice"},
    )
    assert response.status_code in (200, 400)


# --- the failed-authentication limit ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_failed_authentication_limit_holds_under_50_concurrent_clients(
    settings, tenant, monkeypatch
):
    settings.MEMORYHUB = {"AUTH_FAILURE_RATE": "30/min"}
    # The middle of a window: across a window's edge the previous window's weight
    # slides, and a sliding window admits a little more within one wall-clock minute.
    monkeypatch.setattr(throttling, "time", SimpleNamespace(time=lambda: 1_200_030.0))
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so a check-then-count race shows
    statuses: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(50)

    def guess(n: int) -> None:
        client = APIClient(REMOTE_ADDR="203.0.113.50")
        start.wait()
        for attempt in range(3):
            client.credentials(HTTP_AUTHORIZATION=f"Api-Key guess{n}x{attempt}.nope")
            response = client.get("/api/v1/whoami")
            with lock:
                statuses.append(response.status_code)
        connection.close()

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(50)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch_interval)
    assert len(statuses) == 150
    assert set(statuses) == {401, 429}
    assert statuses.count(401) <= 30 * 1.05
    assert statuses.count(401) >= 30  # the limit is the limit: 30 guesses get their 401


def test_a_rest_body_giving_a_key_twice_is_a_parse_error_and_writes_nothing(tenant):
    _, key = create_api_key(org=tenant.org, **EVERYTHING)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    response = client.post(
        "/api/v1/domains/support/records",
        '{"items": [{"content": "a"}], "items": [{"content": "b"}]}',
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
    assert "duplicate key 'items'" in response.json()["detail"]
    assert MemoryRecord.unscoped.count() == 0


@pytest.mark.parametrize(
    "search",
    [" ".join(str(n) for n in range(33)), "y" * 1001, json.dumps(list(range(10_000)))],
)
def test_a_search_longer_than_a_person_types_is_a_400_naming_q(operator, tenant, search):
    """The admin search costs one ILIKE per word and field, so a search of thousands of
    words keeps PostgreSQL busy for minutes; the search box takes 32 words."""
    response = operator.get("/admin/memoryhub/memoryrecord/", {"q": search})
    assert response.status_code == 400
    assert response.content.startswith(b"q: at most 32 words")


def test_a_search_of_32_words_is_served(operator, tenant):
    [record] = write.write(
        tenant.scope, [{"content": " ".join(f"w{n}" for n in range(32))}]
    ).records
    search = " ".join(f"w{n}" for n in range(32))
    response = operator.get("/admin/memoryhub/memoryrecord/", {"q": search})
    assert response.status_code == 200
    assert f"/memoryrecord/{record.id}/change/".encode() in response.content


def test_metadata_typed_with_a_lone_surrogate_is_a_form_error_shown_as_typed(operator, tenant):
    kb = knowledge_bases.ensure_knowledge_base(tenant.scope, "memory")
    response = operator.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": kb.pk,
            "kind": "semantic",
            "content": "x",
            "metadata": '{"a": "\\ud800"}',
        },
    )
    assert response.status_code == 200  # the form again; the page encodes
    assert b"unpaired UTF-16 surrogate" in response.content
    assert b"{&quot;a&quot;: &quot;\\ud800&quot;}" in response.content
    assert MemoryRecord.unscoped.count() == 0
