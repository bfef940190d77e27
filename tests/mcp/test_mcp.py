"""The MCP door, through the official Python MCP client over HTTP to a live server.

Every tool, the resources, the transport's refusals, and the cross-tenant matrix, at
both protocol eras the endpoint serves: 2026-07-28 (no handshake, every request carrying
its envelope; the client finds it with ``server/discover``) and the ``initialize``
handshake of 2025-11-25. The same keys get the same answers (codes, and no content of
anyone else's) as through the REST API, and nothing changes that should not.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import PROTOCOL_VERSION_META_KEY
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from rest_framework.test import APIClient

from memoryhub.conf import memoryhub_settings
from memoryhub.mcp.tools import TOOLS
from memoryhub.models import KnowledgeBase, MemoryRecord, Observation
from memoryhub.scope import Scope
from memoryhub.services import knowledge_bases, write
from tests.factories import DomainFactory, OrgFactory, create_api_key

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "globex-secret"
EVERYTHING = {"can_read": True, "can_write": True, "can_forget": True}

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
#: How the official client is told to reach each revision: "auto" probes
#: ``server/discover`` and stays at 2026-07-28 if the server answers; "legacy" is the
#: ``initialize`` handshake, which offers the newest handshake revision.
CLIENT_MODES = {MODERN: "auto", HANDSHAKE: "legacy"}


@pytest.fixture(params=[MODERN, HANDSHAKE])
def revision(request: pytest.FixtureRequest) -> str:
    """Each protocol revision in turn, as the official client speaks it."""
    return request.param


def session(
    live_server: Any,
    key: str,
    work: Callable[[Client], Awaitable[Any]],
    scheme: str = "Bearer",
    revision: str = MODERN,
    mode: str | None = None,
) -> Any:
    """Run ``work`` with a connected MCP client of ``key`` (as an agent would) that
    speaks ``revision``."""

    async def main() -> Any:
        headers = {"Authorization": f"{scheme} {key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(f"{live_server.url}/mcp/", http_client=http)
            async with Client(transport, mode=mode or CLIENT_MODES[revision]) as client:
                assert client.protocol_version == revision
                return await work(client)

    return asyncio.run(main())


def calls(
    live_server: Any,
    key: str,
    *steps: tuple[str, dict],
    scheme: str = "Bearer",
    revision: str = MODERN,
) -> list[Any]:
    """Call the tools in order with one client; each result as ``(is_error, body)``."""

    async def work(client: Client) -> list[Any]:
        results = []
        for name, arguments in steps:
            result = await client.call_tool(name, arguments)
            body = json.loads(result.content[0].text)
            assert body == result.structured_content  # the text and the structure agree
            results.append((result.is_error, body))
        return results

    return session(live_server, key, work, scheme, revision)


def call(
    live_server: Any, key: str, name: str, revision: str = MODERN, **arguments: Any
) -> tuple[bool, dict]:
    return calls(live_server, key, (name, arguments), revision=revision)[0]


@pytest.fixture
def world():
    """acme (support, sales) and globex (support, legal), a record in each, and a
    read-only handbook in each; acme's keys of every kind."""
    orgs = {slug: OrgFactory(slug=slug) for slug in ("acme", "globex")}
    domains = {
        (org, slug): DomainFactory(org=orgs[org], slug=slug)
        for org, slugs in {"acme": ("support", "sales"), "globex": ("support", "legal")}.items()
        for slug in slugs
    }
    records = {}
    for (org, slug), domain in domains.items():
        scope = Scope.for_domain(domain)
        knowledge_bases.ensure_knowledge_base(scope, "handbook")
        write.write(scope, [{"content": f"{org} handbook page"}], sources=["handbook"])
        content = f"{SECRET}-{slug}" if org == "globex" else f"acme-{slug} notes"
        [record] = write.write(
            scope, [{"content": content, "key": "shared-key", "namespace": "user:alice"}]
        ).records
        records[(org, slug)] = record.id
    KnowledgeBase.unscoped.filter(name="handbook").update(read_only=True)
    support = domains[("acme", "support")]
    keys = {
        "unbound": create_api_key(org=orgs["acme"], **EVERYTHING),
        "support": create_api_key(org=orgs["acme"], domain=support, **EVERYTHING),
        "read-only": create_api_key(org=orgs["acme"], domain=support, can_read=True),
        "write-only": create_api_key(
            org=orgs["acme"], domain=support, can_read=False, can_write=True
        ),
        "no-forget": create_api_key(
            org=orgs["acme"], domain=support, can_read=True, can_write=True
        ),
        "globex": create_api_key(org=orgs["globex"], **EVERYTHING),
    }
    return domains, records, {name: plaintext for name, (_, plaintext) in keys.items()}, keys


