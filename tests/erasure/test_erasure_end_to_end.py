"""Erasure, end to end, with a real worker and Redis: nothing of 100 subjects survives.

Each subject has memory written through the API (queued for indexing on Redis, the
worker not yet running), a duplicate of it, a record in a curated read-only knowledge
base, a record added by an operator in the admin (an admin log entry), and an import
queued for them. Half are erased in the admin, half through the API. Then the worker
starts and drains the queue (indexing tasks and imports of erased subjects), the vacuum
step runs, and every table of the database (every text-like column cast to text),
``pg_stats``, and every key and value of every Redis database (the cache and the queued
messages) are searched for any subject's marker: nothing may be found, the bystander's
memory is intact, and 100 receipts exist that name no one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from django.db import connection, transaction
from rest_framework.test import APIClient

from memoryhub import policy
from memoryhub.models import ErasureReceipt, ImportJob, MemoryRecord
from memoryhub.services import imports, knowledge_bases, write
from memoryhub.services.forget import vacuum_erased_tables
from tests.erasure.test_erasure_audit import scan_database
from tests.factories import create_api_key
from tests.programs import RedisServer, celery_broker, redis_server, start_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SUBJECTS = 100


def namespace(n: int) -> str:
    return f"user:person{n:03d}"


def marker(n: int) -> str:
    return f"quixmarker{n:03d}"


PATTERN = re.compile(r"quixmarker\d{3}|person\d{3}", re.IGNORECASE)


@pytest.fixture
def broker(tmp_path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server, celery_broker(server.url()):
        yield server


def redis_hits(server: RedisServer) -> list[str]:
    hits = []
    for db in range(16):
        client = server.client(db)
        for key in client.scan_iter():
            kind = client.type(key).decode()
            if kind == "string":
                values = [client.get(key) or b""]
            elif kind == "list":
                values = client.lrange(key, 0, -1)
            elif kind == "hash":
                values = [k + b"=" + v for k, v in client.hgetall(key).items()]
            elif kind in ("set", "zset"):
                values = list(client.smembers(key) if kind == "set" else client.zrange(key, 0, -1))
            else:
                values = []
            for value in [key, *values]:
                text = value.decode("utf-8", "replace")
                hits += [f"redis db{db} {key!r}: {m.group(0)}" for m in PATTERN.finditer(text)]
    return hits


def pg_stats_hits() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, attname, concat_ws(' ', most_common_vals::text,"
            " histogram_bounds::text, most_common_elems::text) FROM pg_stats"
            " WHERE schemaname = 'public'"
        )
        return [
            f"pg_stats {table}.{column}: {match.group(0)}"
            for table, column, text in cursor.fetchall()
            for match in PATTERN.finditer(text or "")
        ]


def test_nothing_of_100_erased_subjects_survives_anywhere(
    tenant, admin_client, broker, tmp_path, settings
):
    settings.MEMORYHUB = {"VACUUM_AFTER_ERASURE": None}  # the test runs the step itself
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    url = f"/api/v1/domains/{tenant.domain.slug}"
    handbook = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    memory = knowledge_bases.ensure_knowledge_base(tenant.scope, "memory")
    bystander = "Refunds are issued within 5 business days."
    write.write(
        tenant.scope, [{"content": bystander}], sources=["handbook"], principal=policy.SYSTEM
    )

    for n in range(SUBJECTS):
        items = [
            {
                "content": f"{marker(n)} confided a secret.",
                "namespace": namespace(n),
                "key": f"secret-{marker(n)}",
                "tags": [marker(n)],
                "metadata": {"who": marker(n)},
            }
        ]
        assert api.post(f"{url}/records", {"items": items}, format="json").status_code == 202
        duplicate = {
            "items": [{"content": f"{marker(n)} confided a secret.", "namespace": namespace(n)}]
        }
        assert api.post(f"{url}/records", duplicate, format="json").json()["records"][0][
            "deduplicated"
        ]
        write.write(
            tenant.scope,
            [{"content": f"{marker(n)} is a VIP.", "namespace": namespace(n)}],
            sources=["handbook"],
            principal=policy.SYSTEM,
        )
        added = admin_client.post(
            "/admin/memoryhub/memoryrecord/add/",
            {
                "knowledge_base": memory.pk,
                "namespace": namespace(n),
                "kind": "semantic",
                "content": f"Operator note: {marker(n)} called.",
                "tags": "",
                "metadata": "{}",
            },
        )
        assert added.status_code == 302
        with transaction.atomic():
            # Half name the subject on the job, half only on their line of the file.
            line = {"content": f"Imported: {marker(n)} history."}
            if n % 2:
                line["namespace"] = namespace(n)
            job = imports.create_job(
                tenant.scope,
                memory,
                text=json.dumps(line),
                format="jsonl",
                filename=f"{marker(n)}-export.jsonl",
                namespace="" if n % 2 else namespace(n),
                principal=policy.AgentPrincipal(label="admin:ops"),
            )
            imports.schedule_job(job)
    assert MemoryRecord.unscoped.filter(status="pending").count() >= SUBJECTS
    assert int(broker.client().llen("celery")) >= SUBJECTS  # indexing and imports queued

    for n in range(SUBJECTS // 2):
        response = admin_client.post(
            "/admin/memoryhub/memoryrecord/erase-subject/",
            {"org": tenant.org.pk, "namespace": namespace(n), "post": "yes"},
        )
        assert response.status_code == 302
    for n in range(SUBJECTS // 2, SUBJECTS):
        response = api.post(f"{url}/forget", {"namespace": namespace(n)}, format="json")
        assert response.status_code == 200
        assert response.json()["deleted"] == 3  # memory (deduplicated), handbook, admin note
        assert response.json()["receipt"]

    worker = start_worker(broker.url(), tmp_path / "worker.log")
    try:
        wait_for(
            lambda: (
                int(broker.client().llen("celery")) == 0
                and not ImportJob.unscoped.filter(status="queued").exists()
            ),
            timeout=120,
            what="the worker to drain the queue",
        )
        wait_for(
            lambda: b"import_file" in (tmp_path / "worker.log").read_bytes(),
            timeout=30,
            what="the imports to run",
        )
    finally:
        worker.stop()
    assert vacuum_erased_tables()

    assert not MemoryRecord.unscoped.filter(namespace__startswith="user:person").exists()
    assert set(ImportJob.unscoped.values_list("status", flat=True)) == {"cancelled"}
    assert MemoryRecord.unscoped.get().content == bystander
    assert MemoryRecord.unscoped.filter(knowledge_base=handbook).count() == 1
    hits, tables, _ = scan_database()
    found = [f"{hit.where}: {hit.needle}" for hit in hits if PATTERN.search(hit.needle)]
    assert found == [], found[:10]
    assert tables >= 15
    assert pg_stats_hits() == []
    assert redis_hits(broker) == []
    receipts = ErasureReceipt.unscoped.all()
    assert receipts.count() == SUBJECTS
    assert not PATTERN.search(json.dumps([receipt.as_json() for receipt in receipts]))
