"""Fault injection: break a real part on purpose and check that no committed memory is lost.

Each test stops or kills something the site depends on -- the Redis broker before a
commit, Redis in the middle of indexing, a Celery worker mid-batch, PostgreSQL under a
running gunicorn -- and then checks what a client saw while it was down and what the
data looks like once it is back: every committed record indexed, with the right vector,
exactly once (a trigger counts each record's transitions to ``indexed``).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import numpy as np
import pytest
from rest_framework.test import APIClient

from memoryhub.embedders import HashingEmbedder
from memoryhub.models import MemoryRecord
from memoryhub.services import dispatch, indexing, knowledge_bases, maintenance, write
from memoryhub.tasks import sweep
from tests.factories import create_api_key
from tests.programs import (
    ROOT,
    PostgresServer,
    RedisServer,
    celery_broker,
    indexed_transitions,
    redis_server,
    site_environment,
    start_gunicorn,
    start_postgres,
    start_private_redis,
    start_worker,
    wait_for,
)

#: Records pending this long are the sweeper's (the site's default is 300 s).
SWEEP_AFTER = {"SWEEP_PENDING_AFTER": 1}


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server (no persistence) that the test may stop and kill."""
    server = start_private_redis(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def transitions() -> Iterator[Callable[[], dict[str, int]]]:
    with indexed_transitions() as counts:
        yield counts


def statuses() -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in MemoryRecord.unscoped.values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return counts


def indexed_count() -> int:
    return MemoryRecord.unscoped.filter(status=MemoryRecord.Status.INDEXED).count()


def assert_indexed_once_with_the_right_vectors(
    ids: list[str], transitions: Callable[[], dict[str, int]]
) -> None:
    counts = transitions()
    assert sorted(counts) == sorted(ids), "a committed record was lost (or one appeared)"
    assert {n for n in counts.values()} == {1}, "a record was embedded more than once"
    embedder = HashingEmbedder()
    rows = list(MemoryRecord.unscoped.values_list("content", "embedding", "embedding_model"))
    assert len(rows) == len(ids)
    expected = np.array(embedder.embed_documents([content for content, _, _ in rows]))
    assert np.allclose(np.array([embedding for _, embedding, _ in rows]), expected, atol=1e-6)
    assert {model for _, _, model in rows} == {embedder.name}


def pending_ids() -> set[str]:
    return {
        str(pk)
        for pk in MemoryRecord.unscoped.filter(status=MemoryRecord.Status.PENDING).values_list(
            "id", flat=True
        )
    }


def sweep_when_due() -> None:
    """Send one sweep through the broker once every pending record is due for it."""
    wait_for(
        lambda: set(indexing.pending_for_sweep()) >= pending_ids(),
        timeout=10,
        what="the pending records to be due for the sweeper",
    )
    sweep.delay()


def swept(log: Path) -> int:
    """How many records the worker's sweeps re-enqueued (from its log)."""
    return sum(
        int(line.split("'requeued': ")[1].split(",")[0])
        for line in log.read_text(errors="replace").splitlines()
        if "memoryhub.tasks.sweep[" in line and "'requeued': " in line
    )


def report(message: str) -> None:
    """Figures of the run, shown by ``pytest -s`` (and kept in the captured output)."""
    print(f"[faults] {message}")


# --- 1. the broker is down when a write commits -------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_writes_while_the_broker_is_down_are_accepted_and_indexed_once_it_returns(
    tenant, private_redis, workers, transitions, settings, tmp_path, caplog
):
    settings.MEMORYHUB = SWEEP_AFTER
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    url = "/api/v1/domains/support/records"
    caplog.set_level(logging.WARNING, logger="memoryhub.services.write")

    with celery_broker(private_redis.url()):
        private_redis.stop()
        ids: list[str] = []
        started = time.monotonic()
        for batch in range(10):
            result = write.write(
                tenant.scope,
                [{"content": f"Broker down, fact {batch}.{n}."} for n in range(20)],
            )
            assert {record.status for record in result.records} == {"pending"}
            ids.extend(result.record_ids)
        service_seconds = time.monotonic() - started

        latencies = []
        for batch in range(5):
            started = time.monotonic()
            response = api.post(
                url,
                {"items": [{"content": f"Sent to the API, fact {batch}.{n}."} for n in range(4)]},
                format="json",
            )
            latencies.append(time.monotonic() - started)
            assert response.status_code == 202, response.content
            ids.extend(record["id"] for record in response.json()["records"])
        assert max(latencies) < 3.0, latencies
        assert statuses() == {"pending": 220}
        assert sum("left pending for the sweeper" in m for m in caplog.messages) == 15

        health = api.get("/api/v1/health")
        assert health.status_code == 503
        assert health.json()["broker"]["ok"] is False

        # Redis returns on the same port, empty; a worker starts. The web process
        # reconnects by itself: a new write is enqueued and indexed without the sweeper.
        returned = time.monotonic()
        private_redis.start_again(tmp_path)
        log = tmp_path / "worker.log"
        workers.append(start_worker(private_redis.url(), log, memoryhub=SWEEP_AFTER))
        response = api.post(
            url + "?wait=20",
            {"items": [{"content": "Written after Redis returned."}]},
            format="json",
        )
        assert response.status_code == 200, response.content
        ids.extend(record["id"] for record in response.json()["records"])

        # One sweep re-enqueues what the down broker never received.
        sweep_when_due()
        wait_for(lambda: indexed_count() == 221, timeout=60, what="221 records indexed")
        recovered_seconds = time.monotonic() - returned
        wait_for(lambda: swept(log) > 0, timeout=10, what="the sweep's result in the log")
        assert swept(log) == 220

    assert_indexed_once_with_the_right_vectors(ids, transitions)
    report(
        f"broker down: 10 service writes (200 records) in {service_seconds:.2f} s, "
        f"5 API writes 202 in max {max(latencies) * 1000:.0f} ms; all indexed "
        f"{recovered_seconds:.1f} s after Redis returned (worker start included)"
    )


