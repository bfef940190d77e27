"""A short load run: 32 clients of 10 tenants against real gunicorn, every answer checked.

Writes are indexed by a real Celery worker on a private Redis, which is also the query
cache the gunicorn workers share. No timing is asserted: the run proves that under
concurrency there is no 5xx, no item of another tenant, and no item of a namespace after
its forget returned. (``python -m benchmarks.load`` is the long run with the figures.)
"""

from __future__ import annotations

import pytest

from benchmarks.load import create_tenants, measure, start_gunicorn, stop
from tests.programs import redis_binary


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_thirty_two_clients_of_ten_tenants_never_cross_or_resurrect(tmp_path):
    redis_binary()
    figures = measure(tmp_path, clients=32, seconds=15, records=40)

    assert figures["setup"]["indexing"].startswith("celery worker")
    assert figures["errors_5xx"] == 0, figures["violations"]
    assert figures["transport_errors"] == {}
    assert figures["cross_tenant_items"] == 0, figures["violations"]
    assert figures["forgotten_items"] == 0, figures["violations"]
    assert figures["items_outside_namespaces"] == 0, figures["violations"]
    # The run did what it says: every operation ran and succeeded, and the checks saw items.
    for operation in ("query", "write", "forget"):
        assert figures["operations"][operation]["requests"] > 0, operation
        assert figures["operations"][operation]["errors"] == 0, figures["operations"]
    assert figures["items_checked"] > 100
    assert figures["namespaces_forgotten"] > 0
    # The worker indexed what the load wrote.
    assert figures["indexing_drained_seconds"] is not None


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("shared_cache", [True, False], ids=["redis-cache", "per-worker-cache"])
def test_no_gunicorn_worker_serves_a_forgotten_namespace(tmp_path, shared_cache):
    """Two gunicorn workers, both of which have the query cached: after a forget returns,
    a query on a fresh connection (either worker) no longer finds the erased records,
    whether the workers share the Redis cache or each caches in its own memory (there a
    forget cannot bump the other worker's generation; the cache holds rankings, never
    content, so the erased rows cannot come back from it)."""
    import httpx

    from memoryhub.scope import Scope
    from memoryhub.services import write
    from tenants.models import Domain
    from tests.programs import start_private_redis

    [tenant] = create_tenants(1, records=0)
    scope = Scope.for_domain(Domain.objects.get(org__slug__startswith="load-"))
    secret = [f"{tenant.marker} refund policy secret {n}" for n in range(3)]
    write.write(scope, [{"content": text, "namespace": "user:x"} for text in secret])
    redis = start_private_redis(tmp_path) if shared_cache else None
    process, base_url = start_gunicorn(
        tmp_path,
        memoryhub={"THROTTLE_RATE": None},
        env={"REDIS_URL": redis.url(db=1)} if redis is not None else {},
    )
    query = {"query": "refund policy", "namespaces": ["user:x"], "k": 10}
    headers = {"Authorization": f"Api-Key {tenant.key}"}

    def found_on_fresh_connections() -> list[int]:
        counts = []
        for _ in range(16):  # new connections land on either worker
            with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
                response = client.post("/api/v1/domains/support/query", json=query)
                counts.append(len(response.json()["items"]))
        return counts

    try:
        assert found_on_fresh_connections() == [3] * 16  # and cached by both workers
        with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
            forgotten = client.post("/api/v1/domains/support/forget", json={"namespace": "user:x"})
        assert forgotten.json()["deleted"] == 3
        assert found_on_fresh_connections() == [0] * 16
    finally:
        stop(process)
        if redis is not None:
            redis.stop()
