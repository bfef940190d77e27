"""One request vocabulary: every door takes the fields ``memoryhub.vocabulary`` declares.

For each request (a write, its item and an import's line, an update, a query, a forget)
the REST API's OpenAPI component, the MCP tool's input schema and the service that
validates it name the same fields, and state and enforce the same settings bounds. A
field one door gains and another lacks is red here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

from memoryhub import vocabulary
from memoryhub.exceptions import ValidationFailed
from memoryhub.mcp.tools import IDEMPOTENCY_ARGUMENT, TOOLS
from memoryhub.services import forget, imports, updates
from memoryhub.services.query import QueryRequest

#: What an MCP tool leaves out of the request it takes, and why: an MCP answer carries
#: both shapes of a query's answer, and erasing a whole domain is not an agent's call.
MCP_LEAVES_OUT = {"memory_query": {"format"}, "memory_forget": {"all"}}


def openapi_components() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def mcp_arguments(tool: str) -> dict[str, Any]:
    """The request part of a tool's input schema (an update's changes are its fields)."""
    properties = TOOLS[tool].input_schema(None)["properties"]
    if tool == "memory_update":
        return properties["fields"]["properties"]
    # The domain and the idempotency key are REST's URL and header, not its body.
    envelope = {"domain", IDEMPOTENCY_ARGUMENT}
    return {name: schema for name, schema in properties.items() if name not in envelope}


def refused_as_unknown(check: Callable[[dict[str, Any]], object], name: str) -> bool:
    """Whether the service ``check`` refuses a request naming ``name`` as no field of it
    (any other complaint about the value means the field is known)."""
    try:
        check({name: object()})
    except ValidationFailed as exc:
        messages = [m for path, ms in exc.errors.items() if path.endswith(name) for m in ms]
        return any("is not a" in m or "cannot be changed" in m for m in messages)
    return False


def check_item(fields: dict[str, Any]) -> object:
    return vocabulary.items_of([{"content": "x", **fields}])


def check_import_line(fields: dict[str, Any]) -> object:
    problems = imports.check_row(imports.Row(1, {"content": "x", **fields}))
    if problems:
        name, message = problems[0].split(": ", 1)
        raise ValidationFailed({name: [message]})
    return None


def check_update(fields: dict[str, Any]) -> object:
    return updates._check_update_fields(fields)


def check_query(fields: dict[str, Any]) -> object:
    return QueryRequest.build(**{"query": "x", **fields})


def check_write(fields: dict[str, Any]) -> object:
    return vocabulary.WriteBody.parse(fields)


def check_forget(fields: dict[str, Any]) -> object:
    return forget.ForgetRequest.from_body(fields)


REQUESTS = [
    # (declaration, OpenAPI component, MCP tool, the service's check)
    (vocabulary.WriteBody, "WriteRequest", "memory_write", check_write),
    (vocabulary.WriteItem, "ItemIn", None, check_item),
    (vocabulary.WriteItem, "ItemIn", None, check_import_line),
    (vocabulary.RecordUpdate, "PatchedRecordUpdate", "memory_update", check_update),
    (vocabulary.QueryBody, "QueryRequest", "memory_query", check_query),
    (vocabulary.ForgetBody, "ForgetRequest", "memory_forget", check_forget),
]  # fmt: skip


@pytest.mark.parametrize(
    ("declaration", "component", "tool", "check"),
    REQUESTS,
    ids=["write", "item", "import line", "update", "query", "forget"],
)
def test_every_door_takes_the_declared_fields(declaration, component, tool, check):
    declared = set(vocabulary.field_names(declaration))
    assert declared == set(openapi_components()[component]["properties"])
    if tool is not None:
        assert declared - MCP_LEAVES_OUT.get(tool, set()) == set(mcp_arguments(tool))
    candidates = set().union(*(vocabulary.field_names(each[0]) for each in REQUESTS))
    candidates |= {"id", "domain", "import_job", "actor", "operator", "not_a_field"}
    accepted = {name for name in candidates if not refused_as_unknown(check, name)}
    assert accepted == declared


def test_the_write_tool_items_are_the_declared_item():
    items = mcp_arguments("memory_write")["items"]["items"]
    assert set(items["properties"]) == set(vocabulary.field_names(vocabulary.WriteItem))
    assert items["required"] == ["content"]


@pytest.fixture
def tight(settings):
    settings.MEMORYHUB = {
        **settings.MEMORYHUB,
        "MAX_K": 7,
        "DEFAULT_K": 4,
        "MAX_CONTENT_LENGTH": 30,
        "MAX_TAGS": 2,
        "MAX_WRITE_ITEMS": 3,
    }


def test_every_door_states_and_enforces_the_bounds_the_settings_give(tight):
    components = openapi_components()
    item = mcp_arguments("memory_write")["items"]
    query = mcp_arguments("memory_query")
    assert item["maxItems"] == 3
    assert item["items"]["properties"]["content"]["maxLength"] == 30
    assert components["ItemIn"]["properties"]["content"]["maxLength"] == 30
    assert item["items"]["properties"]["tags"]["maxItems"] == 2
    assert (query["k"]["maximum"], query["k"]["default"]) == (7, 4)
    assert components["QueryRequest"]["properties"]["k"]["maximum"] == 7
    vocabulary.items_of([{"content": "x" * 30, "tags": ["a", "b"]}] * 3)
    with pytest.raises(ValidationFailed) as refused:
        vocabulary.items_of([{"content": "x" * 31, "tags": ["a", "b", "c"]}])
    assert set(refused.value.errors) == {"items[0].content", "items[0].tags"}
    with pytest.raises(ValidationFailed, match="items"):
        vocabulary.items_of([{"content": "x"}] * 4)
    assert QueryRequest.build(query="x").k == 4
    assert QueryRequest.build(query="x", k=7).k == 7
    with pytest.raises(ValidationFailed, match="k"):
        QueryRequest.build(query="x", k=8)


def test_the_query_defaults_are_the_declared_ones():
    declared = vocabulary.QueryBody.model_fields
    built = QueryRequest.build(query="x")
    for name in ("mode", "rerank", "explain", "k"):
        default = declared[name].get_default(call_default_factory=True)
        assert getattr(built, name) == default, name
        assert mcp_arguments("memory_query")[name]["default"] == default


def test_every_document_of_a_process_names_a_put_and_a_patch_apart():
    """drf-spectacular marks a PATCH's request partial on the object it is given (here a
    class): the second document of a process named the PUT's request Patched too."""
    for _ in range(2):
        components = openapi_components()
        assert {"RecordUpdate", "PatchedRecordUpdate"} <= set(components)
        assert set(components["RecordUpdate"]["properties"]) == set(
            components["PatchedRecordUpdate"]["properties"]
        )


def test_a_valid_forget_stays_valid_when_checked_again():
    from pydantic import BaseModel

    class Carried(BaseModel):
        forget: forget.ForgetRequest

    asked = forget.ForgetRequest(source="handbook")
    assert Carried(forget=asked).forget.sources == ("handbook",)
    again = forget.ForgetRequest(**asked.model_dump(exclude_unset=True), import_job=None)
    assert again.sources == ("handbook",)


def test_a_page_size_in_another_script_is_refused_by_name():
    with pytest.raises(ValidationFailed) as refused:
        vocabulary.NamespaceListing.parse({"limit": "²"})
    assert refused.value.errors == {"limit": ["must be an integer from 1 to 1000."]}