@pytest.mark.django_db(transaction=True)
def test_an_import_job_enqueued_while_the_broker_is_down_runs_once_it_returns(
    tenant, private_redis, workers, settings, tmp_path, caplog
):
    from django.db import transaction

    from memoryhub.models import ImportJob
    from memoryhub.services import imports

    settings.MEMORYHUB = SWEEP_AFTER
    caplog.set_level(logging.WARNING, logger="memoryhub.services.imports")
    knowledge_base = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    text = "\n".join(
        f'{{"content": "Imported while the broker was down, line {n}."}}' for n in range(5)
    )
    with celery_broker(private_redis.url()):
        private_redis.stop()
        with transaction.atomic():
            job = imports.create_job(
                tenant.scope, knowledge_base, text=text, format="jsonl", filename="a.jsonl"
            )
            imports.schedule_job(job)  # the commit must not raise
        assert any("left queued for the sweeper" in m for m in caplog.messages)
        assert ImportJob.unscoped.get(pk=job.pk).status == ImportJob.Status.QUEUED

        private_redis.start_again(tmp_path)
        workers.append(
            start_worker(private_redis.url(), tmp_path / "worker.log", memoryhub=SWEEP_AFTER)
        )
        wait_for(
            lambda: job.pk in imports.queued_for_sweep(),
            timeout=10,
            what="the job to be due for the sweeper",
        )
        sweep.delay()
        wait_for(
            lambda: ImportJob.unscoped.get(pk=job.pk).status == ImportJob.Status.DONE,
            timeout=60,
            what="the import job to run",
        )
    assert MemoryRecord.unscoped.filter(knowledge_base=knowledge_base).count() == 5


# --- 2. Redis is killed while 1,000 committed records are being indexed -------------------


