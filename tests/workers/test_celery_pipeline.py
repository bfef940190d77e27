"""The asynchronous path, for real: Redis as the broker and Celery worker processes.

These tests commit (``transaction=True``), so workers in other processes see the rows.
What happens when a worker, Redis or PostgreSQL dies is in ``test_faults.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from django.db import transaction

from memoryhub.embedders import HashingEmbedder
from memoryhub.models import MemoryRecord
from memoryhub.services import write
from memoryhub.services.forget import ForgetRequest, forget
from tests.programs import RedisServer, celery_broker, start_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker(redis: RedisServer) -> Iterator[RedisServer]:
    """Send this process's tasks to Redis instead of running them eagerly."""
    with celery_broker(redis.url()):
        yield redis


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


def test_a_running_worker_writes_the_heartbeat_health_reads(tenant, broker, workers, tmp_path):
    from celery import current_app
    from rest_framework.test import APIClient

    from memoryhub.models import WorkerHeartbeat

    assert not current_app.conf.task_always_eager  # the broker fixture: broker mode
    assert APIClient().get("/api/v1/health").json()["indexing"]["worker_seen_at"] is None
    workers.append(
        start_worker(
            broker.url(), tmp_path / "worker.log", memoryhub={"WORKER_HEARTBEAT_INTERVAL": 1}
        )
    )
    wait_for(WorkerHeartbeat.objects.exists, timeout=30, what="the worker's first heartbeat")
    first = WorkerHeartbeat.objects.get().seen_at
    wait_for(
        lambda: WorkerHeartbeat.objects.get().seen_at > first,
        timeout=30,
        what="a second heartbeat",
    )
    indexing = APIClient().get("/api/v1/health").json()["indexing"]
    assert indexing["ok"] is True
    assert indexing["worker_seen_seconds_ago"] < 30
    assert WorkerHeartbeat.objects.get().hostname.startswith("test-")


def test_turns_are_consolidated_by_a_real_worker_and_erased_with_their_namespace(
    tenant, broker, workers, tmp_path
):
    from tests.factories import key_client

    workers.append(start_worker(broker.url(), tmp_path / "worker.log"))
    client = key_client(tenant, can_read=True, can_write=True, can_forget=True)
    turns = [
        "My favourite colour is blue.",
        "My home city is Berlin.",
        "I had pasta for lunch.",
        "The support team answered quickly.",
        "My favourite colour is green.",
        "Can you remind me about my meeting?",
        "The support team answered very quickly.",
        "I prefer email over phone calls.",
        "My job title is support engineer.",
        "Thanks, that is all for now.",
    ]
    body = {
        "items": [{"content": t, "kind": "episodic", "namespace": "user:alice"} for t in turns],
        "consolidate": True,
    }
    assert client.post("/api/v1/domains/support/records", body, format="json").status_code == 202
    wait_for(
        lambda: (
            not MemoryRecord.unscoped.filter(
                consolidation__in=["", "pending"], kind="episodic"
            ).exists()
        ),
        timeout=120,
        what="ten turns consolidated by the worker",
    )
    wait_for(
        lambda: (
            # Four facts and blue, closed when green was said.
            MemoryRecord.unscoped.filter(kind="semantic").count() == 5
            and not MemoryRecord.unscoped.filter(status="pending").exists()
        ),
        timeout=120,
        what="the facts indexed",
    )
    query = {"query": "favourite colour home city job", "kinds": ["semantic"], "k": 10}
    query["namespaces"] = ["user:alice"]
    items = client.post("/api/v1/domains/support/query", query, format="json").json()["items"]
    assert {item["content"] for item in items} == {
        "favourite colour: green",
        "home city: Berlin",
        "job title: support engineer",
        "The support team answered very quickly.",
    }
    assert all(item["derived_from"] for item in items)
    erased = client.post(
        "/api/v1/domains/support/forget", {"namespace": "user:alice"}, format="json"
    ).json()
    assert erased["deleted"] == 15
    assert client.post("/api/v1/domains/support/query", query, format="json").json()["items"] == []
    assert not MemoryRecord.unscoped.filter(namespace="user:alice").exists()


def test_readyz_follows_the_broker_and_the_workers_going_and_coming_back(
    tenant, broker, workers, tmp_path, settings
):
    from django.test import Client

    settings.MEMORYHUB = {**settings.MEMORYHUB, "WORKER_STALE_AFTER": 3}

    def checks() -> tuple[int, dict]:
        response = Client().get("/readyz")
        return response.status_code, response.json()["checks"]

    status, found = checks()
    assert status == 503 and found["worker"] == {"ok": False, "seen_seconds_ago": None}
    assert found["broker"]["ok"] is True
    worker = start_worker(
        broker.url(), tmp_path / "worker.log", memoryhub={"WORKER_HEARTBEAT_INTERVAL": 1}
    )
    workers.append(worker)
    wait_for(lambda: checks()[0] == 200, timeout=30, what="ready with a worker")

    broker.kill()
    status, found = checks()
    assert status == 503 and found["broker"]["ok"] is False
    broker.start_again(tmp_path)
    wait_for(lambda: checks()[0] == 200, timeout=30, what="ready with the broker back")

    worker.stop()
    wait_for(lambda: checks()[0] == 503, timeout=30, what="unready without a worker")
    assert checks()[1]["worker"]["ok"] is False
    workers.append(
        start_worker(
            broker.url(), tmp_path / "worker-2.log", memoryhub={"WORKER_HEARTBEAT_INTERVAL": 1}
        )
    )
    wait_for(lambda: checks()[0] == 200, timeout=30, what="ready with a worker again")
