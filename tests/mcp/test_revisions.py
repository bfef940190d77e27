"""Which protocol revision a request speaks, and what 2026-07-28 refuses.

A 2026-07-28 request needs no ``initialize``: it carries its version and the client's
capabilities in ``params._meta`` and repeats the version, the method and the tool or URI
in headers. A request without that envelope, with headers that contradict its body, or
at a version not served is a JSON-RPC error at HTTP 400 naming what is wrong (an unknown
method is a 404), before any method runs; never a 500. The handshake revisions are
served as before, a request without the version header as 2025-03-26.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.http.request import HttpHeaders
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS, classify_inbound_request
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from rest_framework.test import APIClient

from memoryhub.mcp import revisions
from memoryhub.mcp.tools import TOOLS
from memoryhub.models import MemoryRecord
from memoryhub.scope import Scope
from memoryhub.services import write
from tests.factories import create_api_key

pytestmark = pytest.mark.django_db

MODERN = "2026-07-28"
SERVED = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
EVERYTHING = {"can_read": True, "can_write": True, "can_forget": True}
FORGET = {"name": "memory_forget", "arguments": {"namespace": "user:alice"}}


def envelope(version: Any = MODERN) -> dict[str, Any]:
    return {
        PROTOCOL_VERSION_META_KEY: version,
        CLIENT_INFO_META_KEY: {"name": "probe", "version": "1"},
        CLIENT_CAPABILITIES_META_KEY: {},
    }


def modern(
    method: str = "tools/call",
    params: dict[str, Any] | None = None,
    meta: Any = None,
    drop_meta: bool = False,
    **headers: str | None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 request as the official client sends it (``memory_forget`` of
    ``user:alice`` unless told otherwise), with ``headers`` replaced (``None`` drops
    one; ``Mcp_Name`` is ``Mcp-Name``)."""
    params = dict(FORGET if params is None and method == "tools/call" else params or {})
    if not drop_meta:
        params["_meta"] = envelope() if meta is None else meta
    sent = {
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        **({"Mcp-Name": params["name"]} if method == "tools/call" else {}),
    }
    for name, value in headers.items():
        name = name.replace("_", "-")
        if value is None:
            sent.pop(name, None)
        else:
            sent[name] = value
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}, sent


# (case, request, HTTP status, JSON-RPC code, what the error's data names)
REFUSED = [
    (
        "version not served, in header and envelope",
        modern(meta=envelope("2030-01-01"), MCP_Protocol_Version="2030-01-01"),
        400,
        -32022,
        {"supported": SERVED, "requested": "2030-01-01"},
    ),
    (
        "version not served, header only",
        modern(drop_meta=True, MCP_Protocol_Version="banana"),
        400,
        -32022,
        {"supported": SERVED, "requested": "banana"},
    ),
    (
        "no envelope",
        modern(drop_meta=True),
        400,
        -32602,
        [
            f"params._meta.{PROTOCOL_VERSION_META_KEY}",
            f"params._meta.{CLIENT_CAPABILITIES_META_KEY}",
        ],
    ),
    ("envelope not an object", modern(meta="2026-07-28"), 400, -32602, None),
    (
        "envelope without the client's capabilities",
        modern(meta={PROTOCOL_VERSION_META_KEY: MODERN}),
        400,
        -32602,
        [f"params._meta.{CLIENT_CAPABILITIES_META_KEY}"],
    ),
    (
        "header older than the envelope",
        modern(MCP_Protocol_Version="2025-11-25"),
        400,
        -32020,
        ["MCP-Protocol-Version"],
    ),
    (
        "envelope older than the header",
        modern(meta=envelope("2025-11-25")),
        400,
        -32020,
        ["MCP-Protocol-Version"],
    ),
    ("envelope without the header", modern(MCP_Protocol_Version=None), 400, -32020, None),
    ("version not a string", modern(meta=envelope(7), MCP_Protocol_Version="7"), 400, -32020, None),
    ("no method header", modern(Mcp_Method=None), 400, -32020, ["Mcp-Method"]),
    ("method header of another method", modern(Mcp_Method="tools/list"), 400, -32020, None),
    ("no name header", modern(Mcp_Name=None), 400, -32020, ["Mcp-Name"]),
    ("name header of a harmless tool", modern(Mcp_Name="memory_query"), 400, -32020, None),
    ("name header not base64", modern(Mcp_Name="=?base64?!!?="), 400, -32020, ["Mcp-Name"]),
    (
        "capabilities not an object",
        modern(meta={**envelope(), CLIENT_CAPABILITIES_META_KEY: "all"}),
        400,
        -32602,
        [f"params._meta.{CLIENT_CAPABILITIES_META_KEY}"],
    ),
    (
        "client info not an implementation",
        modern(meta={**envelope(), CLIENT_INFO_META_KEY: 42}),
        400,
        -32602,
        [f"params._meta.{CLIENT_INFO_META_KEY}"],
    ),
    (
        "arguments not an object",
        modern(params={"name": "memory_forget", "arguments": ["user:alice"]}),
        400,
        -32602,
        ["params.arguments"],
    ),
    ("ping, which 2026-07-28 removed", modern("ping"), 404, -32601, None),
    ("initialize, which 2026-07-28 removed", modern("initialize"), 404, -32601, None),
    ("a method no revision has", modern("memory/erase_everything"), 404, -32601, None),
]


