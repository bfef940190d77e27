"""A change of embedding model loses no recall.

Records keep serving vector queries with their old vectors until they have new ones;
queries embed the query once per model present in the scope; re-embedding (command and
admin action, one service function) never hides a record.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from memoryhub.conf import memoryhub_settings
from memoryhub.embedders import HashingEmbedder
from memoryhub.models import MemoryRecord
from memoryhub.scope import tenant_scope
from memoryhub.services import indexing, query, write
from tests.cluster import SHARDS_OVER_OWN_CONNECTIONS, single_node

PASSAGES = [
    "Refunds are issued to the original payment method within 5 business days.",
    "Orders over $500 need a manager's approval before they ship.",
    "Store credit never expires.",
    "Deploys freeze on Fridays.",
    "Support answers chats between 8am and 6pm Central European Time.",
    "Passwords are reset from the sign-in page with a link sent by email.",
]
OLD = HashingEmbedder().name  # hashing-384-c35, the default
NEW = HashingEmbedder(256).name


@pytest.fixture
def populated(tenant, committed):
    result = committed(write.write, tenant.scope, [{"content": text} for text in PASSAGES])
    return result.record_ids


@pytest.fixture
def new_model(settings):
    """The operator switches the embedder (recorded vectors stay on the old one)."""
    settings.MEMORYHUB = {**settings.MEMORYHUB, "EMBEDDER_OPTIONS": {"dimensions": 256}}
    assert memoryhub_settings.embedder().name == NEW


def models(tenant) -> dict[str, int]:
    with tenant_scope(tenant.scope):
        rows = MemoryRecord.objects.values_list("embedding_model", "status")
        found: dict[str, int] = {}
        for model, status in rows:
            assert status == MemoryRecord.Status.INDEXED  # never hidden
            found[model] = found.get(model, 0) + 1
        return found


def top(tenant, text: str, mode: str = "vector") -> str:
    result = query.query(tenant.scope, query=text, k=3, mode=mode)
    return result.items[0].content if result.items else ""


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_old_vectors_keep_serving_after_the_embedder_changes(tenant, populated, new_model, mode):
    assert models(tenant) == {OLD: len(PASSAGES)}
    for text in PASSAGES:
        assert top(tenant, text, mode) == text
    result = query.query(tenant.scope, query=PASSAGES[0], k=3, mode=mode)
    assert result.strategy.endswith("+2models")


def test_half_migrated_scope_finds_records_on_either_model(tenant, populated, new_model):
    half = populated[: len(PASSAGES) // 2]
    indexing.index_records(half)
    assert models(tenant) == {OLD: 3, NEW: 3}
    for text in PASSAGES:
        assert top(tenant, text) == text
    # Vector scores keep their meaning (each record's cosine under its own model).
    items = query.query(tenant.scope, query=PASSAGES[0], k=6, mode="vector").items
    assert len(items) == 6
    assert items[0].score == pytest.approx(1.0, abs=1e-5)
    assert all(-1.0 <= item.score <= 1.0 for item in items)


def test_once_migrated_only_the_new_model_is_queried(tenant, populated, new_model, committed):
    committed(indexing.reembed, MemoryRecord.unscoped.filter(pk__in=populated))
    assert models(tenant) == {NEW: len(PASSAGES)}
    assert indexing.models_in_domain(tenant.scope) == [NEW]
    result = query.query(tenant.scope, query=PASSAGES[1], k=3, mode="vector")
    assert result.items[0].content == PASSAGES[1]
    assert "models" not in result.strategy


def test_the_command_reembeds_without_hiding_and_reports_progress(
    tenant, other_tenant, populated, new_model, committed
):
    committed(write.write, other_tenant.scope, [{"content": "Globex ships on Mondays."}])
    progress = indexing.model_change_progress(tenant.scope)
    assert progress == {
        "model": NEW,
        "previous": {OLD: {"records": len(PASSAGES), "serves_queries": True}},
        "migrating": True,
    }
    out = StringIO()
    committed(
        call_command,
        "memoryhub_reembed",
        "--org",
        tenant.org.slug,
        "--domain",
        tenant.domain.slug,
        stdout=out,
        stderr=StringIO(),
    )
    assert f"{len(PASSAGES)} record(s) to embed with {NEW}" in out.getvalue()
    assert models(tenant) == {NEW: len(PASSAGES)}
    assert indexing.model_change_progress(tenant.scope)["migrating"] is False
    # The other org was not touched (its record was indexed with the new model already).
    assert models(other_tenant) == {NEW: 1}


def test_a_model_without_a_known_embedder_is_reported_and_skipped(tenant, populated, new_model):
    MemoryRecord.unscoped.filter(pk=populated[0]).update(embedding_model="mystery-model")
    progress = indexing.model_change_progress(tenant.scope)
    assert progress["previous"]["mystery-model"] == {"records": 1, "serves_queries": False}
    # The query still answers, from the models it can embed for.
    assert top(tenant, PASSAGES[1]) == PASSAGES[1]
    assert top(tenant, PASSAGES[0], mode="keyword") == PASSAGES[0]


def test_previous_embedders_setting_names_a_non_default_model(tenant, settings, committed):
    settings.MEMORYHUB = {**settings.MEMORYHUB, "EMBEDDER_OPTIONS": {"word_weight": 2.0}}
    committed(write.write, tenant.scope, [{"content": text} for text in PASSAGES])
    custom = memoryhub_settings.embedder()
    settings.MEMORYHUB = {
        **settings.MEMORYHUB,
        "EMBEDDER_OPTIONS": {"dimensions": 256},
        "PREVIOUS_EMBEDDERS": [
            {
                "EMBEDDER": "memoryhub.embedders.HashingEmbedder",
                "EMBEDDER_OPTIONS": {"word_weight": 2.0},
            }
        ],
    }
    assert memoryhub_settings.embedder_for(custom.name).weights == (2.0, 0.5, 0.3)
    assert top(tenant, PASSAGES[2]) == PASSAGES[2]


def test_another_tenants_old_vectors_never_answer(tenant, other_tenant, populated, new_model):
    assert query.query(other_tenant.scope, query=PASSAGES[0], k=3, mode="vector").items == []
    assert indexing.models_in_domain(other_tenant.scope) == []


def test_hashing_names_are_recognised_and_others_are_not():
    assert HashingEmbedder.from_name("hashing-256-c24").dimensions == 256
    assert HashingEmbedder.from_name("hashing-256-c24").char_ngrams == (2, 4)
    assert HashingEmbedder.from_name("hashing-1-c35") is None
    assert HashingEmbedder.from_name("st-all-MiniLM-L6-v2") is None


def test_calibrated_merge_lifts_what_stands_out_under_its_own_model():
    # The configured model's cosines run high and flat; the previous model's run low,
    # with one clear standout: compared raw, the standout loses; calibrated, it wins.
    new = [(f"n{i}", 0.8 - i * 0.01) for i in range(12)]
    old = [("hit", 0.6)] + [(f"o{i}", 0.2 - i * 0.005) for i in range(11)]
    assert query.merge_models([new, old], "raw")[0][0] == "n0"
    calibrated = query.merge_models([new, old], "calibrated")
    assert calibrated[0][0] == "hit"
    assert dict(calibrated)["n0"] == pytest.approx(0.8)  # the configured model's stay cosines
    # Too few candidates to measure a scale: compared as they are.
    assert query.merge_models([new[:3], old[:3]], "calibrated")[0][0] == "n0"


@single_node(SHARDS_OVER_OWN_CONNECTIONS)
def test_health_and_the_operator_home_show_the_change(
    tenant, other_tenant, populated, new_model, admin_client, api_client, committed
):
    committed(write.write, other_tenant.scope, [{"content": "Globex ships on Mondays."}])
    health = api_client.get("/api/v1/health").json()["embedder"]
    assert (health["name"], health["previous_models"], health["migrating"]) == (NEW, [OLD], True)
    html = admin_client.get("/admin/").content.decode()
    assert "On previous model" in html
    row = html.split('data-domain="acme/support"', 1)[1].split("</tr>", 1)[0]
    assert f'<td class="num">{len(PASSAGES)}</td>' in row
    other = html.split('data-domain="globex/support"', 1)[1].split("</tr>", 1)[0]
    assert other.count('<td class="num">0</td>') >= 3  # pending, failed, previous model
    committed(indexing.reembed, MemoryRecord.unscoped.all())
    assert api_client.get("/api/v1/health").json()["embedder"]["migrating"] is False
    assert "On previous model" not in admin_client.get("/admin/").content.decode()
