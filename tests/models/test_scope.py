"""The tenant guard: scoped managers refuse unscoped queries, and None never reaches them."""

from __future__ import annotations

import pytest
from django_scopes import ScopeError, scope

from memoryhub.models import (
    KnowledgeBase,
    MemoryRecord,
    Observation,
    WordFrequency,
    WordStatistics,
)
from memoryhub.scope import Scope, ScopeRequired, operator_access, tenant_scope
from tests.factories import MemoryRecordFactory


@pytest.mark.parametrize(
    "model", [MemoryRecord, KnowledgeBase, Observation, WordFrequency, WordStatistics]
)
@pytest.mark.django_db
def test_unscoped_query_raises(model):
    with pytest.raises(ScopeError):
        list(model.objects.all())
    with pytest.raises(ScopeError):
        model.objects.filter(pk=1).exists()
    with pytest.raises(ScopeError):
        model.objects.count()


def test_scope_requires_both_ids():
    with pytest.raises(ScopeRequired):
        Scope(org_id=None, domain_id=1)
    with pytest.raises(ScopeRequired):
        Scope(org_id=1, domain_id=None)


@pytest.mark.parametrize("bad", [True, False, "1", 1.0, [1]])
def test_scope_refuses_non_integer_ids(bad):
    with pytest.raises(ScopeRequired):
        Scope(org_id=bad, domain_id=1)


def test_zero_is_a_valid_id():
    assert Scope(org_id=0, domain_id=0).key() == "org0:dom0"


def test_tenant_scope_refuses_anything_but_a_scope():
    with pytest.raises(ScopeRequired), tenant_scope(None):
        pass
    with pytest.raises(ScopeRequired), tenant_scope({"org": 1, "domain": 1}):
        pass


@pytest.mark.django_db
def test_django_scopes_none_would_leak_which_is_why_scope_refuses_it(tenant, other_tenant):
    """The sharp edge design.md warns about: a None dimension is not filtered."""
    MemoryRecordFactory(knowledge_base__domain=tenant.domain)
    MemoryRecordFactory(knowledge_base__domain=other_tenant.domain)
    with scope(org=None, domain=None):
        assert MemoryRecord.objects.count() == 2  # every tenant: never enter scopes this way
    with pytest.raises(ScopeRequired):
        Scope(org_id=None, domain_id=None)


@pytest.mark.django_db
def test_scoped_access_sees_only_that_scope(tenant, other_tenant):
    mine = MemoryRecordFactory(knowledge_base__domain=tenant.domain, content="acme secret")
    MemoryRecordFactory(knowledge_base__domain=other_tenant.domain, content="globex secret")
    with tenant_scope(tenant.scope):
        assert list(MemoryRecord.objects.values_list("content", flat=True)) == ["acme secret"]
        assert MemoryRecord.objects.filter(pk=mine.pk).exists()
        assert KnowledgeBase.objects.count() == 1
    with tenant_scope(other_tenant.scope):
        assert not MemoryRecord.objects.filter(pk=mine.pk).exists()


@pytest.mark.django_db
def test_another_domain_of_the_same_org_is_another_scope(tenant):
    from tests.factories import DomainFactory

    sales = DomainFactory(org=tenant.org, slug="sales")
    MemoryRecordFactory(knowledge_base__domain=tenant.domain, content="support fact")
    with tenant_scope(Scope.for_domain(sales)):
        assert MemoryRecord.objects.count() == 0


@pytest.mark.django_db
def test_operator_access_is_the_explicit_unscoped_path(tenant, other_tenant):
    MemoryRecordFactory(knowledge_base__domain=tenant.domain)
    MemoryRecordFactory(knowledge_base__domain=other_tenant.domain)
    with operator_access():
        assert MemoryRecord.objects.count() == 2
    assert MemoryRecord.unscoped.count() == 2


@pytest.mark.django_db
def test_related_lookups_work_outside_a_scope(tenant):
    record = MemoryRecordFactory(knowledge_base__domain=tenant.domain, knowledge_base__name="kb")
    fresh = MemoryRecord.unscoped.get(pk=record.pk)
    assert fresh.knowledge_base.name == "kb"
    assert fresh.source == "kb"


@pytest.mark.django_db
def test_reverse_relations_are_scoped_too(tenant):
    record = MemoryRecordFactory(knowledge_base__domain=tenant.domain)
    knowledge_base = record.knowledge_base
    with pytest.raises(ScopeError):
        list(knowledge_base.records.all())
    with tenant_scope(tenant.scope):
        assert list(knowledge_base.records.all()) == [record]