def snapshot() -> list[tuple]:
    return sorted(
        MemoryRecord.unscoped.values_list("id", "content", "key", "status", "updated_at")
    ) + sorted(KnowledgeBase.unscoped.values_list("id", "name", "refused_writes"))


def org_snapshot(org: str) -> list[tuple]:
    return sorted(
        MemoryRecord.unscoped.filter(org__slug=org).values_list("id", "content", "updated_at")
    )


def rest(key: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    response = getattr(client, method)(f"/api/v1/domains/{path}", body, format="json")
    return response.status_code, response.json()


# --- the tools ----------------------------------------------------------------------------


def test_tools_are_listed_with_the_bounds_of_the_settings(live_server, world, revision):
    _, _, keys, _ = world

    async def listing(client: Client) -> dict[str, Any]:
        return {tool.name: tool for tool in (await client.list_tools()).tools}

    bound = session(live_server, keys["support"], listing, revision=revision)
    assert sorted(bound) == sorted(
        [
            "memory_query",
            "memory_write",
            "memory_get",
            "memory_update",
            "memory_history",
            "memory_timeline",
            "memory_forget",
            "memory_sources",
        ]
    )
    query = bound["memory_query"].input_schema
    assert query["properties"]["k"]["maximum"] == memoryhub_settings.MAX_K
    assert query["properties"]["query"]["maxLength"] == memoryhub_settings.MAX_QUERY_LENGTH
    assert query["required"] == ["query"]  # a bound key's domain is implied
    assert query["additionalProperties"] is False
    items = bound["memory_write"].input_schema["properties"]["items"]
    assert items["maxItems"] == memoryhub_settings.MAX_WRITE_ITEMS
    assert bound["memory_forget"].annotations.destructive_hint is True
    assert bound["memory_query"].annotations.read_only_hint is True

    unbound = session(live_server, keys["unbound"], listing, revision=revision)
    domain = unbound["memory_query"].input_schema["properties"]["domain"]
    assert domain["enum"] == ["sales", "support"]  # its own org's, never globex's legal
    assert "domain" in unbound["memory_query"].input_schema["required"]


def test_an_agent_writes_queries_reads_updates_and_forgets(live_server, world, revision):
    _, _, keys, api_keys = world
    key = keys["support"]
    [(error, written)] = calls(
        live_server,
        key,
        (
            "memory_write",
            {
                "items": [
                    {"content": "Alice prefers EUR.", "key": "currency", "namespace": "user:bob"},
                    {"content": "Refunds take five days.", "metadata": {"team": "billing"}},
                ]
            },
        ),
        revision=revision,
    )
    assert not error
    assert written["accepted"] == ["memory"]
    assert written["refused"] == [] and written["failed"] == {}
    currency = written["records"][0]["id"]

    (_, found), (_, explained), (_, record), (_, updated), (_, history), (_, sources) = calls(
        live_server,
        key,
        ("memory_query", {"query": "refunds", "k": 3, "where": {"team": "billing"}}),
        ("memory_query", {"query": "refunds", "k": 3, "explain": True}),
        ("memory_get", {"id": currency}),
        ("memory_update", {"id": currency, "fields": {"content": "Alice prefers GBP."}}),
        ("memory_history", {"id": currency}),
        ("memory_sources", {}),
        revision=revision,
    )
    assert [item["content"] for item in found["items"]] == ["Refunds take five days."]
    assert found["grounding"] == "Relevant context:\n[memory] Refunds take five days."
    assert "legs" not in found["items"][0]
    assert explained["items"][0]["legs"]["keyword"]["rank"] == 1
    assert record["content"] == "Alice prefers EUR."
    assert record["namespace"] == "user:bob"
    assert updated["content"] == "Alice prefers GBP."
    assert updated["key"] == "currency"  # PATCH: the fields not named keep their values
    assert [v["content"] for v in history["versions"]] == [
        "Alice prefers GBP.",
        "Alice prefers EUR.",
    ]
    prefix = api_keys["support"][0].prefix
    assert history["versions"][0]["actor"] == f"mcp:{prefix}"
    assert {(s["name"], s["read_only"]) for s in sources["sources"]} == {
        ("handbook", True),
        ("memory", False),
    }

    error, forgotten = call(live_server, key, "memory_forget", revision, namespace="user:bob")
    assert not error
    assert forgotten["deleted"] == 1 and forgotten["by_source"] == {"memory": 1}
    assert forgotten["receipt"]
    assert not MemoryRecord.unscoped.filter(namespace="user:bob").exists()
    error, gone = call(live_server, key, "memory_get", revision, id=currency)
    assert error and gone["code"] == "record_not_found"


def test_the_api_key_scheme_works_too_and_writes_are_observed_as_mcp(live_server, world, revision):
    _, _, keys, api_keys = world
    error, body = calls(
        live_server,
        keys["support"],
        ("memory_write", {"source": "handbook", "items": [{"content": "no"}]}),
        scheme="Api-Key",
        revision=revision,
    )[0]
    assert error and body["code"] == "write_refused"
    refusal = Observation.unscoped.get(kind=Observation.Kind.MEMORY_WRITE_REFUSED)
    assert refusal.actor == f"mcp:{api_keys['support'][0].prefix}"


def test_an_org_wide_key_names_the_domain_in_each_call(live_server, world, revision):
    _, _, keys, _ = world
    (e1, nameless), (e2, sales), (e3, support) = calls(
        live_server,
        keys["unbound"],
        ("memory_query", {"query": "notes", "namespaces": ["user:alice"]}),
        ("memory_query", {"domain": "sales", "query": "notes", "namespaces": ["user:alice"]}),
        ("memory_query", {"domain": "support", "query": "notes", "namespaces": ["user:alice"]}),
        revision=revision,
    )
    assert e1 and nameless["code"] == "invalid" and "domain" in nameless["errors"]
    assert not e2 and [i["content"] for i in sales["items"]] == ["acme-sales notes"]
    assert not e3 and [i["content"] for i in support["items"]] == ["acme-support notes"]


# --- the cross-tenant matrix --------------------------------------------------------------


def probes(record_id: str) -> list[tuple[str, dict, str, str, dict | None]]:
    """(tool, arguments, REST method, REST path under the domain, REST body)."""
    item = {"content": "intruder", "key": "shared-key", "namespace": "user:alice"}
    return [
        (
            "memory_query",
            {"query": "secret", "namespaces": ["user:alice"]},
            "post",
            "query",
            {
                "query": "secret",
                "namespaces": ["user:alice"],
            },
        ),
        ("memory_write", {"items": [item]}, "post", "records", {"items": [item]}),
        ("memory_get", {"id": record_id}, "get", f"records/{record_id}", None),
        (
            "memory_update",
            {"id": record_id, "fields": {"content": "hijacked"}},
            "patch",
            f"records/{record_id}",
            {"content": "hijacked"},
        ),
        ("memory_history", {"id": record_id}, "get", f"records/{record_id}/history", None),
        ("memory_timeline", {"id": record_id}, "get", f"records/{record_id}/timeline", None),
        ("memory_forget", {"key": "shared-key"}, "post", "forget", {"key": "shared-key"}),
        ("memory_sources", {}, "get", "sources", None),
    ]


def mcp_and_rest(live_server, key: str, domain: str, record_id: str, revision: str) -> list[tuple]:
    """Each probe through MCP and through REST: (tool, MCP error, MCP body, REST status,
    REST body)."""
    steps = [(tool, {"domain": domain, **args}) for tool, args, *_ in probes(record_id)]
    answers = calls(live_server, key, *steps, revision=revision)
    return [
        (tool, error, body, *rest(key, method, f"{domain}/{path}", rest_body))
        for (tool, _, method, path, rest_body), (error, body) in zip(
            probes(record_id), answers, strict=True
        )
    ]


def test_other_orgs_domains_and_records_do_not_exist_through_mcp(live_server, world, revision):
    _, records, keys, _ = world
    before = snapshot()
    seen = 0
    for name, domain, foreign in [
        ("unbound", "legal", ("globex", "legal")),  # another org's own slug
        ("support", "sales", ("acme", "sales")),  # a bound key, its org's other domain
        ("support", "legal", ("globex", "legal")),
    ]:
        for tool, error, body, status, rest_body in mcp_and_rest(
            live_server, keys[name], domain, str(records[foreign]), revision
        ):
            seen += 1
            assert error, (name, domain, tool)
            assert body["code"] == "domain_not_found" == rest_body["code"], (name, tool)
            assert status == 404
            assert SECRET not in json.dumps(body) and "acme-sales" not in json.dumps(body)
    assert seen == 3 * 8
    assert snapshot() == before
    refused = Observation.unscoped.filter(kind=Observation.Kind.SCOPE_REFUSED)
    assert refused.count() == 2 * seen  # once for MCP, once for REST
    assert {o.actor.split(":")[0] for o in refused} == {"mcp", "api-key"}


def test_another_orgs_record_ids_are_not_found_through_the_keys_own_domain(
    live_server, world, revision
):
    _, records, keys, _ = world
    for key, other in (("unbound", "globex"), ("globex", "acme")):
        untouched = org_snapshot(other)
        foreign = str(records[(other, "support")])  # both orgs have a domain "support"
        for tool, error, body, status, rest_body in mcp_and_rest(
            live_server, keys[key], "support", foreign, revision
        ):
            if tool in ("memory_get", "memory_update", "memory_history", "memory_timeline"):
                assert error and body["code"] == "record_not_found" == rest_body["code"], tool
                assert status == 404
            assert (SECRET if other == "globex" else "acme-") not in json.dumps(body), tool
        # the probes' writes and forgets acted in the key's own domain only
        assert org_snapshot(other) == untouched, key


@pytest.mark.parametrize(
    ("key_name", "allowed"),
    [
        (
            "read-only",
            {"memory_query", "memory_get", "memory_history", "memory_timeline", "memory_sources"},
        ),
        ("write-only", {"memory_write", "memory_update"}),
        (
            "no-forget",
            {
                "memory_query",
                "memory_get",
                "memory_history",
                "memory_timeline",
                "memory_sources",
                "memory_write",
                "memory_update",
            },
        ),
    ],
)
def test_permissions_refuse_as_the_rest_api_does(live_server, world, revision, key_name, allowed):
    _, records, keys, _ = world
    record_id = str(records[("acme", "support")])
    for tool, error, body, status, rest_body in mcp_and_rest(
        live_server, keys[key_name], "support", record_id, revision
    ):
        if tool in allowed:
            assert not error, (key_name, tool, body)
            assert status < 300
        else:
            assert error, (key_name, tool)
            assert body["code"] == "permission_denied" == rest_body["code"]
            assert status == 403
        if key_name == "write-only":  # never content without read
            assert "acme-support notes" not in json.dumps(body), tool


def test_a_read_only_knowledge_base_refuses_agents_as_over_rest(live_server, world, revision):
    _, _, keys, _ = world
    before = org_snapshot("acme")
    (e1, written), (e2, forgotten) = calls(
        live_server,
        keys["support"],
        ("memory_write", {"source": "handbook", "items": [{"content": "wrong"}]}),
        ("memory_forget", {"source": "handbook"}),
        revision=revision,
    )
    refused = {"source": "handbook", "items": [{"content": "wrong"}]}
    status, rest_body = rest(keys["support"], "post", "support/records", refused)
    assert e1 and written == rest_body
    assert written["code"] == "write_refused" and written["source"] == "handbook"
    assert status == 403
    assert e2 and forgotten["code"] == "write_refused"
    handbook = KnowledgeBase.unscoped.get(name="handbook", domain__slug="support", org__slug="acme")
    assert MemoryRecord.unscoped.filter(knowledge_base=handbook).count() == 1
    assert handbook.refused_writes == 3
    assert org_snapshot("acme") == before


def test_a_key_without_forget_cannot_erase_a_subject(live_server, world, revision):
    _, _, keys, _ = world
    error, body = call(
        live_server, keys["no-forget"], "memory_forget", revision, namespace="user:alice"
    )
    assert error and body["code"] == "permission_denied"
    assert MemoryRecord.unscoped.filter(namespace="user:alice").count() == 4


# --- bad input ------------------------------------------------------------------------------


def test_bad_input_is_a_tool_error_naming_the_field_never_a_crash(live_server, world, revision):
    _, _, keys, _ = world
    too_long = "x" * (memoryhub_settings.MAX_QUERY_LENGTH + 1)
    too_many = [{"content": f"n{i}"} for i in range(memoryhub_settings.MAX_WRITE_ITEMS + 1)]
    answers = calls(
        live_server,
        keys["support"],
        ("memory_query", {"query": "x", "k": 0}),
        ("memory_query", {"query": "x", "format": "grounding"}),
        ("memory_query", {"query": too_long}),
        ("memory_query", {"query": "x", "where": {"price": {"$gte": [1]}}}),
        ("memory_write", {"items": too_many}),
        ("memory_write", {"items": [{"content": "x", "colour": "red"}]}),
        ("memory_write", {"items": "not a list"}),
        ("memory_get", {"id": "not-a-uuid"}),
        ("memory_get", {}),
        ("memory_update", {"id": 7, "fields": {}}),
        ("memory_forget", {}),
        ("memory_forget", {"source": "nope"}),
        ("memory_sources", {"domain": ["support"]}),
        revision=revision,
    )
    codes = [(body["code"], sorted(body.get("errors", {}))) for _, body in answers]
    assert all(error for error, _ in answers)
    assert codes == [
        ("invalid", ["k"]),
        ("invalid", ["format"]),
        ("invalid", ["query"]),
        ("invalid", ["where.price.$gte"]),
        ("invalid", ["items"]),
        ("invalid", ["items[0].colour"]),
        ("invalid", ["items"]),
        ("record_not_found", []),
        ("invalid", ["id"]),
        ("invalid", ["id"]),
        ("invalid", ["non_field_errors"]),
        ("unknown_source", ["sources"]),
        ("invalid", ["domain"]),
    ]
    status, rest_body = rest(keys["support"], "post", "support/query", {"query": "x", "k": 0})
    assert status == 400 and rest_body == answers[0][1]  # the REST answer, word for word


def test_an_unknown_tool_is_a_protocol_error(live_server, world, revision):
    _, _, keys, _ = world

    async def work(client: Client) -> int:
        try:
            await client.call_tool("memory_delete_everything", {})
        except MCPError as exc:
            return exc.error.code
        return 0

    assert session(live_server, keys["support"], work, revision=revision) == -32602


# --- resources --------------------------------------------------------------------------


def test_resources_are_the_knowledge_bases_and_records(live_server, world, revision):
    _, records, keys, _ = world
    own = str(records[("acme", "support")])
    foreign = str(records[("globex", "support")])

    async def work(client: Client) -> tuple:
        listed = await client.list_resources()
        handbook = await client.read_resource("memoryhub://support/handbook")
        record = await client.read_resource(f"memoryhub://support/memory/{own}")
        failures = []
        for uri in (
            f"memoryhub://support/memory/{foreign}",
            f"memoryhub://support/handbook/{own}",  # the id, under the wrong knowledge base
            f"memoryhub://legal/memory/{foreign}",
            "https://example.com/",
        ):
            try:
                await client.read_resource(uri)
            except MCPError as exc:
                failures.append((exc.error.code, exc.error.data["code"], exc.error.data.get("uri")))
        return listed, handbook, record, failures

    listed, handbook, record, failures = session(
        live_server, keys["support"], work, revision=revision
    )
    assert sorted(str(r.uri) for r in listed.resources) == [
        "memoryhub://support/handbook",
        "memoryhub://support/memory",
    ]
    assert json.loads(handbook.contents[0].text)["read_only"] is True
    assert json.loads(record.contents[0].text)["content"] == "acme-support notes"
    if revision == MODERN:  # 2026-07-28 retired -32002: not found is -32602 naming the URI
        assert failures == [
            (-32602, "record_not_found", f"memoryhub://support/memory/{foreign}"),
            (-32602, "record_not_found", f"memoryhub://support/handbook/{own}"),
            (-32602, "domain_not_found", f"memoryhub://legal/memory/{foreign}"),
            (-32602, "invalid", None),
        ]
    else:
        assert failures == [
            (-32002, "record_not_found", None),
            (-32002, "record_not_found", None),
            (-32002, "domain_not_found", None),
            (-32602, "invalid", None),
        ]


# --- the revisions ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", MODERN])
def test_a_modern_client_never_initializes_and_is_given_no_session(live_server, world, mode):
    """ "auto" discovers the server's versions first; a client pinned to 2026-07-28 just
    sends its requests. Either way every POST carries the version, in its header and
    its envelope, and no answer opens a session."""
    _, _, keys, _ = world
    sent: list[tuple[dict, dict]] = []
    answered: list[httpx2.Response] = []

    async def record_request(request: httpx2.Request) -> None:
        sent.append((dict(request.headers), json.loads(request.content)))

    async def record_response(response: httpx2.Response) -> None:
        answered.append(response)

    async def main() -> tuple:
        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {keys['support']}"},
            timeout=30,
            event_hooks={"request": [record_request], "response": [record_response]},
        ) as http:
            transport = streamable_http_client(f"{live_server.url}/mcp/", http_client=http)
            async with Client(transport, mode=mode) as client:
                listed = await client.list_tools()
                found = await client.call_tool("memory_query", {"query": "notes"})
                return client.protocol_version, client.session.discover_result, listed, found

    version, discovered, listed, found = asyncio.run(main())
    assert version == MODERN
    assert len(listed.tools) == len(TOOLS) and not found.is_error
    methods = [body["method"] for _, body in sent]
    assert "initialize" not in methods
    assert methods == (["server/discover"] if mode == "auto" else []) + ["tools/list", "tools/call"]
    for headers, body in sent:
        assert headers["mcp-protocol-version"] == MODERN
        assert body["params"]["_meta"][PROTOCOL_VERSION_META_KEY] == MODERN
    assert all(response.status_code == 200 for response in answered)
    assert not any("mcp-session-id" in response.headers for response in answered)
    if mode == "auto":  # what server/discover told the client
        assert discovered.supported_versions[0] == MODERN
        assert set(HANDSHAKE_PROTOCOL_VERSIONS) < set(discovered.supported_versions)
        assert discovered.capabilities.tools is not None


