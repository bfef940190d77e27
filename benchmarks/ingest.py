"""Ingest: the service's paths and the floors they are measured against, in one run.

* **Service, 2 workers**: items written through ``memoryhub.services.write`` in batches
  of 500, indexed by a real Celery worker (prefork, concurrency 2) on Redis.
* **Service, one process**: the same writes with tasks run eagerly in the writing
  process (each write's indexing, and any maintenance it asks for, right after it).

Both clocks stop when every record is ``indexed`` and the maintenance a settled load
gets from the sweeper is done (``ensure_tenant_indexes(settle_after=0)``: the domains'
own indexes built again over their deltas, deltas of domains without one folded into the
shared index), so the service ends where the floors end: every vector in its index.

* **Bulk floor**: the physical floor for making the rows searchable: their vectors
  computed in one embedder call, one binary ``COPY`` into a copy of the records table
  without any index, then every index of the records table built in bulk (HNSW
  included).
* **Incremental floor**: the same ``COPY`` into a copy of the records table with its
  indexes (each row inserted into each index, HNSW included), after the same embedding.

With MiniLM, the pipeline's throughput (2 workers, write → indexed) against bare
``encode()`` of the same passages in one process.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

#: The records table's columns a COPY fills (the history and consolidation ones as the
#: write service fills them).
COLUMNS = (
    "id, org_id, domain_id, knowledge_base_id, namespace, kind, content, content_hash, "
    "metadata, tags, embedding, embedding_model, status, attempts, last_error, created_at, "
    "updated_at, indexed_at, version, changed_by, change_cause, consolidation, derived_from"
)
TYPES = [
    "uuid",
    "int8",
    "int8",
    "int8",
    "varchar",
    "varchar",
    "text",
    "varchar",
    "jsonb",
    "varchar[]",
    "vector",
    "varchar",
    "varchar",
    "int2",
    "text",
    "timestamptz",
    "timestamptz",
    "timestamptz",
    "int4",
    "varchar",
    "varchar",
    "varchar",
    "uuid[]",
]
#: Why a path is measured up to 100k records only (the medium run has it).
SKIPPED_AT_SCALE = (
    "measured up to 100k records (see the medium run); at 1M it would take 30-40 minutes "
    "of this machine"
)
#: Passages of the MiniLM measurement, per scale.
MINILM_RECORDS = {"tiny": 200, "small": 2_000, "medium": 5_000, "large": 5_000}


def _items(texts: list[str], offset: int) -> list[dict[str, Any]]:
    return [
        {"content": text, "metadata": {"bucket": (offset + i) % 100}}
        for i, text in enumerate(texts)
    ]


def _write_all(scopes: list[Any], sizes: list[int], texts: list[str], label: str) -> None:
    from tqdm import tqdm

    from memoryhub.services import write

    bar = tqdm(total=len(texts), desc=label, unit="record")
    offset = 0
    for scope, size in zip(scopes, sizes, strict=True):
        for start in range(offset, offset + size, 500):
            stop = min(start + 500, offset + size)
            write.write(scope, _items(texts[start:stop], start))
            bar.update(stop - start)
        offset += size
    bar.close()


def settle() -> dict[str, Any]:
    """What the sweeper does once a load has settled; waits for a run in progress (a
    worker's) to end first."""
    from memoryhub.services.vector_indexes import ensure_tenant_indexes

    while True:
        changes = ensure_tenant_indexes(settle_after=timedelta(0))
        if not changes.busy:
            return {
                "rebuilt": len(changes.rebuilt),
                "created": len(changes.created),
                "folded": sum(changes.folded.values()),
                "unindexed": unindexed(),
            }
        time.sleep(0.2)


def unindexed() -> int:
    """Vectors in no HNSW index of a domain its queries search through HNSW (larger than
    ``EXACT_SCAN_THRESHOLD``): what settling leaves to exact scans (0 expected)."""
    from django.db import connection

    from memoryhub.conf import memoryhub_settings
    from memoryhub.scope import Scope
    from memoryhub.services.vector_indexes import own_index

    model = memoryhub_settings.embedder().name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT org_id, domain_id, count(*) FROM memoryhub_memoryrecord GROUP BY 1, 2"
            " HAVING count(*) > %s",
            [memoryhub_settings.EXACT_SCAN_THRESHOLD],
        )
        total = 0
        for org_id, domain_id, _ in cursor.fetchall():
            own = own_index(Scope(org_id=org_id, domain_id=domain_id), model)
            cursor.execute(
                "SELECT count(*) FROM memoryhub_memoryrecord WHERE domain_id = %s"
                " AND org_id = %s AND vector_batch > %s",
                [domain_id, org_id, own.covers if own is not None else -1],
            )
            total += cursor.fetchone()[0]
    return total


