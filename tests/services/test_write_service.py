"""The write service: validation, upsert, dedupe and the read-only policies of the seeds'
``ReadOnlyMemory`` (the seeds: the prototype texts whose printed outputs are the
behaviour spec, reproduced in ``test_sources_seeds.py``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memoryhub import policy
from memoryhub.exceptions import UnknownSource, ValidationFailed, WriteRefused
from memoryhub.models import KnowledgeBase, MemoryRecord, Observation
from memoryhub.scope import operator_access, tenant_scope
from memoryhub.services import knowledge_bases, write

pytestmark = pytest.mark.django_db


def records(tenant):
    with tenant_scope(tenant.scope):
        return list(MemoryRecord.objects.order_by("created_at", "content"))


def observations(tenant, kind):
    with tenant_scope(tenant.scope):
        return list(Observation.objects.filter(kind=kind).order_by("created_at"))


def test_write_stores_records_and_indexes_them_on_commit(tenant, committed):
    result = committed(
        write.write,
        tenant.scope,
        [
            {"content": "Refunds take 5 days.", "tags": ["billing"], "metadata": {"tier": 1}},
            {"content": "Alice prefers EUR.", "namespace": "user:alice", "kind": "semantic"},
        ],
        principal=policy.AgentPrincipal(label="test"),
    )
    assert result.accepted == ["memory"]
    assert result.refused == []
    assert result.failed == {}
    assert [r.deduplicated for r in result.records] == [False, False]
    stored = records(tenant)
    assert {r.content for r in stored} == {"Refunds take 5 days.", "Alice prefers EUR."}
    # Tasks run eagerly on commit here (no broker): the records are indexed.
    assert {r.status for r in stored} == {"indexed"}
    assert all(len(r.embedding) == 384 for r in stored)
    written = observations(tenant, Observation.Kind.MEMORY_WRITTEN)
    assert [(o.source, o.count, o.actor) for o in written] == [("memory", 2, "test")]


def test_memory_knowledge_base_is_created_on_first_use(tenant):
    with tenant_scope(tenant.scope):
        assert not KnowledgeBase.objects.exists()
    write.write(tenant.scope, [{"content": "first"}])
    with tenant_scope(tenant.scope):
        kb = KnowledgeBase.objects.get()
    assert kb.name == "memory"
    assert not kb.read_only


@pytest.mark.parametrize(
    ("item", "path"),
    [
        ({}, "items[1].content"),
        ({"content": "   "}, "items[1].content"),
        ({"content": 42}, "items[1].content"),
        ({"content": "x" * 20_001}, "items[1].content"),
        ({"content": "nul \x00 byte"}, "items[1].content"),
        ({"content": "ok", "kind": "dream"}, "items[1].kind"),
        ({"content": "ok", "tags": "billing"}, "items[1].tags"),
        ({"content": "ok", "tags": ["ok", ""]}, "items[1].tags[1]"),
        ({"content": "ok", "tags": ["t"] * 33}, "items[1].tags"),
        ({"content": "ok", "metadata": ["not", "a", "dict"]}, "items[1].metadata"),
        ({"content": "ok", "metadata": {"x": float("nan")}}, "items[1].metadata.x"),
        ({"content": "ok", "metadata": {"blob": "x" * 17_000}}, "items[1].metadata"),
        ({"content": "ok", "namespace": 7}, "items[1].namespace"),
        ({"content": "ok", "key": ""}, "items[1].key"),
        ({"content": "ok", "ttl_seconds": 0}, "items[1].ttl_seconds"),
        (
            {"content": "ok", "ttl_seconds": 5, "expires_at": "2030-01-01T00:00:00Z"},
            "items[1].ttl_seconds",
        ),
        ({"content": "ok", "expires_at": "tomorrow"}, "items[1].expires_at"),
        ({"content": "ok", "expires_at": "2030-01-01T00:00:00"}, "items[1].expires_at"),
        ({"content": "ok", "colour": "red"}, "items[1].colour"),
        ("just a string", "items[1]"),
    ],
)
def test_invalid_item_rejects_the_whole_batch_naming_index_and_field(tenant, item, path):
    with pytest.raises(ValidationFailed) as raised:
        write.write(tenant.scope, [{"content": "valid first item"}, item])
    assert path in raised.value.errors
    assert records(tenant) == []


def test_too_many_items_is_rejected(tenant, settings):
    settings.MEMORYHUB = {"MAX_WRITE_ITEMS": 3}
    with pytest.raises(ValidationFailed) as raised:
        write.write(tenant.scope, [{"content": f"n{i}"} for i in range(4)])
    assert "items" in raised.value.errors


def test_repeated_key_in_one_batch_is_rejected(tenant):
    with pytest.raises(ValidationFailed) as raised:
        write.write(tenant.scope, [{"content": "a", "key": "k"}, {"content": "b", "key": "k"}])
    assert raised.value.errors == {
        "items[1].key": ["repeats the key of items[0] in the same namespace."]
    }


def test_same_key_replaces_and_reembeds_only_when_content_changes(tenant, committed):
    first = committed(
        write.write, tenant.scope, [{"content": "EUR", "key": "currency", "namespace": "u:a"}]
    )
    record_id = first.records[0].id
    indexed_at = records(tenant)[0].indexed_at

    same = committed(
        write.write,
        tenant.scope,
        [{"content": "EUR", "key": "currency", "namespace": "u:a", "tags": ["pref"]}],
    )
    assert same.records[0].id == record_id
    [record] = records(tenant)
    assert record.tags == ["pref"]
    assert record.indexed_at == indexed_at  # not re-embedded

    changed = committed(
        write.write, tenant.scope, [{"content": "USD", "key": "currency", "namespace": "u:a"}]
    )
    assert changed.records[0].id == record_id
    assert changed.records[0].status == "pending"  # reported as written, before indexing
    [record] = records(tenant)
    assert record.content == "USD"
    assert record.status == "indexed"
    assert record.indexed_at > indexed_at


def test_same_content_is_deduplicated_within_kb_and_namespace(tenant, committed):
    first = committed(write.write, tenant.scope, [{"content": "Store credit never expires."}])
    again = write.write(
        tenant.scope,
        [{"content": "  store CREDIT never   expires. "}, {"content": "Something new."}],
    )
    assert again.records[0].id == first.records[0].id
    assert again.records[0].deduplicated is True
    assert again.records[0].status == "indexed"
    assert again.records[1].deduplicated is False
    assert len(records(tenant)) == 2
    [dedupe] = observations(tenant, Observation.Kind.MEMORY_DEDUPLICATED)
    assert (dedupe.source, dedupe.count) == ("memory", 1)


def test_dedupe_inside_one_batch(tenant):
    result = write.write(tenant.scope, [{"content": "twice"}, {"content": "Twice"}])
    assert result.records[1].id == result.records[0].id
    assert result.records[1].deduplicated
    assert len(records(tenant)) == 1


def test_dedupe_does_not_cross_namespaces_or_tenants(tenant, other_tenant):
    write.write(tenant.scope, [{"content": "shared text"}])
    other_namespace = write.write(tenant.scope, [{"content": "shared text", "namespace": "u:b"}])
    assert other_namespace.records[0].deduplicated is False
    other = write.write(other_tenant.scope, [{"content": "shared text"}])
    assert other.records[0].deduplicated is False
    assert len(records(tenant)) == 2
    assert len(records(other_tenant)) == 1


def test_key_in_another_tenant_is_never_replaced(tenant, other_tenant):
    write.write(tenant.scope, [{"content": "acme value", "key": "k"}])
    write.write(other_tenant.scope, [{"content": "globex value", "key": "k"}])
    assert [r.content for r in records(tenant)] == ["acme value"]
    assert [r.content for r in records(other_tenant)] == ["globex value"]


def test_ttl_and_expires_at_set_expiry(tenant):
    before = timezone.now()
    write.write(
        tenant.scope,
        [
            {"content": "short lived", "ttl_seconds": 60},
            {"content": "dated", "expires_at": "2031-05-01T12:00:00+02:00"},
        ],
    )
    stored = {record.content: record for record in records(tenant)}
    short, dated = stored["short lived"], stored["dated"]
    assert before + timedelta(seconds=59) < short.expires_at < before + timedelta(seconds=61)
    assert dated.expires_at.isoformat() == "2031-05-01T10:00:00+00:00"


# --- read-only knowledge bases (the seeds' "Read-only by policy") ---------------------


@pytest.fixture
def registry(tenant):
    return knowledge_bases.ensure_knowledge_base(tenant.scope, "registry", read_only=True)


def test_read_only_refuse_raises_with_source_and_count(tenant, registry):
    guess = [{"content": "I think it is eu-west-2."}]
    with pytest.raises(WriteRefused) as raised:
        write.write(
            tenant.scope,
            guess,
            sources=["registry"],
            principal=policy.AgentPrincipal(label="agent"),
        )
    assert (raised.value.source, raised.value.n) == ("registry", 1)
    assert records(tenant) == []
    registry.refresh_from_db()
    assert registry.refused_writes == 1
    [observation] = observations(tenant, Observation.Kind.MEMORY_WRITE_REFUSED)
    assert observation.payload == {
        "source": "registry",
        "n": 1,
        "policy": "refuse",
        "change": "write",
    }
    assert observation.actor == "agent"


def test_empty_write_to_read_only_is_refused_too(tenant, registry):
    with pytest.raises(WriteRefused) as raised:
        write.write(tenant.scope, [], sources=["registry"])
    assert raised.value.n == 0
    registry.refresh_from_db()
    assert registry.refused_writes == 1


def test_strict_fanout_reports_accepted_and_failed(tenant, registry):
    result = write.write(
        tenant.scope, [{"content": "I think it is eu-west-2."}], sources=["memory", "registry"]
    )
    assert result.accepted == ["memory"]
    assert result.refused == []
    assert list(result.failed) == ["registry"]
    assert [r.content for r in records(tenant)] == ["I think it is eu-west-2."]


def test_ignore_policy_reports_refused_and_writes_nothing_there(tenant):
    lenient = knowledge_bases.ensure_knowledge_base(
        tenant.scope, "registry", read_only=True, on_write=KnowledgeBase.OnWrite.IGNORE
    )
    result = write.write(
        tenant.scope, [{"content": "I think it is eu-west-2."}], sources=["memory", "registry"]
    )
    assert result.accepted == ["memory"]
    assert result.refused == ["registry"]
    assert result.failed == {}
    lenient.refresh_from_db()
    assert lenient.refused_writes == 1
    with tenant_scope(tenant.scope):
        assert not MemoryRecord.objects.filter(knowledge_base=lenient).exists()
    [observation] = observations(tenant, Observation.Kind.MEMORY_WRITE_REFUSED)
    assert observation.payload == {
        "source": "registry",
        "n": 1,
        "policy": "ignore",
        "change": "write",
    }


def test_ignore_alone_returns_normally(tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "kb", read_only=True, on_write="ignore")
    result = write.write(tenant.scope, [{"content": "dropped"}], sources=["kb"])
    assert (result.accepted, result.refused, result.failed) == ([], ["kb"], {})
    assert records(tenant) == []


def test_refused_writes_count_atomically(tenant, registry):
    for _ in range(3):
        with pytest.raises(WriteRefused):
            write.write(tenant.scope, [{"content": "x"}], sources=["registry"])
    registry.refresh_from_db()
    assert registry.refused_writes == 3


def test_operator_writes_are_not_bound_by_read_only(tenant, registry):
    result = write.write(
        tenant.scope,
        [{"content": "eu-west-1 is the GDPR-resident region."}],
        sources=["registry"],
        principal=policy.SystemPrincipal(label="operator:alice"),
    )
    assert result.accepted == ["registry"]
    [written] = observations(tenant, Observation.Kind.MEMORY_WRITTEN)
    assert written.payload["operator"] is True
    assert written.actor == "operator:alice"


def test_unknown_source_is_rejected_and_nothing_written(tenant):
    with pytest.raises(UnknownSource):
        write.write(tenant.scope, [{"content": "x"}], sources=["memory", "nope"])
    assert records(tenant) == []


def test_a_kb_of_another_tenant_is_unknown(tenant, other_tenant):
    knowledge_bases.ensure_knowledge_base(other_tenant.scope, "secrets")
    with pytest.raises(UnknownSource):
        write.write(tenant.scope, [{"content": "x"}], sources=["secrets"])
    with operator_access():
        assert not MemoryRecord.objects.exists()


@pytest.mark.parametrize("sources", ["memory", [], [""], [None], ["a" * 65]])
def test_malformed_sources_are_validation_errors(tenant, sources):
    with pytest.raises(ValidationFailed):
        write.write(tenant.scope, [{"content": "x"}], sources=sources)


def test_rolled_back_write_schedules_nothing(tenant, django_capture_on_commit_callbacks):
    from django.db import transaction

    with (
        django_capture_on_commit_callbacks() as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        write.write(tenant.scope, [{"content": "never committed"}])
        raise RuntimeError("rollback")
    assert callbacks == []
    assert records(tenant) == []
    with django_capture_on_commit_callbacks() as callbacks:
        write.write(tenant.scope, [{"content": "committed"}])
    assert len(callbacks) == 2  # the indexing task and the cache generation bump


def test_a_keyed_write_finds_existing_keys_through_the_unique_index(tenant):
    """The lookup of existing keys names the namespaces too, so the (knowledge base,
    namespace, key) index answers it: by key alone it would scan the whole knowledge
    base on every write, which makes a large import quadratic."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    write.write(tenant.scope, [{"content": "v1", "key": "k", "namespace": "user:a"}])
    with CaptureQueriesContext(connection) as queries:
        write.write(tenant.scope, [{"content": "v2", "key": "k", "namespace": "user:a"}])
    [lookup] = [q["sql"] for q in queries if "FOR UPDATE" in q["sql"] and '"key" IN' in q["sql"]]
    assert '"namespace" IN' in lookup, lookup
    assert MemoryRecord.unscoped.get(key="k").content == "v2"
