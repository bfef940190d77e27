"""One vocabulary: the bounds an operator sets are the ones every door states."""

from __future__ import annotations

import pytest

from memoryhub.admin.playground import PlaygroundForm
from tenants.models import Domain


@pytest.fixture
def tight(settings):  # type: ignore[no-untyped-def]
    settings.MEMORYHUB = {
        **settings.MEMORYHUB,
        "MAX_K": 7,
        "MAX_QUERY_LENGTH": 50,
        "MAX_CONTENT_LENGTH": 300,
        "MAX_TAGS": 3,
        "MAX_KEY_LENGTH": 40,
    }


def test_the_openapi_schema_states_the_configured_bounds(client, tight):
    schema = client.get("/api/schema/?format=json").json()["components"]["schemas"]
    query = schema["QueryRequest"]["properties"]
    assert (query["k"]["maximum"], query["query"]["maxLength"]) == (7, 50)
    item = schema["ItemIn"]["properties"]
    assert (item["content"]["maxLength"], item["tags"]["maxItems"], item["key"]["maxLength"]) == (
        300,
        3,
        40,
    )
    update = (
        schema["PatchedRecordUpdate"]["properties"]
        if "PatchedRecordUpdate" in schema
        else (schema["RecordUpdate"]["properties"])
    )
    assert update["content"]["maxLength"] == 300


def test_the_playground_takes_its_bounds_from_the_settings(tenant, tight):
    domains = Domain.objects.all()
    form = PlaygroundForm({"domain": tenant.domain.pk, "query": "refunds", "k": 8}, domains=domains)
    assert not form.is_valid() and "k" in form.errors
    form = PlaygroundForm({"domain": tenant.domain.pk, "query": "x" * 51, "k": 7}, domains=domains)
    assert not form.is_valid() and "query" in form.errors
    form = PlaygroundForm(
        {"domain": tenant.domain.pk, "query": "refunds", "k": 7, "mode": "hybrid"}, domains=domains
    )
    assert form.is_valid(), form.errors