def _figures(records: int, written: float, indexed: float, settled: float) -> dict[str, Any]:
    return {
        "records": records,
        "write_seconds": round(written, 2),
        "indexed_seconds": round(indexed, 2),
        "settle_seconds": round(settled - indexed, 2),
        "seconds": round(settled, 2),
        "records_per_second": round(records / settled, 1),
    }


def single_process(scopes: list[Any], sizes: list[int], texts: list[str]) -> dict[str, Any]:
    """The service in one process: tasks run eagerly after each write commits."""
    from celery import current_app

    from memoryhub.models import MemoryRecord

    assert current_app.conf.task_always_eager
    started = time.perf_counter()
    _write_all(scopes, sizes, texts, "ingest (one process)")
    indexed = time.perf_counter() - started
    assert not MemoryRecord.unscoped.exclude(status="indexed").exists()
    maintenance = settle()
    figures = _figures(len(texts), indexed, indexed, time.perf_counter() - started)
    return {**figures, "settle": maintenance}


def with_workers(
    scopes: list[Any],
    sizes: list[int],
    texts: list[str],
    broker_url: str,
    logs: Path,
    *,
    memoryhub: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    label: str = "ingest (service + workers)",
) -> dict[str, Any]:
    """POST-equivalent writes through the write service; real workers index them."""
    from memoryhub.models import MemoryRecord
    from tests.programs import celery_broker, start_worker, wait_for

    with celery_broker(broker_url):
        worker = start_worker(
            broker_url,
            logs / "worker.log",
            pool="prefork",
            concurrency=2,
            memoryhub=memoryhub,
            env=env,
        )
        try:
            warm_up(scopes[-1], wait_for)
            started = time.perf_counter()
            _write_all(scopes, sizes, texts, label)
            written = time.perf_counter() - started
            wait_for(
                lambda: not MemoryRecord.unscoped.exclude(status="indexed").exists(),
                timeout=3600,
                what="every record indexed",
            )
            indexed = time.perf_counter() - started
            maintenance = settle()
            settled = time.perf_counter() - started
        finally:
            worker.stop()
    return {**_figures(len(texts), written, indexed, settled), "settle": maintenance}


def warm_up(scope: Any, wait_for: Any, tasks: int = 4) -> None:
    """A few records written and indexed before the clock starts, one task each, so
    every worker process has loaded its embedder and opened its connection (as a
    worker that has been running for a while has), then erased."""
    from memoryhub.models import MemoryRecord
    from memoryhub.services import write

    ids = [
        pk
        for _ in range(tasks)
        for pk in write.write(scope, [{"content": "warm up " + uuid.uuid4().hex}]).record_ids
    ]
    wait_for(
        lambda: not MemoryRecord.unscoped.filter(pk__in=ids).exclude(status="indexed").exists(),
        timeout=300,
        what="the warm-up records indexed",
    )
    MemoryRecord.unscoped.filter(pk__in=ids).delete()


def reset() -> None:
    """An empty records table again, as the next load finds it (no own indexes)."""
    from django.db import connection

    from memoryhub.services.vector_indexes import ensure_tenant_indexes

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE memoryhub_memoryrecord CASCADE")
        # The statistics too (TRUNCATE keeps the live-row count the service estimates
        # the table's size from): an empty table, as it was before the first load.
        cursor.execute("ANALYZE memoryhub_memoryrecord")
    ensure_tenant_indexes()


# --- the floors ------------------------------------------------------------------------------


