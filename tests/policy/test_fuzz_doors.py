"""Hostile arguments at every door: MCP tools and resources, JSON-RPC framing, every REST
route, every admin action and form.

Hypothesis generates the arguments (``tests.hostile``: NULs, control characters, lone
surrogates, huge and deeply nested values, wrong types) and each door must hold:

* never a 5xx, never a hidden ``server_error`` tool result or JSON-RPC -32603;
* no answer slower than 10 s (hypothesis' deadline);
* a refused call changes nothing, and nothing of the other org ever comes back or
  changes (acme's key and acme's operator against globex's memory).

``test_api_fuzz`` drives the REST bodies in depth; here every route gets hostile path
segments, query strings and bodies. ``FUZZ_EXAMPLES=5000`` searches longer.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from memoryhub import policy
from memoryhub.models import KnowledgeBase, MemoryRecord
from memoryhub.services import knowledge_bases, write
from tenants.models import ApiKey, Domain, Org
from tests.api.test_api_fuzz import assert_contract
from tests.factories import MembershipFactory, create_api_key
from tests.hostile import ANY, FORGET_BODY, FUZZ, ITEM, JSON, QUERY_BODY, TEXT, WRITE_BODY, field
from tests.policy.test_door_boundaries import rpc, tools_call

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning"),
]

#: Every answer within 10 s; fewer examples per door than the REST body suites.
DOORS = settings(FUZZ, deadline=timedelta(seconds=10), max_examples=max(FUZZ.max_examples // 2, 10))
SECRET = "globex-secret"
#: JSON nested deeper than any bound, as far as Python's parser follows it.
DEEP = st.builds(lambda n: json.loads("[" * n + "]" * n), st.sampled_from([30, 70, 400]))
HOSTILE = st.one_of(TEXT, ANY, DEEP)


@pytest.fixture
def world(tenant, other_tenant):
    """acme's support domain (records, a read-only handbook) and globex's secret."""
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    write.write(
        tenant.scope, [{"content": "acme handbook"}], sources=["handbook"], principal=policy.SYSTEM
    )
    write.write(
        tenant.scope,
        [
            {"content": "Refunds take 5 days.", "metadata": {"team": "billing"}},
            {"content": "Alice prefers EUR.", "namespace": "user:alice", "key": "currency"},
        ],
    )
    [secret] = write.write(
        other_tenant.scope, [{"content": SECRET, "namespace": "user:alice", "key": "k"}]
    ).records
    acme_ids = [
        str(pk) for pk in MemoryRecord.unscoped.filter(org=tenant.org).values_list("pk", flat=True)
    ]
    return {
        "acme": tenant,
        "globex": other_tenant,
        "acme_ids": acme_ids,
        "secret_id": str(secret.id),
    }


def memory_of(org: Org) -> list[tuple]:
    return sorted(
        MemoryRecord.unscoped.filter(org=org).values_list("id", "content", "key", "updated_at")
    )


def tenancy_of(org: Org) -> list[tuple]:
    return sorted(Domain.objects.filter(org=org).values_list("id", "slug")) + sorted(
        ApiKey.objects.filter(org=org).values_list("id", "revoked")
    )


def everything_of(org: Org) -> list[Any]:
    return [
        memory_of(org),
        tenancy_of(org),
        sorted(KnowledgeBase.unscoped.filter(org=org).values_list("id", "name", "read_only")),
    ]


# --- MCP ------------------------------------------------------------------------------------


@pytest.fixture
def mcp(world):
    _, key = create_api_key(org=world["acme"].org, can_read=True, can_write=True, can_forget=True)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def quoted(text: str) -> str:
    """``text`` percent-encoded for a URL (a lone surrogate as the bytes Python would
    write for it, which the server decodes as it can)."""
    return quote(text, safe="", errors="surrogatepass")


def typeable(text: str) -> str:
    """``text`` as a browser could send it in a form (no lone surrogates)."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def record_id(world: dict[str, Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([*world["acme_ids"], world["secret_id"]]), HOSTILE)


