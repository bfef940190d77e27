"""The data model: constraints, generated columns and hashes, against real PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from memoryhub.models import MemoryRecord, content_hash, normalize_content
from tests.factories import KnowledgeBaseFactory, MemoryRecordFactory


@pytest.mark.django_db
def test_key_is_unique_per_knowledge_base_and_namespace(tenant):
    kb = KnowledgeBaseFactory(domain=tenant.domain)
    MemoryRecordFactory(knowledge_base=kb, namespace="user:alice", key="currency")
    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryRecordFactory(knowledge_base=kb, namespace="user:alice", key="currency")


@pytest.mark.django_db
def test_same_key_in_another_namespace_or_kb_is_allowed(tenant):
    kb = KnowledgeBaseFactory(domain=tenant.domain)
    other_kb = KnowledgeBaseFactory(domain=tenant.domain)
    MemoryRecordFactory(knowledge_base=kb, namespace="user:alice", key="currency")
    MemoryRecordFactory(knowledge_base=kb, namespace="user:bob", key="currency")
    MemoryRecordFactory(knowledge_base=other_kb, namespace="user:alice", key="currency")
    assert MemoryRecord.unscoped.filter(key="currency").count() == 3


@pytest.mark.django_db
def test_records_without_key_do_not_collide(tenant):
    kb = KnowledgeBaseFactory(domain=tenant.domain)
    MemoryRecordFactory(knowledge_base=kb, key=None)
    MemoryRecordFactory(knowledge_base=kb, key=None)
    assert MemoryRecord.unscoped.filter(key__isnull=True).count() == 2


@pytest.mark.django_db
def test_knowledge_base_name_is_unique_per_domain(tenant, other_tenant):
    KnowledgeBaseFactory(domain=tenant.domain, name="handbook")
    KnowledgeBaseFactory(domain=other_tenant.domain, name="handbook")
    with pytest.raises(IntegrityError), transaction.atomic():
        KnowledgeBaseFactory(domain=tenant.domain, name="handbook")


@pytest.mark.django_db
def test_search_vector_is_generated_by_postgres(tenant):
    record = MemoryRecordFactory(
        knowledge_base__domain=tenant.domain, content="Refunds are issued within days"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT search_vector @@ plainto_tsquery('english', 'refund') "
            "FROM memoryhub_memoryrecord WHERE id = %s",
            [record.pk],
        )
        assert cursor.fetchone() == (True,)


@pytest.mark.django_db
def test_embedding_column_is_untyped_vector():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'memoryhub_memoryrecord'::regclass AND attname = 'embedding'"
        )
        assert cursor.fetchone() == ("vector",)


@pytest.mark.django_db
def test_vectors_of_different_dimensions_coexist(tenant):
    kb = KnowledgeBaseFactory(domain=tenant.domain)
    small = MemoryRecordFactory(knowledge_base=kb, embedding=[1.0, 0.0, 0.0], embedding_model="a")
    large = MemoryRecordFactory(knowledge_base=kb, embedding=[0.5] * 8, embedding_model="b")
    assert len(MemoryRecord.unscoped.get(pk=small.pk).embedding) == 3
    assert len(MemoryRecord.unscoped.get(pk=large.pk).embedding) == 8


@pytest.mark.django_db
def test_tags_and_status_are_constrained(tenant):
    kb = KnowledgeBaseFactory(domain=tenant.domain)
    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryRecordFactory(knowledge_base=kb, status="weird")
    record = MemoryRecordFactory(knowledge_base=kb, tags=["billing", "eu"])
    assert MemoryRecord.unscoped.filter(tags__contains=["eu"]).get() == record


def test_content_hash_normalises_case_space_and_unicode():
    assert normalize_content("  Hello\tWORLD \n") == "hello world"
    assert content_hash("Ｈello  world") == content_hash("hello world")
    assert content_hash("hello world") != content_hash("hello, world")


@pytest.mark.django_db
def test_save_computes_content_hash(tenant):
    kb = KnowledgeBaseFactory(domain=tenant.domain)
    record = MemoryRecord(
        org=tenant.org, domain=tenant.domain, knowledge_base=kb, content="Some Content"
    )
    record.save()
    assert record.content_hash == content_hash("some content")


@pytest.mark.django_db
def test_a_records_row_stays_whole_so_scans_read_no_toast(tenant, committed):
    from memoryhub.services import write

    # ~1,000 characters, a 384-d vector and the tsvector: past PostgreSQL's 2 KB default,
    # below the table's toast_tuple_target (migration 0003).
    content = " ".join(f"word{i} refunds policy" for i in range(50))
    result = committed(write.write, tenant.scope, [{"content": content}])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_size(r.*), pg_column_toast_chunk_id(embedding) IS NULL,"
            " pg_column_toast_chunk_id(search_vector) IS NULL, status"
            " FROM memoryhub_memoryrecord r WHERE id = %s",
            [result.record_ids[0]],
        )
        size, embedding_inline, search_vector_inline, status = cursor.fetchone()
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'memoryhub_memoryrecord'")
        (options,) = cursor.fetchone()
    assert status == "indexed"
    assert size > 2032  # would have been toasted with PostgreSQL's defaults
    assert embedding_inline and search_vector_inline
    assert "toast_tuple_target=8160" in options