def embed(texts: list[str]) -> tuple[Any, float]:
    """Every passage's vector in one embedder call, and how long it took."""
    import numpy as np

    from memoryhub.conf import memoryhub_settings

    started = time.perf_counter()
    vectors = np.array(memoryhub_settings.embedder().embed_documents(texts), dtype=np.float32)
    return vectors, time.perf_counter() - started


def _rows(scopes: list[Any], sizes: list[int], texts: list[str], vectors: Any) -> list[tuple]:
    from psycopg.types.json import Jsonb

    from memoryhub.conf import memoryhub_settings
    from memoryhub.models import content_hash
    from memoryhub.services import knowledge_bases

    model = memoryhub_settings.embedder().name
    rows = []
    now = datetime.now(UTC)
    offset = 0
    for scope, size in zip(scopes, sizes, strict=True):
        kb = knowledge_bases.ensure_knowledge_base(scope, "copyfloor").pk
        for i in range(offset, offset + size):
            rows.append(
                (
                    uuid.uuid4(),
                    scope.org_id,
                    scope.domain_id,
                    kb,
                    "",
                    "semantic",
                    texts[i],
                    content_hash(texts[i]),
                    Jsonb({"bucket": i % 100}),
                    [],
                    vectors[i],
                    model,
                    "indexed",
                    0,
                    "",
                    now,
                    now,
                    now,
                    1,
                    "",
                    "create",
                    "",
                    [],
                )
            )
        offset += size
    return rows


def _copy(table: str, rows: list[tuple]) -> float:
    from django.db import connection
    from pgvector.psycopg import register_vector

    connection.ensure_connection()
    raw = connection.connection
    register_vector(raw)
    started = time.perf_counter()
    with (
        raw.cursor() as cursor,
        cursor.copy(f"COPY {table} ({COLUMNS}) FROM STDIN WITH (FORMAT BINARY)") as copy,
    ):
        copy.set_types(TYPES)
        for row in rows:
            copy.write_row(row)
    raw.commit()
    return time.perf_counter() - started


def _like(table: str, *, indexes: bool) -> None:
    """An empty copy of the records table: the same columns, generated full-text column,
    storage and table options (``toast_tuple_target``), with its indexes or none; no
    foreign keys, so the floors are if anything a little faster."""
    from django.db import connection

    records = "memoryhub_memoryrecord"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [records])
        (options,) = cursor.fetchone()
        with_options = f" WITH ({', '.join(options)})" if options else ""
        like = (
            "INCLUDING ALL"
            if indexes
            else "INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING STORAGE"
        )
        cursor.execute(f"CREATE TABLE {table} (LIKE {records} {like}){with_options}")


def _index_definitions(table: str) -> list[str]:
    """Every index of the records table (HNSW included; no domain's own HNSW or
    full-text index: there is none before a load), as statements building it on
    ``table``."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memoryhub_memoryrecord'"
            " AND indexname NOT LIKE 'memoryhub_thnsw_%%' AND indexname NOT LIKE 'memoryhub_tfts_%%'"
        )
        found = cursor.fetchall()
    return [
        definition.replace(f"INDEX {name} ON", f"INDEX {table}_{n} ON", 1).replace(
            " public.memoryhub_memoryrecord ", f" public.{table} ", 1
        )
        for n, (name, definition) in enumerate(found)
    ]


#: What an HNSW graph of one 384-d vector holds in memory while it is built (the vector,
#: its neighbour lists and pgvector's element), rounded up: 1M vectors need about 2.6 GB.
HNSW_BUILD_BYTES_PER_VECTOR = 2_800


def build_memory(vectors: int) -> str:
    """``maintenance_work_mem`` for building an HNSW index of ``vectors`` without
    spilling: the server's setting or the graph's size, whichever is larger."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_bytes(current_setting('maintenance_work_mem'))")
        (current,) = cursor.fetchone()
    needed = vectors * HNSW_BUILD_BYTES_PER_VECTOR
    return f"{max(int(current), needed) // 1024**2}MB"