def dict_or_any(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, strategy, HOSTILE)


DOMAIN = st.one_of(st.sampled_from(["support", "support", "nope"]), HOSTILE)


def tool_calls(world: dict[str, Any]) -> st.SearchStrategy[tuple[str, Any]]:
    ids = record_id(world)
    arguments = {
        "memory_query": QUERY_BODY,
        "memory_write": WRITE_BODY,
        "memory_get": st.fixed_dictionaries({"id": ids}),
        "memory_history": st.fixed_dictionaries({"id": ids}),
        "memory_timeline": st.fixed_dictionaries({"id": ids}),
        "memory_update": st.fixed_dictionaries({"id": ids, "fields": field(ITEM)}),
        "memory_forget": FORGET_BODY,
        "memory_sources": st.dictionaries(TEXT, JSON, max_size=2),
    }

    def with_domain(body: Any, domain: Any) -> Any:
        if isinstance(body, dict):
            return {**body, "domain": domain}
        return body

    return st.one_of(
        *[
            st.tuples(st.just(name), st.builds(with_domain, dict_or_any(strategy), DOMAIN))
            for name, strategy in arguments.items()
        ],
        st.tuples(TEXT, ANY),  # an unknown tool
    )


def assert_jsonrpc_answer(response: Any, request_id: Any) -> dict[str, Any]:
    assert response.status_code < 500, response.content[:500]
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == request_id, body
    error = body.get("error")
    if error is not None:
        assert error["code"] != -32603, body
        assert (error.get("data") or {}).get("code") != "server_error", body
    return body


def test_fuzzed_tool_calls_never_fail_the_server_nor_cross_tenants(mcp, world):
    @DOORS
    @given(call=tool_calls(world))
    def run(call: tuple[str, Any]) -> None:
        name, arguments = call
        acme, globex = memory_of(world["acme"].org), everything_of(world["globex"].org)
        response = rpc(mcp, tools_call(name, arguments, request_id=1))
        body = assert_jsonrpc_answer(response, 1)
        assert SECRET not in response.content.decode()
        result = body.get("result")
        if result is not None and result.get("isError"):
            assert result["structuredContent"]["code"] != "server_error", result
        if result is None or result.get("isError"):
            assert memory_of(world["acme"].org) == acme  # refused: nothing changed
        assert everything_of(world["globex"].org) == globex

    run()


def resource_uris(world: dict[str, Any]) -> st.SearchStrategy[Any]:
    part = st.one_of(
        st.sampled_from(["support", "memory", "handbook", *world["acme_ids"], world["secret_id"]]),
        TEXT,
    )
    uris = st.builds(
        lambda parts: "memoryhub://" + "/".join(quoted(p) for p in parts),
        st.lists(part, min_size=0, max_size=4),
    )
    return st.one_of(uris, uris, TEXT, ANY)


def test_fuzzed_resource_reads_never_fail_the_server(mcp, world):
    @DOORS
    @given(uri=resource_uris(world))
    def run(uri: Any) -> None:
        response = rpc(
            mcp, {"jsonrpc": "2.0", "id": "r", "method": "resources/read", "params": {"uri": uri}}
        )
        assert_jsonrpc_answer(response, "r")
        assert SECRET not in response.content.decode()

    run()


ENVELOPE = st.dictionaries(
    st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"]) | TEXT,
    st.one_of(
        st.sampled_from(["2.0", "1.0", 2.0, None, 1, "x", "ping", "tools/list", "initialize"]),
        HOSTILE,
    ),
    max_size=6,
)


def is_valid_id(value: Any) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