@pytest.fixture
def world(tenant, other_tenant):
    """A record of user:alice in acme's and globex's support; acme's key may forget."""
    for each in (tenant, other_tenant):
        item = {"content": f"{each.org.slug} note", "namespace": "user:alice"}
        write.write(Scope.for_domain(each.domain), [item])
    _, key = create_api_key(org=tenant.org, domain=tenant.domain, **EVERYTHING)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def send(client: APIClient, body: Any, headers: dict[str, str]) -> Any:
    return client.post("/mcp/", json.dumps(body), content_type="application/json", headers=headers)


@pytest.mark.parametrize(
    ("request_", "status", "code", "names"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_a_bad_modern_request_is_refused_clearly_before_anything_runs(
    world, request_, status, code, names
):
    body, headers = request_
    response = send(world, body, headers)
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    assert "Mcp-Session-Id" not in response
    answer = response.json()
    assert answer["id"] == 7 and answer["error"]["code"] == code
    assert answer["error"]["message"]
    data = answer["error"].get("data")
    if isinstance(names, dict):
        assert data == names
    elif names is not None:
        assert sorted(data["errors"]) == sorted(names), data
    # the forget in the body never ran, in either org
    assert MemoryRecord.unscoped.filter(namespace="user:alice").count() == 2


def test_a_modern_request_needs_no_handshake_and_opens_no_session(world, other_tenant):
    query = {"query": "note", "namespaces": ["user:alice"]}
    body, headers = modern(params={"name": "memory_query", "arguments": query})
    queried = send(world, body, headers)
    assert queried.status_code == 200 and "Mcp-Session-Id" not in queried
    result = queried.json()["result"]
    assert result["resultType"] == "complete"
    assert result["_meta"][SERVER_INFO_META_KEY]["name"] == "memoryhub"
    assert [item["content"] for item in result["structuredContent"]["items"]] == ["acme note"]

    discovered = send(world, *modern("server/discover"))
    assert discovered.status_code == 200
    discovery = discovered.json()["result"]
    assert discovery["supportedVersions"] == SERVED
    assert set(discovery["capabilities"]) == {"tools", "resources"}
    assert discovery["_meta"][SERVER_INFO_META_KEY]["name"] == "memoryhub"

    listed = send(world, *modern("tools/list")).json()["result"]
    assert listed["cacheScope"] == "private"  # a listing is the key's own (its domains)
    assert "memory_forget" in {tool["name"] for tool in listed["tools"]}


def test_a_name_header_in_the_base64_form_is_decoded(world):
    body, headers = modern(Mcp_Name="=?base64?bWVtb3J5X2ZvcmdldA==?=")  # memory_forget
    response = send(world, body, headers)
    assert response.status_code == 200, response.content
    assert response.json()["result"]["structuredContent"]["deleted"] == 1
    assert MemoryRecord.unscoped.filter(namespace="user:alice", org__slug="globex").count() == 1


def test_notifications_are_accepted_at_every_version_served_and_responses_only_before(world):
    notification = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}
    response = {"jsonrpc": "2.0", "id": 3, "result": {}}
    for version in SERVED:
        assert send(world, notification, {"MCP-Protocol-Version": version}).status_code == 202
    assert send(world, notification, {}).status_code == 202
    unsupported = send(world, notification, {"MCP-Protocol-Version": "2030-01-01"})
    assert unsupported.status_code == 400
    assert unsupported.json()["error"]["code"] == -32022
    assert unsupported.json()["error"]["data"]["supported"] == SERVED
    assert send(world, response, {"MCP-Protocol-Version": "2025-11-25"}).status_code == 202
    refused = send(world, response, {"MCP-Protocol-Version": MODERN})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32600


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
def test_every_handshake_revision_is_negotiated_and_served_in_its_own_shapes(world, version):
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "old", "version": "1"},
        },
    }
    initialized = send(world, hello, {}).json()["result"]
    assert initialized["protocolVersion"] == version
    assert initialized["serverInfo"]["name"] == "memoryhub"
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    for headers in ({"MCP-Protocol-Version": version}, {}):  # no header: 2025-03-26
        listed = send(world, listing, headers)
        assert listed.status_code == 200 and "Mcp-Session-Id" not in listed
        result = listed.json()["result"]
        assert len(result["tools"]) == len(TOOLS)
        assert not {"resultType", "ttlMs", "cacheScope", "_meta"} & set(result)
    ping = send(world, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, {})
    assert ping.json() == {"jsonrpc": "2.0", "id": 3, "result": {}}
    # server/discover is 2026-07-28's: the handshake era does not have it
    discover = {"jsonrpc": "2.0", "id": 4, "method": "server/discover"}
    missing = send(world, discover, {"MCP-Protocol-Version": version})
    assert missing.status_code == 200 and missing.json()["error"]["code"] == -32601


