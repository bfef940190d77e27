"""Erasure audit (GDPR Art. 17): after erasing 100 data subjects, nothing of them is left.

100 subjects (namespaces ``user:subject000``..``099``) write memory through the API,
indexed for real (eager, on commit), and query it, so their content reaches the query
cache and the observations. Half are erased through the admin's "Erase a data subject"
confirm flow, half through the API's forget endpoint. Then every text-like column of
every table (raw SQL over information_schema), every key and value of every configured
cache, and every JSON log line written meanwhile are searched for each subject's content
token and namespace: nothing may be found, and 100 receipts name the subjects by hash.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from unittest.mock import ANY

import pytest
from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache
from django.db import connection
from rest_framework.test import APIClient

from memoryhub import cache as query_cache
from memoryhub.models import ErasureReceipt, MemoryRecord, Observation
from memoryhub.services import knowledge_bases, query, write
from memoryhub.services.forget import ForgetRequest, forget, salted_hash
from tests.conftest import without_receipt
from tests.factories import create_api_key
from tests.programs import start_private_redis

SUBJECTS = 100
API = "/api/v1/domains/support"


def namespace(n: int) -> str:
    return f"user:subject{n:03d}"


def token(n: int) -> str:
    """A word only subject ``n``'s memory contains (not hex, so no hash can hold it)."""
    return f"zorblat{n:03d}"


def needles(n: int) -> tuple[str, ...]:
    # The namespace without its "user:" also catches it URL-encoded or split.
    return (token(n), f"subject{n:03d}")


def subject_items(n: int) -> list[dict[str, object]]:
    return [
        {
            "content": f"Subject {n} confided that the {token(n)} password hint is violet.",
            "key": f"hint-{token(n)}",
            "namespace": namespace(n),
            "tags": [token(n)],
            "metadata": {"hint": token(n), "owner": namespace(n)},
        },
        {"content": f"Subject {n} drinks {token(n)} tea every morning.", "namespace": namespace(n)},
    ]


@dataclass
class Hit:
    where: str
    needle: str


def _pattern() -> re.Pattern[str]:
    words = [needle for n in range(SUBJECTS) for needle in needles(n)]
    return re.compile("|".join(map(re.escape, words)), re.IGNORECASE)


TEXT_TYPES = (
    "text",
    "character varying",
    "character",
    "json",
    "jsonb",
    "ARRAY",
    "tsvector",
    "USER-DEFINED",
    "xml",
)