def test_fuzzed_jsonrpc_envelopes_are_framed_as_the_specification_says(mcp, world):
    @DOORS
    @given(
        message=st.one_of(ENVELOPE, ENVELOPE, ANY, st.sampled_from([b"", b"  ", b"{", b"\xff"])),
        duplicate=st.sampled_from([None, "method", "id", "jsonrpc"]),
    )
    def run(message: Any, duplicate: str | None) -> None:
        if isinstance(message, bytes):  # no JSON at all: a parse error, never a 202
            response = rpc(mcp, message)
            assert response.status_code == 400, response.content
            assert response.json()["error"]["code"] == -32700
            return
        text = json.dumps(message)
        if duplicate is not None and isinstance(message, dict) and message:
            text = f'{{"{duplicate}": "tools/list", {text[1:]}'  # the key given twice
        response = rpc(mcp, text)
        assert response.status_code < 500, response.content[:500]
        if response.status_code == 202:  # acknowledged: a notification or a response
            assert duplicate is None and isinstance(message, dict)
            assert message.get("jsonrpc") == "2.0"
            assert "id" not in message or "method" not in message
            return
        body = response.json()
        if "result" in body:  # answered: a well-formed request
            assert duplicate is None and isinstance(message, dict), body
            assert message.get("jsonrpc") == "2.0" and isinstance(message.get("method"), str)
            assert is_valid_id(message.get("id")) and body["id"] == message["id"]
        else:
            assert body["error"]["code"] != -32603, body
            if duplicate is None and isinstance(message, dict) and is_valid_id(message.get("id")):
                assert body["id"] == message["id"], body  # every error names its request

    run()


# --- REST: every route -------------------------------------------------------------------------

ROUTES = [
    ("get", "domains/{domain}/records"),
    ("post", "domains/{domain}/records"),
    ("get", "domains/{domain}/records/{segment}"),
    ("put", "domains/{domain}/records/{segment}"),
    ("patch", "domains/{domain}/records/{segment}"),
    ("delete", "domains/{domain}/records/{segment}"),
    ("get", "domains/{domain}/records/{segment}/history"),
    ("get", "domains/{domain}/records/{segment}/timeline"),
    ("post", "domains/{domain}/query"),
    ("post", "domains/{domain}/forget"),
    ("get", "domains/{domain}/sources"),
    ("get", "domains/{domain}/namespaces"),
    ("get", "domains/{domain}/erasures/{segment}"),
    ("get", "whoami"),
    ("get", "health"),
    ("get", "{segment}"),
]


def test_fuzzed_rest_routes_never_fail_the_server_nor_cross_tenants(world):
    _, key = create_api_key(org=world["acme"].org, can_read=True, can_write=True, can_forget=True)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    segment = st.one_of(st.sampled_from([*world["acme_ids"], world["secret_id"]]), TEXT)
    parameters = st.dictionaries(
        st.sampled_from(
            [
                "namespace",
                "kind",
                "tag",
                "key_prefix",
                "source",
                "status",
                "ordering",
                "cursor",
                "wait",
                "page_size",
                "where",
                "prefix",
                "delimiter",
                "limit",
            ]
        )
        | TEXT,
        TEXT,
        max_size=4,
    )

    @DOORS
    @given(
        route=st.sampled_from(ROUTES),
        domain=st.one_of(st.just("support"), TEXT),
        segment=segment,
        parameters=parameters,
        body=st.one_of(st.none(), HOSTILE),
    )
    def run(route: tuple[str, str], domain: str, segment: str, parameters: dict, body: Any) -> None:
        method, template = route
        path = template.format(domain=quoted(domain), segment=quoted(segment))
        query = "&".join(f"{quoted(k)}={quoted(v)}" for k, v in parameters.items())
        url = f"/api/v1/{path}" + (f"?{query}" if query else "")
        globex = everything_of(world["globex"].org)
        acme = memory_of(world["acme"].org)
        if method in ("get", "delete"):
            response = getattr(client, method)(url)
        else:
            data = None if body is None else json.dumps(body)
            response = getattr(client, method)(url, data, content_type="application/json")
        if response.status_code == 405:
            return
        assert_contract(response)
        assert SECRET not in response.content.decode()
        if response.status_code >= 400:
            assert memory_of(world["acme"].org) == acme
        assert everything_of(world["globex"].org) == globex

    run()


