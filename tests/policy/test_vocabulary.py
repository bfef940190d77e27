"""One vocabulary: the bounds an operator sets are the ones every door states."""

from __future__ import annotations

import pytest

from memoryhub.admin.playground import PlaygroundForm
from tenants.models import Domain


@pytest.fixture
def tight(settings):
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


@pytest.mark.parametrize(
    ("setting", "value", "fine"),
    [("MAX_KEY_LENGTH", 300, 255), ("MAX_NAMESPACE_LENGTH", 500, 200), ("MAX_TAG_LENGTH", 65, 64)],
)
def test_a_length_setting_wider_than_its_column_is_an_error(settings, setting, value, fine):
    from django.core.checks import run_checks

    settings.MEMORYHUB = {**settings.MEMORYHUB, setting: fine}
    assert "memoryhub.E012" not in {m.id for m in run_checks(tags=["memoryhub"])}
    settings.MEMORYHUB = {**settings.MEMORYHUB, setting: value}
    [error] = [m for m in run_checks(tags=["memoryhub"]) if m.id == "memoryhub.E012"]
    assert setting in error.msg and str(fine) in error.msg


def test_a_cache_alias_caches_lacks_is_an_error(settings):
    from django.core.checks import run_checks

    settings.MEMORYHUB = {**settings.MEMORYHUB, "CACHE_ALIAS": "nope"}
    assert "memoryhub.E013" in {m.id for m in run_checks(tags=["memoryhub"])}
    settings.MEMORYHUB = {**settings.MEMORYHUB, "CACHE_ALIAS": "default"}
    assert "memoryhub.E013" not in {m.id for m in run_checks(tags=["memoryhub"])}