def scan_database() -> tuple[list[Hit], int, int]:
    """Search every text-like and bytea column of every table: (hits, tables, columns)."""
    pattern = _pattern()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.table_schema, c.table_name, c.column_name, c.data_type
            FROM information_schema.columns c
            JOIN information_schema.tables t
              ON t.table_schema = c.table_schema AND t.table_name = c.table_name
            WHERE t.table_type = 'BASE TABLE'
              AND c.table_schema NOT IN ('pg_catalog', 'information_schema')
              AND (c.data_type = ANY(%s) OR c.data_type = 'bytea')
            ORDER BY 1, 2, 3
            """,
            [list(TEXT_TYPES)],
        )
        columns = cursor.fetchall()
        hits: list[Hit] = []
        for schema, table, column, data_type in columns:
            value = (
                f"encode({connection.ops.quote_name(column)}, 'escape')"
                if data_type == "bytea"
                else f"{connection.ops.quote_name(column)}::text"
            )
            cursor.execute(
                f"SELECT {value} FROM {connection.ops.quote_name(schema)}."
                f"{connection.ops.quote_name(table)} WHERE {connection.ops.quote_name(column)}"
                " IS NOT NULL"
            )
            for (text,) in cursor.fetchall():
                for match in pattern.finditer(text):
                    hits.append(Hit(f"{schema}.{table}.{column}", match.group(0).lower()))
    tables = {(schema, table) for schema, table, _, _ in columns}
    return hits, len(tables), len(columns)


def cache_entries() -> list[tuple[str, bytes]]:
    """Every key and raw value of every configured cache (LocMem or Redis)."""
    entries: list[tuple[str, bytes]] = []
    for alias in settings.CACHES:
        backend = caches[alias]
        if isinstance(backend, LocMemCache):
            with backend._lock:
                entries += [(f"{alias}:{key}", value) for key, value in backend._cache.items()]
        elif isinstance(backend, RedisCache):
            client = backend._cache.get_client(None, write=False)
            for key in client.scan_iter(match=backend.make_key("*")):
                value = client.get(key)
                entries.append((f"{alias}:{key.decode()}", value or b""))
        else:
            raise AssertionError(f"cannot list the entries of {type(backend).__name__}")
    return entries


def scan_cache() -> list[Hit]:
    pattern = re.compile(_pattern().pattern.encode(), re.IGNORECASE)
    hits: list[Hit] = []
    for key, value in cache_entries():
        for match in pattern.finditer(key.encode() + b"\0" + value):
            hits.append(Hit(f"cache {key}", match.group(0).decode().lower()))
    return hits


def scan_logs(text: str) -> list[Hit]:
    return [Hit("log", match.group(0).lower()) for match in _pattern().finditer(text)]


def subjects_hit(hits: list[Hit]) -> set[int]:
    return {int(re.sub(r"\D", "", hit.needle)) for hit in hits}


@pytest.fixture(params=["locmem", "redis"])
def cache_backend(request, settings, tmp_path) -> Iterator[str]:
    """The audit runs on the development cache and on Redis, the production one."""
    if request.param == "locmem":
        yield "locmem"
        return
    server = start_private_redis(tmp_path)
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": server.url(0),
            "KEY_PREFIX": "memoryhub",
        }
    }
    try:
        yield "redis"
    finally:
        server.stop()


@pytest.mark.django_db(transaction=True)
def test_erasing_100_subjects_leaves_no_trace(tenant, admin_client, json_log, cache_backend):
    started = time.monotonic()
    api_key, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    knowledge_bases.ensure_knowledge_base(tenant.scope, "notes")
    bystander = "Refunds are issued within 5 business days."
    shared = api.post(f"{API}/records", {"items": [{"content": bystander}]}, format="json")
    assert shared.status_code == 202

    for n in range(SUBJECTS):
        written = api.post(
            f"{API}/records?wait=10",
            {"sources": ["memory", "notes"], "items": subject_items(n)},
            format="json",
        )
        assert written.status_code == 200, written.content
        assert {r["status"] for r in written.json()["records"]} == {"indexed"}
        found = api.post(
            f"{API}/query",
            {"query": f"{token(n)} password hint", "namespaces": [namespace(n)], "k": 5},
            format="json",
        )
        items = found.json()["items"]
        assert token(n) in items[0]["content"]
        assert items[0]["dedupe_count"] == 2  # the same memory in both knowledge bases
        listed = api.get(f"{API}/records", {"namespace": namespace(n)})
        assert len(listed.json()["results"]) == 4

    # The scanners find every subject before the erasure (they can fail).
    assert MemoryRecord.unscoped.count() == SUBJECTS * 4 + 1
    hits, _, _ = scan_database()
    assert subjects_hit(hits) == set(range(SUBJECTS))
    # The query cache holds rankings (ids and scores): never content or namespaces...
    assert scan_cache() == []
    # ...which the cache scanner would find (it can fail).
    probe = caches[settings.MEMORYHUB.get("CACHE_ALIAS", "default")]
    probe.set("audit-probe", {"content": token(7)})
    assert subjects_hit(scan_cache()) == {7}
    probe.delete("audit-probe")
    assert Observation.unscoped.filter(kind="query.deduplicated").count() == SUBJECTS

    erase_subject = "/admin/memoryhub/memoryrecord/erase-subject/"
    for n in range(SUBJECTS // 2):
        form = {"org": tenant.org.pk, "namespace": namespace(n)}
        preview = admin_client.post(erase_subject, form)
        assert 'id="erasure-preview"' in preview.content.decode()
        assert MemoryRecord.unscoped.filter(namespace=namespace(n)).count() == 4
        receipt = admin_client.post(erase_subject, {**form, "post": "yes"}, follow=True)
        assert "Erased 4 records." in receipt.content.decode()
    for n in range(SUBJECTS // 2, SUBJECTS):
        forgotten = api.post(f"{API}/forget", {"namespace": namespace(n)}, format="json")
        assert without_receipt(forgotten.json()) == {
            "deleted": 4,
            "by_source": {"memory": 2, "notes": 2},
            "refused": [],
        }

    hits, tables, columns = scan_database()
    assert hits == [], hits[:10]
    assert tables >= 15 and columns >= 40, (tables, columns)
    cache_hits = scan_cache()
    assert cache_hits == [], cache_hits[:10]
    # Asked again, the API knows nothing of them.
    for n in range(SUBJECTS):
        found = api.post(
            f"{API}/query",
            {"query": f"{token(n)} password hint", "namespaces": [namespace(n)]},
            format="json",
        )
        assert found.json() == {"items": [], "grounding": None, "reranked": False, "usage": ANY}
    log_text = json_log.getvalue()
    access = [json.loads(line) for line in log_text.splitlines() if "memoryhub.access" in line]
    assert len(access) >= SUBJECTS * 5  # write, query, list, erase, query again
    assert scan_logs(log_text) == []
    assert key not in log_text
    assert MemoryRecord.unscoped.get().content == bystander

    receipts = list(Observation.unscoped.filter(kind="memory.forgotten"))
    assert len(receipts) == SUBJECTS
    expected = {salted_hash(namespace(n)) for n in range(SUBJECTS)}
    assert {receipt.payload["selector"]["namespace"] for receipt in receipts} == expected
    permanent = {str(r.pk): r for r in ErasureReceipt.unscoped.all()}
    assert len(permanent) == SUBJECTS
    for receipt in receipts:
        assert receipt.count == 4
        assert receipt.payload == {
            "by_source": {"memory": 2, "notes": 2},
            "selector": {"all": False, "namespace": receipt.payload["selector"]["namespace"]},
            "receipt": receipt.payload["receipt"],
        }
        kept = permanent[receipt.payload["receipt"]]
        assert kept.selector == receipt.payload["selector"]
        assert (kept.deleted, kept.by_source, kept.actor) == (
            4,
            {"memory": 2, "notes": 2},
            receipt.actor,
        )
    actors = sorted({receipt.actor for receipt in receipts})
    assert actors == ["admin:admin", f"api-key:{api_key.prefix}"]
    elapsed = time.monotonic() - started
    print(
        f"audit ({cache_backend} cache): {SUBJECTS} subjects, {tables} tables / {columns}"
        f" columns scanned, {len(hits)} hits, {len(receipts)} receipts,"
        f" {len(access)} access lines, {elapsed:.1f}s"
    )


@pytest.mark.django_db
def test_an_erasure_deletes_only_its_own_domains_cached_results(tenant, other_tenant, committed):
    for each in (tenant, other_tenant):
        committed(write.write, each.scope, [{"content": "zorblat000 tea", "namespace": "user:a"}])
        assert query.query(each.scope, query="tea", namespaces=["user:a"]).items
        assert query.query(each.scope, query="tea", namespaces=["user:a"]).cached
    committed(forget, tenant.scope, ForgetRequest(namespace="user:a"))
    assert query_cache.purge_queries(tenant.scope) == 0  # already gone
    assert query_cache.purge_queries(other_tenant.scope) == 1