# --- the admin: every action and form ------------------------------------------------------------


@pytest.fixture
def operator(world) -> Client:
    user = MembershipFactory(org=world["acme"].org, role="owner", user__is_staff=True).user
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=["memoryhub", "tenants"])
    )
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


ACTIONS = [
    ("/admin/tenants/org/", "erase_memory"),
    ("/admin/tenants/org/", "delete_selected"),
    ("/admin/tenants/domain/", "erase_memory"),
    ("/admin/tenants/domain/", "delete_selected"),
    ("/admin/tenants/apikey/", "revoke_keys"),
    ("/admin/tenants/apikey/", "delete_selected"),
    ("/admin/tenants/membership/", "delete_selected"),
    ("/admin/memoryhub/memoryrecord/", "reembed"),
    ("/admin/memoryhub/memoryrecord/", "delete_selected"),
    ("/admin/memoryhub/knowledgebase/", "delete_selected"),
    ("/admin/memoryhub/observation/", "delete_selected"),
    ("/admin/memoryhub/erasurereceipt/", "delete_selected"),
]


def as_form_value(value: Any) -> str:
    return typeable(value if isinstance(value, str) else json.dumps(value))


form_value = st.one_of(TEXT, HOSTILE).map(as_form_value)


def admin_ids(world: dict[str, Any]) -> st.SearchStrategy[str]:
    """Ids of both orgs' rows (the other org's must be refused), and anything at all."""
    acme, globex = world["acme"], world["globex"]
    known = [
        *world["acme_ids"],
        world["secret_id"],
        *(str(pk) for pk in (acme.org.pk, acme.domain.pk, globex.org.pk, globex.domain.pk)),
        *ApiKey.objects.values_list("pk", flat=True),
    ]
    return st.one_of(st.sampled_from(known), form_value)


def test_fuzzed_admin_actions_never_fail_the_server_nor_cross_tenants(operator, world):
    @DOORS
    @given(
        action=st.sampled_from(ACTIONS),
        selected=st.lists(admin_ids(world), max_size=4),
        post=st.sampled_from([None, "yes", "no"]),
        extra=st.dictionaries(
            st.sampled_from(["select_across", "index", "q", "o"]), form_value, max_size=2
        ),
    )
    def run(action: tuple[str, str], selected: list[str], post: str | None, extra: dict) -> None:
        changelist, name = action
        data: dict[str, Any] = {"action": name, "_selected_action": selected, **extra}
        if post is not None:
            data["post"] = post
        globex = everything_of(world["globex"].org)
        before = everything_of(world["acme"].org)
        response = operator.post(changelist, data)
        assert response.status_code < 500, (response.status_code, data)
        if response.status_code == 400:
            assert everything_of(world["acme"].org) == before
        assert everything_of(world["globex"].org) == globex
        assert SECRET.encode() not in response.content

    run()