@pytest.mark.django_db(transaction=True)
def test_redis_killed_mid_run_loses_no_committed_record(
    tenant, private_redis, workers, transitions, settings, tmp_path
):
    settings.MEMORYHUB = SWEEP_AFTER
    marker = tmp_path / "batches.txt"
    marker.touch()
    slow = {
        **SWEEP_AFTER,
        "EMBEDDER": "tests.embedders.SlowEmbedder",
        "EMBEDDER_OPTIONS": {"marker": str(marker), "delay": 0.5},
    }
    with celery_broker(private_redis.url()):
        log = tmp_path / "worker.log"
        worker = start_worker(
            private_redis.url(), log, pool="prefork", concurrency=2, memoryhub=slow
        )
        workers.append(worker)
        ids: list[str] = []
        started = time.monotonic()
        for start in range(0, 1000, 100):
            result = write.write(
                tenant.scope,
                [
                    {"content": f"Fact {n}: the sea is {n % 11} metres deep."}
                    for n in range(start, start + 100)
                ],
            )
            ids.extend(result.record_ids)
        write_seconds = time.monotonic() - started
        assert len(set(ids)) == 1000
        wait_for(lambda: indexed_count() >= 100, timeout=60, what="indexing to be under way")

        private_redis.kill()
        at_kill = indexed_count()
        queued_lost = 1000 - at_kill
        assert queued_lost > 0, "indexing finished before Redis was killed"
        private_redis.start_again(tmp_path)
        returned = time.monotonic()

        sweep_when_due()
        wait_for(lambda: indexed_count() == 1000, timeout=120, what="1,000 records indexed")
        recovered_seconds = time.monotonic() - returned
        assert worker.process.poll() is None, "the worker did not survive the broker's restart"
        wait_for(lambda: swept(log) > 0, timeout=10, what="the sweep's result in the log")
        # The queued messages died with Redis: the sweeper found their records pending.
        requeued = swept(log)
        assert requeued > 0

    assert statuses() == {"indexed": 1000}
    assert_indexed_once_with_the_right_vectors(ids, transitions)
    report(
        f"redis killed mid-run: 1,000 records written in {write_seconds:.1f} s; "
        f"{at_kill} indexed when Redis was killed; the other {queued_lost} indexed "
        f"{recovered_seconds:.1f} s after it returned ({requeued} re-enqueued by the sweep); "
        f"0 lost, 0 double"
    )


# --- 3. a worker is SIGKILLed in the middle of a batch, five times ------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("trial", range(1, 6))
def test_worker_killed_mid_batch_loses_nothing_and_indexes_once(
    trial, tenant, private_redis, workers, transitions, settings, tmp_path
):
    """Trial k kills a two-process worker while its k-th batch is being embedded, so the
    kill lands after 0..4 batches were stored (and, with two processes, sometimes while
    another batch commits)."""
    # Fifty records take the bulk path: its indexing batches of ten, stored with COPY.
    settings.MEMORYHUB = {"INDEX_BATCH_SIZE": 10, "BULK_INDEX_BATCH_SIZE": 10}
    marker = tmp_path / "batches.txt"
    marker.touch()
    slow = {
        "EMBEDDER": "tests.embedders.SlowEmbedder",
        "EMBEDDER_OPTIONS": {"marker": str(marker), "delay": 1.5},
    }
    with celery_broker(private_redis.url()):
        ids = write.write(
            tenant.scope, [{"content": f"trial {trial}, note {n}"} for n in range(50)]
        ).record_ids
        assert private_redis.client().llen("celery") == 5

        victim = start_worker(
            private_redis.url(),
            tmp_path / "victim.log",
            pool="prefork",
            concurrency=2,
            memoryhub=slow,
        )
        workers.append(victim)
        wait_for(
            lambda: len(marker.read_text().splitlines()) >= trial,
            timeout=60,
            what=f"batch {trial} to start",
        )
        victim.kill()
        at_kill = statuses()
        assert at_kill.get("pending", 0) >= 10, at_kill
        assert at_kill.get("indexed", 0) <= 10 * (trial - 1), at_kill

        fast = {
            "EMBEDDER": "tests.embedders.SlowEmbedder",
            "EMBEDDER_OPTIONS": {"marker": str(marker)},
        }
        workers.append(start_worker(private_redis.url(), tmp_path / "second.log", memoryhub=fast))
        # One sweeper pass re-enqueues what the dead worker held.
        dispatch.schedule_indexing(indexing.pending_for_sweep(older_than=timedelta(0)))
        wait_for(lambda: statuses() == {"indexed": 50}, timeout=60, what="all 50 records indexed")

    assert_indexed_once_with_the_right_vectors(ids, transitions)
    report(f"worker killed, trial {trial}: at the kill {at_kill}; after: 50 indexed once each")


