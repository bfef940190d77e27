"""Indexing, sweeping and expiry, through the services and the task bodies."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from memoryhub import tasks
from memoryhub.embedders import EmbedderError, HashingEmbedder
from memoryhub.models import MemoryRecord, Observation
from memoryhub.scope import tenant_scope
from memoryhub.services import indexing, knowledge_bases, maintenance, vector_indexes, write
from tests.factories import KnowledgeBaseFactory, MemoryRecordFactory

pytestmark = pytest.mark.django_db


class BrokenEmbedder(HashingEmbedder):
    def embed_documents(self, texts):
        raise EmbedderError("model server is down")


def test_index_records_stores_the_embedders_vectors(tenant):
    kb = KnowledgeBaseFactory(domain=tenant.domain)
    records = [MemoryRecordFactory(knowledge_base=kb, content=f"fact {i}") for i in range(3)]
    result = indexing.index_records([str(r.pk) for r in records])
    assert sorted(result.indexed) == sorted(str(r.pk) for r in records)
    embedder = HashingEmbedder()
    for record in records:
        record.refresh_from_db()
        assert record.status == "indexed"
        assert record.embedding_model == embedder.name
        assert record.indexed_at is not None
        assert np.allclose(record.embedding, embedder.embed_query(record.content), atol=1e-6)


def test_index_records_is_idempotent_and_skips_missing_ids(tenant):
    record = MemoryRecordFactory(knowledge_base__domain=tenant.domain)
    first = indexing.index_records([str(record.pk)])
    record.refresh_from_db()
    indexed_at = record.indexed_at
    missing = "00000000-0000-0000-0000-000000000000"
    second = indexing.index_records([str(record.pk), missing])
    assert first.indexed == [str(record.pk)]
    assert second.indexed == []
    assert sorted(second.skipped) == sorted([str(record.pk), missing])
    record.refresh_from_db()
    assert record.indexed_at == indexed_at


def test_a_new_model_reindexes_records_of_the_old_one(tenant, settings):
    record = MemoryRecordFactory(knowledge_base__domain=tenant.domain)
    indexing.index_records([str(record.pk)])
    settings.MEMORYHUB = {"EMBEDDER_OPTIONS": {"dimensions": 64}}
    result = indexing.index_records([str(record.pk)])
    assert result.indexed == [str(record.pk)]
    record.refresh_from_db()
    assert record.embedding_model == "hashing-64-c35"
    assert len(record.embedding) == 64


def test_embedder_failure_counts_attempts_then_marks_failed(tenant, settings):
    settings.MEMORYHUB = {
        "EMBEDDER": "tests.services.test_indexing.BrokenEmbedder",
        "INDEX_MAX_ATTEMPTS": 2,
    }
    record = MemoryRecordFactory(knowledge_base__domain=tenant.domain)
    with pytest.raises(EmbedderError):
        indexing.index_records([str(record.pk)])
    record.refresh_from_db()
    assert (record.status, record.attempts) == ("pending", 1)
    assert "model server is down" in record.last_error
    with pytest.raises(EmbedderError):
        indexing.index_records([str(record.pk)])
    record.refresh_from_db()
    assert (record.status, record.attempts) == ("failed", 2)
    with tenant_scope(tenant.scope):
        [observation] = Observation.objects.filter(kind=Observation.Kind.EMBEDDING_FAILED)
    assert observation.count == 1
    assert "model server is down" in observation.payload["error"]
    assert record.content not in str(observation.payload)


def test_task_retries_and_ends_failed_without_raising(tenant, settings):
    settings.MEMORYHUB = {
        "EMBEDDER": "tests.services.test_indexing.BrokenEmbedder",
        "INDEX_MAX_ATTEMPTS": 3,
    }
    record = MemoryRecordFactory(knowledge_base__domain=tenant.domain)
    outcome = tasks.index_records.apply(args=[[str(record.pk)]])
    assert outcome.successful(), outcome.traceback
    record.refresh_from_db()
    assert (record.status, record.attempts) == ("failed", 3)


def test_sweep_requeues_stale_pending_records(tenant, settings, committed):
    settings.MEMORYHUB = {"SWEEP_PENDING_AFTER": 60}
    stale = MemoryRecordFactory(knowledge_base__domain=tenant.domain, content="stale")
    fresh = MemoryRecordFactory(knowledge_base__domain=tenant.domain, content="fresh")
    MemoryRecord.unscoped.filter(pk=stale.pk).update(
        updated_at=timezone.now() - timedelta(minutes=5)
    )
    assert indexing.pending_for_sweep() == [str(stale.pk)]
    summary = committed(tasks.sweep)
    assert summary["requeued"] == 1
    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert stale.status == "indexed"
    assert fresh.status == "pending"


def test_sweep_purges_expired_records_and_old_observations(tenant, other_tenant):
    now = timezone.now()
    expired = MemoryRecordFactory(
        knowledge_base__domain=tenant.domain, expires_at=now - timedelta(seconds=1)
    )
    alive = MemoryRecordFactory(
        knowledge_base__domain=other_tenant.domain, expires_at=now + timedelta(hours=1)
    )
    Observation.unscoped.create(
        org=tenant.org, kind="memory.written", created_at=now - timedelta(days=91)
    )
    recent = Observation.unscoped.create(org=tenant.org, kind="memory.written")
    assert maintenance.purge_expired() == 1
    assert not MemoryRecord.unscoped.filter(pk=expired.pk).exists()
    assert MemoryRecord.unscoped.filter(pk=alive.pk).exists()
    assert list(Observation.unscoped.all()) == [recent]


def test_vector_index_is_an_expression_index_per_model():
    name, created = vector_indexes.ensure_vector_index("test-model/v1", 8)
    assert created
    assert vector_indexes.ensure_vector_index("test-model/v1", 8) == (name, False)
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        [definition] = cursor.fetchone()
    assert "USING hnsw (((embedding)::vector(8)) vector_cosine_ops)" in definition
    # Vectors stored row by row only: bulk-stored ones are searched elsewhere.
    assert (
        "WHERE (((embedding_model)::text = 'test-model/v1'::text) AND (vector_batch IS NULL))"
        in definition
    )


def test_configured_model_index_exists_after_migrate():
    embedder = HashingEmbedder()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_indexes WHERE indexname = %s",
            [vector_indexes.vector_index_name(embedder.name)],
        )
        assert cursor.fetchone() == (1,)


def test_a_model_name_cannot_inject_sql():
    name, _ = vector_indexes.ensure_vector_index("x'; DROP TABLE memoryhub_memoryrecord; --", 4)
    assert MemoryRecord.unscoped.count() == 0  # the table is still there
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [name])
        assert cursor.fetchone() == (1,)


@pytest.mark.django_db(transaction=True)
def test_reembed_command_embeds_what_the_current_model_lacks(tenant, settings):
    from io import StringIO

    from django.core.management import call_command

    write.write(tenant.scope, [{"content": f"note {i}"} for i in range(5)])
    assert set(MemoryRecord.unscoped.values_list("status", flat=True)) == {"indexed"}
    settings.MEMORYHUB = {"EMBEDDER_OPTIONS": {"dimensions": 32}, "INDEX_BATCH_SIZE": 2}
    out = StringIO()
    call_command("memoryhub_reembed", "--org", tenant.org.slug, stdout=out)
    assert "5 record(s) to embed with hashing-32-c35" in out.getvalue()
    assert "Done: 0 record(s) still to embed." in out.getvalue()
    assert set(MemoryRecord.unscoped.values_list("embedding_model", flat=True)) == {
        "hashing-32-c35"
    }


@pytest.mark.django_db(transaction=True)
def test_an_import_job_never_runs_twice_at_once(tenant):
    import threading

    from celery import current_app
    from django.db import connections

    from memoryhub.models import ImportJob, MemoryRecord
    from memoryhub.services import imports

    knowledge_base = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    text = "\n".join(f'{{"content": "Imported line {n}."}}' for n in range(3))
    current_app.conf.task_always_eager = False  # queued on the in-memory broker, not run
    try:
        job = imports.create_job(
            tenant.scope, knowledge_base, text=text, format="jsonl", filename="a.jsonl"
        )
    finally:
        current_app.conf.task_always_eager = True
    locked, release = threading.Event(), threading.Event()

    def another_worker_runs_it() -> None:  # holds the job's claim as run_job would
        try:
            assert imports.jobs._claim(job.pk)
            locked.set()
            release.wait(timeout=30)
            imports.jobs._release(job.pk)
        finally:
            connections.close_all()

    holder = threading.Thread(target=another_worker_runs_it)
    holder.start()
    try:
        assert locked.wait(timeout=30)
        seen = imports.run_job(job.pk)  # a duplicate message meanwhile: it steps aside
        assert seen is not None and seen.status == ImportJob.Status.QUEUED
        assert not MemoryRecord.unscoped.filter(knowledge_base=knowledge_base).exists()
    finally:
        release.set()
        holder.join(timeout=30)
    done = imports.run_job(job.pk)
    assert done is not None and done.status == ImportJob.Status.DONE
    assert MemoryRecord.unscoped.filter(knowledge_base=knowledge_base).count() == 3
    assert imports.run_job(job.pk).imported == 3  # done is done: no second import
    assert MemoryRecord.unscoped.filter(knowledge_base=knowledge_base).count() == 3