def test_a_modern_offer_to_initialize_is_answered_with_the_newest_handshake(world):
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": MODERN,
            "capabilities": {},
            "clientInfo": {"name": "c", "version": "1"},
        },
    }
    assert send(world, hello, {}).json()["result"]["protocolVersion"] == "2025-11-25"


# --- the same answers as the official SDK -----------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "code"),
    [(case[1], case[3]) for case in REFUSED if case[0] != "version not served, header only"],
    ids=[case[0] for case in REFUSED if case[0] != "version not served, header only"],
)
def test_the_envelope_is_judged_as_the_official_sdk_judges_it(request_, code):
    """The SDK's ladder (``classify_inbound_request``) refuses what ours refuses, with
    the same code, and lets through what ours lets through to the method. (A header
    naming an unknown version over a body without an envelope is the one deliberate
    difference: the SDK calls it a missing envelope, this server names the versions it
    serves.)"""
    body, headers = request_
    meta = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
    try:
        revisions.read_request(body, HttpHeaders(meta))
    except revisions.Rejected as rejected:
        ours: int | None = rejected.error.code
    else:
        ours = None
    theirs = classify_inbound_request(body, headers={k.lower(): v for k, v in headers.items()})
    assert ours == getattr(theirs, "code", None)
    if ours is None:  # refused later, by the method's own rules
        assert code in (-32601, -32602)


def test_an_error_is_answered_at_the_http_status_the_sdk_gives_its_code():
    assert dict(revisions.HTTP_STATUS) == dict(ERROR_CODE_HTTP_STATUS)