@pytest.mark.django_db(transaction=True)
def test_a_dead_workers_batches_are_sent_again_at_the_next_sweep_and_a_live_ones_are_not(
    tenant, other_tenant, private_redis, workers, transitions, settings, tmp_path
):
    """The broker holds a killed worker's messages back for its visibility timeout (an
    hour); the sweeper sends them again as soon as they are SWEEP_ORPHANED_AFTER old,
    SWEEP_PENDING_AFTER left at its 300 s, because no live worker holds them any more."""
    settings.MEMORYHUB = {
        "INDEX_BATCH_SIZE": 10,
        "BULK_INDEX_BATCH_SIZE": 10,
        "SWEEP_ORPHANED_AFTER": 1,
    }
    marker = tmp_path / "batches.txt"
    marker.touch()
    with celery_broker(private_redis.url()):
        notes = [{"content": f"acme note {n}"} for n in range(10)]
        ids = write.write(tenant.scope, notes).record_ids
        ids += write.write(
            other_tenant.scope, [{"content": f"globex note {n}"} for n in range(10)]
        ).record_ids
        victim = start_worker(
            private_redis.url(),
            tmp_path / "victim.log",
            pool="prefork",
            concurrency=2,
            memoryhub={
                "EMBEDDER": "tests.embedders.SlowEmbedder",
                "EMBEDDER_OPTIONS": {"marker": str(marker), "delay": 60},
            },
        )
        workers.append(victim)
        wait_for(
            lambda: (
                len(marker.read_text().splitlines()) >= 2
                and private_redis.client().llen("celery") == 0
                and indexing.held_by_workers() == set(ids)
            ),
            timeout=60,
            what="the worker's two processes to be embedding both batches",
        )
        wait_for(
            lambda: set(indexing.pending_for_sweep(timedelta(seconds=1))) == set(ids),
            timeout=10,
            what="the records to be older than SWEEP_ORPHANED_AFTER",
        )
        # A live worker holds them all: nothing is sent twice.
        assert maintenance.sweep()["requeued"] == 0

        # The parent first: no time to give the messages back to the broker (as when the
        # machine is lost); they wait in Redis's unacknowledged set for the hour.
        victim.kill(parent_first=True)
        assert statuses() == {"pending": 20}
        # The same worker name again (a restart): its first beat holds nothing.
        workers.append(start_worker(private_redis.url(), tmp_path / "second.log"))
        assert indexing.held_by_workers() == set()
        assert dispatch.queued("index_records") == 0
        swept = maintenance.sweep()

        assert swept["requeued"] == 20, swept
        wait_for(lambda: statuses() == {"indexed": 20}, timeout=60, what="all 20 records indexed")
    assert_indexed_once_with_the_right_vectors(ids, transitions)


# --- 4. PostgreSQL is restarted under a running gunicorn ----------------------------------

