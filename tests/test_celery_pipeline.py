"""The asynchronous path, for real: Redis as the broker and Celery worker processes.

These tests commit (``transaction=True``), so workers in other processes see the rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest
from celery import current_app
from django.db import connection, transaction

from memoryhub.embedders import HashingEmbedder
from memoryhub.models import MemoryRecord
from memoryhub.scope import tenant_scope
from memoryhub.services import indexing, write
from memoryhub.services.forget import ForgetRequest, forget

from .services import RedisServer, Worker, redis_server, start_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def redis(tmp_path) -> Iterator[RedisServer]:  # type: ignore[no-untyped-def]
    with redis_server(tmp_path) as server:
        server.client().flushdb()
        yield server
        server.client().flushdb()


def _reset_connections(app) -> None:  # type: ignore[no-untyped-def]
    """Forget pooled broker connections so the next send uses the current broker_url."""
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def broker(redis: RedisServer) -> Iterator[RedisServer]:
    """Send this process's tasks to Redis instead of running them eagerly."""
    app = current_app
    saved = (app.conf.task_always_eager, app.conf.broker_url)
    app.conf.task_always_eager = False
    app.conf.broker_url = redis.url()
    _reset_connections(app)
    yield redis
    app.conf.task_always_eager, app.conf.broker_url = saved
    _reset_connections(app)


@pytest.fixture
def workers(tmp_path) -> Iterator[list[Worker]]:  # type: ignore[no-untyped-def]
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


def queued(redis: RedisServer) -> int:
    return int(redis.client().llen("celery"))


def statuses() -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in MemoryRecord.unscoped.values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return counts


def test_a_thousand_records_are_indexed_by_real_workers(tenant, broker, workers, tmp_path):
    workers.append(
        start_worker(broker.url(), tmp_path / "worker.log", pool="prefork", concurrency=2)
    )
    ids: list[str] = []
    for start in range(0, 1000, 100):
        result = write.write(
            tenant.scope,
            [{"content": f"Fact {n}: the sky is blue {n % 7}."} for n in range(start, start + 100)],
        )
        ids.extend(result.record_ids)
    assert len(set(ids)) == 1000
    wait_for(
        lambda: MemoryRecord.unscoped.filter(status="indexed").count() == 1000,
        timeout=180,
        what="1,000 records indexed",
    )
    embedder = HashingEmbedder()
    rows = list(MemoryRecord.unscoped.values_list("content", "embedding", "embedding_model"))
    expected = embedder.embed_documents([content for content, _, _ in rows])
    stored = np.array([embedding for _, embedding, _ in rows])
    assert np.allclose(stored, np.array(expected), atol=1e-6)
    assert {model for _, _, model in rows} == {embedder.name}


def test_a_rolled_back_write_enqueues_nothing(tenant, broker):
    with pytest.raises(RuntimeError), transaction.atomic():
        write.write(tenant.scope, [{"content": "never committed"}])
        raise RuntimeError("rollback")
    assert queued(broker) == 0
    assert MemoryRecord.unscoped.count() == 0
    write.write(tenant.scope, [{"content": "committed"}])
    assert queued(broker) == 1


def test_forgetting_records_while_their_tasks_are_queued_leaves_no_row(
    tenant, broker, workers, tmp_path
):
    write.write(
        tenant.scope,
        [{"content": f"Alice said {n}", "namespace": "user:alice"} for n in range(30)],
    )
    assert queued(broker) == 1
    assert forget(tenant.scope, ForgetRequest(namespace="user:alice")).deleted == 30
    log = tmp_path / "worker.log"
    workers.append(start_worker(broker.url(), log))
    wait_for(
        lambda: queued(broker) == 0 and b"succeeded" in log.read_bytes(),
        timeout=60,
        what="the queued task to run",
    )
    assert b"'indexed': 0" in log.read_bytes()
    assert MemoryRecord.unscoped.count() == 0


@pytest.fixture
def indexed_transitions() -> Iterator[str]:
    """A trigger that logs every transition of a record to ``indexed``."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE TABLE test_indexed_log (record_id uuid NOT NULL);
            CREATE FUNCTION test_log_indexed() RETURNS trigger AS $$
            BEGIN
                INSERT INTO test_indexed_log VALUES (NEW.id);
                RETURN NEW;
            END $$ LANGUAGE plpgsql;
            CREATE TRIGGER test_log_indexed AFTER UPDATE ON memoryhub_memoryrecord
                FOR EACH ROW WHEN (NEW.status = 'indexed' AND OLD.status <> 'indexed')
                EXECUTE FUNCTION test_log_indexed();
            """
        )
    yield "test_indexed_log"
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER test_log_indexed ON memoryhub_memoryrecord;"
            "DROP FUNCTION test_log_indexed(); DROP TABLE test_indexed_log;"
        )


def test_worker_killed_mid_batch_loses_nothing_and_indexes_once(
    tenant, broker, workers, tmp_path, indexed_transitions, settings
):
    settings.MEMORYHUB = {"INDEX_BATCH_SIZE": 10}
    marker = tmp_path / "batches.txt"
    marker.touch()
    slow = {
        "EMBEDDER": "tests.embedders.SlowEmbedder",
        "EMBEDDER_OPTIONS": {"marker": str(marker), "delay": 30},
    }
    ids = write.write(tenant.scope, [{"content": f"note {n}"} for n in range(40)]).record_ids
    assert queued(broker) == 4

    victim = start_worker(broker.url(), tmp_path / "victim.log", memoryhub=slow)
    workers.append(victim)
    wait_for(lambda: marker.read_text().strip() != "", timeout=60, what="a batch to start")
    victim.kill()
    assert statuses() == {"pending": 40}

    fast = {"EMBEDDER": "tests.embedders.SlowEmbedder", "EMBEDDER_OPTIONS": {"marker": str(marker)}}
    workers.append(start_worker(broker.url(), tmp_path / "second.log", memoryhub=fast))
    # One sweeper pass re-enqueues what the dead worker held.
    write.schedule_indexing(indexing.pending_for_sweep(older_than=timedelta(0)))
    wait_for(lambda: statuses() == {"indexed": 40}, timeout=120, what="all 40 records indexed")

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT record_id, count(*) FROM {indexed_transitions} GROUP BY 1")
        transitions = dict(cursor.fetchall())
    assert sorted(str(pk) for pk in transitions) == sorted(ids)
    assert set(transitions.values()) == {1}
    with tenant_scope(tenant.scope):
        assert MemoryRecord.objects.count() == 40
