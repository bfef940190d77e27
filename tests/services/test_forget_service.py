"""Forget (GDPR Art. 17): hard deletes, per-KB counts, audit without content."""

from __future__ import annotations

import pytest

from memoryhub import cache, policy
from memoryhub.exceptions import UnknownSource
from memoryhub.models import MemoryRecord, Observation
from memoryhub.scope import tenant_scope
from memoryhub.services import knowledge_bases, write
from memoryhub.services.forget import (
    ForgetRequest,
    NothingToForget,
    forget,
    forget_org,
    preview,
    salted_hash,
)
from tests.factories import DomainFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def memory(tenant, other_tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "notes")
    write.write(
        tenant.scope,
        [
            {"content": "Alice lives in Lyon.", "namespace": "user:alice"},
            {"content": "Alice likes tea.", "namespace": "user:alice", "key": "drink"},
            {"content": "Bob likes coffee.", "namespace": "user:bob", "key": "drink"},
            {"content": "Shared fact."},
        ],
    )
    write.write(
        tenant.scope, [{"content": "Alice's note.", "namespace": "user:alice"}], sources=["notes"]
    )
    write.write(other_tenant.scope, [{"content": "Alice at Globex.", "namespace": "user:alice"}])


def contents(tenant):
    with tenant_scope(tenant.scope):
        return sorted(MemoryRecord.objects.values_list("content", flat=True))


def test_forget_a_namespace_erases_the_data_subject_in_every_kb(tenant, other_tenant, memory):
    result = forget(
        tenant.scope,
        ForgetRequest(namespace="user:alice"),
        principal=policy.AgentPrincipal(label="dpo"),
    )
    assert result.deleted == 3
    assert result.by_source == {"memory": 2, "notes": 1}
    assert contents(tenant) == ["Bob likes coffee.", "Shared fact."]
    assert contents(other_tenant) == ["Alice at Globex."]


def test_forget_by_key_by_source_and_all(tenant, memory):
    assert forget(tenant.scope, ForgetRequest(namespace="user:bob", key="drink")).deleted == 1
    assert forget(tenant.scope, ForgetRequest(source="notes")).by_source == {"notes": 1}
    assert forget(tenant.scope, ForgetRequest(all=True)).deleted == 3
    assert contents(tenant) == []


def test_forget_by_key_spans_namespaces(tenant, memory):
    assert forget(tenant.scope, ForgetRequest(key="drink")).by_source == {"memory": 2}


def test_forget_needs_a_selector_or_all(tenant, memory):
    with pytest.raises(NothingToForget):
        ForgetRequest()
    with pytest.raises(NothingToForget) as raised:
        ForgetRequest(key="")
    assert "key" in raised.value.errors
    with pytest.raises(NothingToForget):
        ForgetRequest(namespace="bad\x00")
    assert len(contents(tenant)) == 5


def test_forget_of_an_unknown_source_is_an_error_and_nothing_matching_is_zero(tenant, memory):
    with pytest.raises(UnknownSource):
        forget(tenant.scope, ForgetRequest(source="nope"))
    with pytest.raises(UnknownSource):
        forget(tenant.scope, ForgetRequest(namespace="user:alice", sources=["memory", "memroy"]))
    assert forget(tenant.scope, ForgetRequest(namespace="user:nobody")).deleted == 0
    with tenant_scope(tenant.scope):
        assert not Observation.objects.filter(kind="memory.forgotten").exists()


def test_audit_holds_counts_and_a_salted_hash_never_content(tenant, memory):
    forget(
        tenant.scope,
        ForgetRequest(namespace="user:alice"),
        principal=policy.AgentPrincipal(label="dpo"),
    )
    with tenant_scope(tenant.scope):
        [audit] = Observation.objects.filter(kind="memory.forgotten")
    assert audit.count == 3
    assert audit.actor == "dpo"
    assert audit.payload["by_source"] == {"memory": 2, "notes": 1}
    assert audit.payload["selector"]["namespace"] == salted_hash("user:alice")
    dump = str(audit.payload) + audit.source
    for secret in ("user:alice", "alice", "Lyon", "tea"):
        assert secret not in dump.lower()


def test_forget_bumps_the_domain_cache_generation(tenant, other_tenant, memory, committed):
    before = cache.generation(tenant.scope)
    other_before = cache.generation(other_tenant.scope)
    committed(forget, tenant.scope, ForgetRequest(namespace="user:alice"))
    assert cache.generation(tenant.scope) > before
    assert cache.generation(other_tenant.scope) == other_before


def test_preview_counts_without_deleting(tenant, memory):
    assert preview(tenant.scope, ForgetRequest(namespace="user:alice")) == {"memory": 2, "notes": 1}
    assert len(contents(tenant)) == 5


def test_forget_org_erases_every_domain_of_that_org_only(tenant, other_tenant, memory):
    sales = DomainFactory(org=tenant.org, slug="sales")
    from memoryhub.scope import Scope

    write.write(Scope.for_domain(sales), [{"content": "Sales fact."}])
    result = forget_org(tenant.org.pk, principal=policy.SystemPrincipal(label="admin"))
    assert result.deleted == 6
    assert MemoryRecord.unscoped.filter(org=tenant.org).count() == 0
    assert contents(other_tenant) == ["Alice at Globex."]


def test_queued_task_for_forgotten_ids_is_a_no_op(tenant, memory):
    from memoryhub.services import indexing

    with tenant_scope(tenant.scope):
        ids = [str(pk) for pk in MemoryRecord.objects.values_list("id", flat=True)]
    forget(tenant.scope, ForgetRequest(all=True))
    result = indexing.index_records(ids)
    assert result.indexed == []
    assert sorted(result.skipped) == sorted(ids)
    assert MemoryRecord.unscoped.filter(pk__in=ids).count() == 0


def test_a_deletion_task_carries_the_label_of_who_asked_and_acts_for_it(
    tenant, acme_user, monkeypatch, django_capture_on_commit_callbacks
):
    from memoryhub import tasks
    from memoryhub.services import forget as forget_service

    knowledge_base = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    write.write(
        tenant.scope, [{"content": "Curated."}], sources=["handbook"], principal=policy.SYSTEM
    )
    sent: list[tuple[object, ...]] = []
    monkeypatch.setattr(
        forget_service.knowledge_base_deletion, "send", lambda *args, **kwargs: sent.append(args)
    )
    admin = policy.principal_for_user(acme_user, door="admin")
    with django_capture_on_commit_callbacks(execute=True):
        forget_service.schedule_knowledge_base_deletion(knowledge_base, principal=admin)
    label = f"admin:{acme_user.get_username()}"
    assert sent == [("delete_knowledge_base", knowledge_base.pk, label)]
    assert tasks.delete_knowledge_base(*sent[0][1:]) == 1  # the worker: read-only erased too
    audit = Observation.unscoped.get(kind="memory.forgotten", org=tenant.org)
    assert audit.actor == label