SETUP_SITE = """
import django
from io import StringIO
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
call_command("create_org", "acme", stdout=StringIO())
call_command("create_domain", "acme", "support", stdout=StringIO())
out = StringIO()
call_command("create_api_key", "acme", "--domain", "support", "--name", "probe", "--read",
             "--write", stdout=out)
print(out.getvalue().splitlines()[-1])
"""


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own, shut down at the end.

    Its data lives outside pytest's ``tmp_path``: another pytest session on the machine
    may prune old temporary folders, and a server whose folder is gone cannot be stopped
    by ``pg_ctl`` any more.
    """
    with tempfile.TemporaryDirectory(prefix="memoryhub-faults-") as folder:
        server = start_postgres(Path(folder) / "pg")
        try:
            yield server
        finally:
            server.shut_down()


def timed(send: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = send()
    return response, time.monotonic() - started


def test_database_restarted_under_a_running_api(postgres, tmp_path):
    with postgres.connect() as admin:
        admin.execute("CREATE DATABASE memoryhub")
    environment = site_environment(postgres.url("memoryhub"))
    setup = subprocess.run(
        [sys.executable, "-c", SETUP_SITE],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert setup.returncode == 0, setup.stderr
    key = setup.stdout.strip().splitlines()[-1]

    server = start_gunicorn(environment, tmp_path / "gunicorn.log", workers=2)
    try:
        client = httpx.Client(
            base_url=server.url(""),
            headers={"Authorization": f"Api-Key {key}"},
            timeout=30,
        )
        query = "/api/v1/domains/support/query"

        def ask() -> httpx.Response:
            return client.post(query, json={"query": "refunds", "k": 3})

        wait_for(lambda: ask().status_code == 200, timeout=60, what="the API to answer 200")
        written = client.post(
            "/api/v1/domains/support/records",
            json={"items": [{"content": "Refunds take five days."}]},
        )
        assert written.status_code == 202, written.text
        for _ in range(8):
            assert ask().status_code == 200
        # The workers hold persistent connections (CONN_MAX_AGE) when the server stops.
        with postgres.connect() as admin:
            (held,) = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = 'memoryhub'"
            ).fetchone()
        assert held >= 1
        master, worker_pids = server.process.pid, server.worker_pids()

        postgres.stop()
        down: list[float] = []
        calls: list[Callable[[], httpx.Response]] = [
            ask,
            lambda: client.post(
                "/api/v1/domains/support/records", json={"items": [{"content": "Lost?"}]}
            ),
            lambda: client.get("/api/v1/whoami"),
            # A session cookie makes DRF's session authentication read the session table.
            lambda: httpx.get(server.url("/api/v1/whoami"), cookies={"sessionid": "x" * 32}),
        ]
        for _ in range(5):
            for call in calls:
                response, seconds = timed(call)
                down.append(seconds)
                assert response.status_code == 503, (response.status_code, response.text)
                assert response.headers["content-type"].startswith("application/json")
                assert response.json()["code"] == "service_unavailable"
                assert int(response.headers["Retry-After"]) > 0
        health, health_seconds = timed(lambda: httpx.get(server.url("/api/v1/health")))
        assert health.status_code == 503
        assert health.json()["status"] == "degraded"
        assert health.json()["database"]["ok"] is False
        assert max(down + [health_seconds]) < 2.0, down
        ready = httpx.get(server.url("/readyz"))
        assert ready.status_code == 503 and int(ready.headers["Retry-After"]) > 0
        assert ready.json()["checks"]["database"]["ok"] is False
        assert httpx.get(server.url("/livez")).status_code == 200

        postgres.start()
        restarted = time.monotonic()
        wait_for(lambda: ask().status_code == 200, timeout=30, what="the API to answer 200 again")
        recovered_seconds = time.monotonic() - restarted
        for _ in range(8):
            response = ask()
            assert response.status_code == 200, response.text
        # What was written before the outage is there; what was refused with 503 is not.
        assert [item["content"] for item in response.json()["items"]] == ["Refunds take five days."]
        records = client.get("/api/v1/domains/support/records").json()
        assert [record["content"] for record in records["results"]] == ["Refunds take five days."]
        assert httpx.get(server.url("/api/v1/health")).status_code == 200
        wait_for(
            lambda: httpx.get(server.url("/readyz")).status_code == 200,
            timeout=30,
            what="/readyz to answer 200 again",
        )
        assert server.process.poll() is None
        assert (server.process.pid, server.worker_pids()) == (master, worker_pids)
    finally:
        server.stop()

    down.sort()
    p95 = down[int(0.95 * (len(down) - 1))]
    report(
        f"database down: {len(down)} API calls answered 503 JSON in "
        f"p50 {down[len(down) // 2] * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
        f"max {down[-1] * 1000:.0f} ms; health 503 in {health_seconds * 1000:.0f} ms; "
        f"200 again {recovered_seconds:.2f} s after PostgreSQL started, same gunicorn "
        f"master and workers ({held} connection(s) held across the restart)"
    )


def test_a_channel_closed_after_its_connection_went_raises_a_connection_error(tmp_path):
    """The kombu race behind a worker that stopped when Redis went away: closing a
    channel whose transport lost its connection was an ``AttributeError`` (unrecoverable
    to Celery); with ``memoryhub.worker.keep_reconnecting`` it is a connection error,
    which kombu ignores while it releases the connection, and the worker reconnects."""
    from kombu import Connection

    from memoryhub.worker import keep_reconnecting

    keep_reconnecting()
    with redis_server(tmp_path) as server:
        connection = Connection(server.url())
        channel = connection.default_channel
        channel.qos._delivered["tag-1"] = None  # a message delivered, not acknowledged
        channel._pool = None
        channel.connection.client = None
        with pytest.raises(connection.connection_errors):
            channel.close()