def admin_forms(world: dict[str, Any]) -> list[tuple[str, str, dict[str, st.SearchStrategy[Any]]]]:
    acme = world["acme"]
    kb = KnowledgeBase.unscoped.get(org=acme.org, name="memory")
    value = form_value
    too_deep = st.builds(
        lambda n: '{"a": ' + "[" * n + "]" * n + "}", st.sampled_from([900, 950, 5000])
    )
    metadata = st.one_of(
        st.builds(lambda v: json.dumps({"a": v}), JSON),
        DEEP.map(json.dumps),
        too_deep,
        too_deep,
        st.just('{"a": 1, "a": 2}'),
        value,
    )
    pk = lambda *good: st.one_of(st.sampled_from([str(g) for g in good]), value)  # noqa: E731
    orgs = pk(acme.org.pk, world["globex"].org.pk)
    domains = pk(acme.domain.pk, world["globex"].domain.pk)
    return [
        (
            "post",
            "/admin/memoryhub/memoryrecord/add/",
            {
                "knowledge_base": pk(kb.pk),
                "namespace": value,
                "key": value,
                "kind": st.sampled_from(["semantic", "x"]) | value,
                "content": value,
                "tags": value,
                "metadata": metadata,
                "expires_at": value,
                "occurred_at": value,
            },
        ),
        (
            "post",
            f"/admin/memoryhub/memoryrecord/{world['acme_ids'][0]}/change/",
            {
                "key": value,
                "kind": st.sampled_from(["semantic"]) | value,
                "content": value,
                "tags": value,
                "metadata": metadata,
            },
        ),
        (
            "post",
            "/admin/memoryhub/knowledgebase/add/",
            {
                "domain": domains,
                "name": value,
                "description": value,
                "read_only": value,
                "on_write": value,
            },
        ),
        (
            "post",
            f"/admin/memoryhub/knowledgebase/{kb.pk}/import/",
            {"format": value, "namespace": value},
        ),
        (
            "post",
            "/admin/memoryhub/memoryrecord/erase-subject/",
            {
                "org": orgs,
                "domain": domains,
                "namespace": value,
                "user": value,
                "post": st.sampled_from(["yes", ""]),
            },
        ),
        (
            "get",
            "/admin/memoryhub/memoryrecord/playground/",
            {
                "domain": domains,
                "query": value,
                "mode": value,
                "k": value,
                "sources": value,
                "namespaces": value,
                "other_namespaces": value,
                "where": metadata,
                "occurred_after": value,
                "occurred_before": value,
                "context_turns": value,
            },
        ),
        ("post", "/admin/memoryhub/erasurereceipt/lookup/", {"namespace": value}),
        ("post", "/admin/tenants/domain/add/", {"org": orgs, "slug": value, "name": value}),
        ("post", "/admin/tenants/org/add/", {"slug": value, "name": value, "external_ref": value}),
        (
            "post",
            "/admin/tenants/apikey/add/",
            {
                "name": value,
                "org": orgs,
                "domain": domains,
                "can_read": value,
                "expiry_date_0": value,
                "expiry_date_1": value,
            },
        ),
        ("post", "/admin/tenants/membership/add/", {"org": orgs, "user": value, "role": value}),
        (
            "get",
            "/admin/memoryhub/memoryrecord/",
            {"q": value, "status__exact": value, "namespace": value, "o": value, "p": value},
        ),
        (
            "get",
            "/admin/memoryhub/observation/",
            {"q": value, "kind__exact": value, "created_at__gte": value},
        ),
        ("get", "/admin/memoryhub/erasurereceipt/", {"q": value, "created_at__year": value}),
    ]


FORMS = [
    "record add",
    "record change",
    "knowledge base add",
    "import",
    "erase subject",
    "playground",
    "receipt lookup",
    "domain add",
    "org add",
    "api key add",
    "membership add",
    "records list",
    "observations list",
    "receipts list",
]


@pytest.mark.parametrize("form", FORMS)
def test_fuzzed_admin_forms_never_fail_the_server_nor_cross_tenants(operator, world, form):
    method, url, fields = admin_forms(world)[FORMS.index(form)]

    @DOORS
    @given(data=st.data(), every_field=st.booleans())
    def run(data: Any, every_field: bool) -> None:
        names = (
            sorted(fields) if every_field else data.draw(st.sets(st.sampled_from(sorted(fields))))
        )
        values = {name: data.draw(fields[name], label=name) for name in names}
        globex = everything_of(world["globex"].org)
        before = everything_of(world["acme"].org)
        response = getattr(operator, method)(url, values)
        assert response.status_code < 500, (response.status_code, url, values)
        if response.status_code != 302:  # a form shown again, or refused: nothing saved
            assert everything_of(world["acme"].org) == before
        assert everything_of(world["globex"].org) == globex
        assert SECRET.encode() not in response.content

    run()