# --- the transport ------------------------------------------------------------------------


def post(live_server, key: str | None, body: Any, **headers: str) -> httpx2.Response:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx2.post(
        f"{live_server.url}/mcp/",
        content=body if isinstance(body, bytes) else json.dumps(body),
        headers={"Content-Type": "application/json", **headers},
    )


PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


def test_the_transport_refuses_as_the_rest_api_does(live_server, world, settings):
    _, _, keys, _ = world
    assert httpx2.get(f"{live_server.url}/mcp/").status_code == 405
    assert post(live_server, keys["support"], PING).json() == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {},
    }
    missing = post(live_server, None, PING)
    assert missing.status_code == 401
    assert missing.json()["error"]["data"]["code"] == "not_authenticated"
    unknown = post(live_server, "nope.nope", PING)
    assert unknown.status_code == 401
    assert unknown.json()["error"]["data"]["code"] == "invalid_key"
    assert post(live_server, keys["support"], b"{not json").json()["error"]["code"] == -32700
    notified = post(
        live_server, keys["support"], {"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    assert notified.status_code == 202
    settings.MEMORYHUB = {"THROTTLE_RATE": "2/min"}
    answers = [post(live_server, keys["read-only"], PING) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2].json()["error"]["data"]["code"] == "throttled"
    assert int(answers[2].headers["Retry-After"]) >= 1


def test_calls_are_in_the_access_log_with_the_keys_prefix(live_server, world, json_log, revision):
    _, _, keys, api_keys = world
    call(live_server, keys["support"], "memory_get", revision, id="not-a-uuid")
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    prefix = api_keys["support"][0].prefix
    access = [line for line in lines if line["logger"] == "memoryhub.access"]
    assert {line["path"] for line in access} == {"/mcp/"}
    assert all(line.get("key_prefix") == prefix and line["org"] == "acme" for line in access)
    [tool_line] = [line for line in lines if line.get("tool") == "memory_get"]
    assert tool_line["outcome"] == "record_not_found" and tool_line["key_prefix"] == prefix
    assert tool_line["protocol_version"] == revision
    assert "not-a-uuid" not in json_log.getvalue()


def test_the_example_agent_runs_against_the_site(live_server, world):
    domains, _, keys, _ = world
    completed = subprocess.run(
        [sys.executable, "examples/mcp_agent.py", "--url", live_server.url],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "MEMORYHUB_API_KEY": keys["support"]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert "connected to memoryhub " in completed.stdout
    assert "at MCP 2026-07-28" in completed.stdout
    assert "wrote 3 memories to memory" in completed.stdout
    assert "[memory] Alice prefers to be paid in EUR." in completed.stdout
    assert "forgot user:alice: 3 records" in completed.stdout  # and the fixture's own
    assert not MemoryRecord.unscoped.filter(
        namespace="user:alice", org__slug="acme", domain__slug="support"
    ).exists()


def test_the_example_agent_takes_the_endpoint_and_says_what_went_wrong(live_server, world):
    """Given the endpoint the docs show (…/mcp/) it printed 60 lines ending in
    ``MCPError: Not Found``; ``--url`` had no help."""
    _, _, keys, _ = world

    def run(*argv: str, key: str = keys["support"]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "examples/mcp_agent.py", *argv],
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "MEMORYHUB_API_KEY": key},
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert "its MCP endpoint" in run("--help").stdout
    at_endpoint = run("--url", f"{live_server.url}/mcp/")
    assert at_endpoint.returncode == 0, at_endpoint.stderr
    assert "forgot user:alice" in at_endpoint.stdout
    wrong = run("--url", f"{live_server.url}/nowhere/")
    assert wrong.returncode == 1
    assert len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
    assert wrong.stderr.startswith(f"{live_server.url}/nowhere/mcp/: ")


def test_an_agent_supersedes_a_fact_and_reads_it_as_of_a_moment(live_server, world, revision):
    _, _, keys, _ = world
    key = keys["support"]

    def fact(city: str, when: str) -> dict[str, Any]:
        item = {"content": f"Bob lives in {city}.", "key": "city", "namespace": "user:bob"}
        return {"items": [{**item, "valid_from": when, "supersede": True}]}

    [(_, first), (_, second)] = calls(
        live_server,
        key,
        ("memory_write", fact("Paris", "2026-01-01")),
        ("memory_write", fact("Lyon", "2026-05-01")),
        revision=revision,
    )
    paris, lyon = first["records"][0]["id"], second["records"][0]["id"]
    asked = {"query": "Where does Bob live?", "namespaces": ["user:bob"], "mode": "keyword"}
    (_, now), (_, then), (_, timeline), (error, bad) = calls(
        live_server,
        key,
        ("memory_query", asked),
        ("memory_query", {**asked, "as_of": "2026-04-30"}),
        ("memory_timeline", {"id": lyon}),
        ("memory_query", {**asked, "as_of": "April"}),
        revision=revision,
    )
    assert [item["content"] for item in now["items"]] == ["Bob lives in Lyon."]
    assert [item["id"] for item in then["items"]] == [paris]
    assert then["items"][0]["superseded_by"] == lyon
    assert then["items"][0]["valid_until"].startswith("2026-05-01")
    assert [link["id"] for link in timeline["links"]] == [paris, lyon]
    assert error and "as_of" in bad["errors"]


def test_a_changing_tool_called_again_with_its_idempotency_key_acts_once(
    live_server, world, revision
):
    _, _, keys, _ = world
    globex_before = org_snapshot("globex")
    write_call = {"items": [{"content": "said once over MCP"}], "idempotency_key": "mcp-1"}
    (e1, first), (e2, again), (e3, reused), (e4, refused), (e5, refused_again) = calls(
        live_server,
        keys["support"],
        ("memory_write", write_call),
        ("memory_write", write_call),
        ("memory_write", {"items": [{"content": "another"}], "idempotency_key": "mcp-1"}),
        (
            "memory_write",
            {"source": "handbook", "items": [{"content": "no"}], "idempotency_key": "h"},
        ),
        (
            "memory_write",
            {"source": "handbook", "items": [{"content": "no"}], "idempotency_key": "h"},
        ),
        revision=revision,
    )
    assert not e1 and not e2 and again == first
    assert MemoryRecord.unscoped.filter(content="said once over MCP").count() == 1
    assert e3 and reused["code"] == "idempotency_key_reused"
    assert MemoryRecord.unscoped.filter(content="another").count() == 0
    assert e4 and e5 and refused["code"] == refused_again["code"] == "write_refused"
    handbook = KnowledgeBase.unscoped.get(name="handbook", domain__slug="support", org__slug="acme")
    assert handbook.refused_writes == 2  # each refusal counted, none kept
    assert org_snapshot("globex") == globex_before

    # The same key from another org's key is its own.
    error, other = call(
        live_server, keys["globex"], "memory_write", revision, domain="support", **write_call
    )
    assert not error and other["records"][0]["id"] != first["records"][0]["id"]


def test_only_the_changing_tools_take_an_idempotency_key(live_server, world):
    _, _, keys, _ = world

    async def work(client: Client) -> Any:
        return await client.list_tools()

    listed = {tool.name: tool for tool in session(live_server, keys["support"], work).tools}
    takes = {
        name
        for name, tool in listed.items()
        if "idempotency_key" in tool.input_schema["properties"]
    }
    assert takes == {"memory_write", "memory_update", "memory_forget"}
    error, body = call(live_server, keys["support"], "memory_query", query="x", idempotency_key="k")
    assert error and "idempotency_key" in body["errors"]


def test_a_write_only_key_cannot_expire_a_record_through_mcp_either(live_server, world, revision):
    _, records, keys, _ = world
    before = snapshot()
    record = records[("acme", "support")]
    (e1, updated), (e2, written) = calls(
        live_server,
        keys["write-only"],
        ("memory_update", {"id": record, "fields": {"ttl_seconds": 1}}),
        (
            "memory_write",
            {
                "items": [
                    {
                        "content": "x",
                        "key": "shared-key",
                        "namespace": "user:alice",
                        "ttl_seconds": 1,
                    }
                ]
            },
        ),
        revision=revision,
    )
    assert e1 and updated["code"] == "permission_denied"
    assert e2 and written["code"] == "permission_denied"
    assert snapshot() == before