def floors(
    scopes: list[Any], sizes: list[int], texts: list[str], *, incremental_floor: bool = True
) -> dict[str, Any]:
    """The bulk floor and (unless ``incremental_floor`` is false) the incremental floor,
    with the embedding both need."""
    from django.db import connection

    from memoryhub.models import KnowledgeBase

    vectors, embedded = embed(texts)
    rows = _rows(scopes, sizes, texts, vectors)
    n = len(rows)
    incremental: float | None = None
    if incremental_floor:
        _like("bench_copy_floor", indexes=True)
        incremental = _copy("bench_copy_floor", rows)
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE bench_copy_floor")
    _like("bench_bulk_floor", indexes=False)
    copied = _copy("bench_bulk_floor", rows)
    definitions = _index_definitions("bench_bulk_floor")
    memory = build_memory(n)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        # The floor's HNSW build holds every vector: with less memory than its graph it
        # spills to disk and slows down manyfold, and a spilling build is no floor.
        cursor.execute(f"SET maintenance_work_mem = '{memory}'")
        for statement in definitions:
            cursor.execute(statement)
        cursor.execute("RESET maintenance_work_mem")
    built = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bench_bulk_floor")
    KnowledgeBase.unscoped.filter(name="copyfloor").delete()
    bulk = embedded + copied + built
    return {
        "records": n,
        "embed_seconds": round(embedded, 2),
        "bulk": {
            "copy_seconds": round(copied, 2),
            "build_seconds": round(built, 2),
            "indexes": len(definitions),
            "maintenance_work_mem": memory,
            "seconds": round(bulk, 2),
            "records_per_second": round(n / bulk, 1),
        },
        "incremental": {
            "copy_seconds": round(incremental, 2),
            "seconds": round(embedded + incremental, 2),
            "records_per_second": round(n / (embedded + incremental), 1),
        }
        if incremental is not None
        else {"skipped": SKIPPED_AT_SCALE},
    }


def ratios(ingest: dict[str, Any]) -> dict[str, float]:
    """Each service path's throughput over each floor's."""
    figures = {}
    for path in ("service", "single_process"):
        for floor in ("bulk", "incremental"):
            if "records_per_second" in ingest.get(path, {}) and (
                "records_per_second" in ingest["floors"][floor]
            ):
                figures[f"{path}/{floor}"] = round(
                    ingest[path]["records_per_second"]
                    / ingest["floors"][floor]["records_per_second"],
                    3,
                )
    return figures


# --- MiniLM ----------------------------------------------------------------------------------


def minilm(
    scopes: list[Any], total: int, texts: list[str], broker_url: str, logs: Path
) -> dict[str, Any]:
    """The pipeline with MiniLM (2 workers, one torch thread each) against bare
    ``encode()`` of the same passages in one process (all cores): a bulk load of
    ``total`` passages into ten domains, written in batches of 500."""
    try:
        from memoryhub.embedders import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
        embedder.embed_documents(["load the model"])
    except Exception as exc:  # the local-embeddings extra is not installed
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    from django.conf import settings

    from memoryhub.services.vector_indexes import ensure_vector_index

    scopes = scopes[:10]
    sizes = [total // len(scopes)] * len(scopes)
    sizes[0] += total - sum(sizes)
    started = time.perf_counter()
    model = embedder._load()
    model.encode(
        texts[:total],
        batch_size=embedder.batch_size,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    bare = time.perf_counter() - started
    path = "memoryhub.embedders.SentenceTransformerEmbedder"
    saved = settings.MEMORYHUB
    settings.MEMORYHUB = {**saved, "EMBEDDER": path}
    try:
        ensure_vector_index(embedder.name, embedder.dimensions)
        pipeline = with_workers(
            scopes,
            sizes,
            texts[:total],
            broker_url,
            logs,
            memoryhub={"EMBEDDER": path},
            env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
            label="ingest (MiniLM, workers)",
        )
    finally:
        settings.MEMORYHUB = saved
    return {
        "model": embedder.name,
        "records": total,
        "encode_seconds": round(bare, 2),
        "encode_records_per_second": round(total / bare, 1),
        "pipeline": pipeline,
        "ratio": round(pipeline["records_per_second"] / (total / bare), 3),
    }
