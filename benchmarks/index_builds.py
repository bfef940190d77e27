"""``python -m benchmarks.index_builds [--records N] [--output DIR]``: what an HNSW index
costs to build in bulk, under alternative build settings, and to fill row by row.

``N`` passages (default 30,000, the 30% tenant of a 100k run) are embedded with the
configured embedder and copied into a table of ids and vectors; the model's HNSW index
(m 16, ef_construction 64, cosine) is then built under each configuration, twice,
interleaved (A B C D D C B A): ``vector`` against ``halfvec`` storage, two parallel
build workers against none, ``maintenance_work_mem`` 1 GB against PostgreSQL's default
64 MB. Each reports its mean build time, its size and its recall@10 over 100 of the
passages as queries (exact numpy search as truth, ``ef_search`` 40). Then the same
vectors inserted one by one into a table that has the index: the cost a bulk build saves
per vector (``services.vector_indexes.ROW_INSERT_COST``).

Writes ``results-index-builds.json`` and the "Index builds" section of ``REPORT.md`` in
``DIR`` (default ``benchmarks/``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.report import replace_section

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- index-builds:begin -->", "<!-- index-builds:end -->"
#: (label, storage, parallel build workers, maintenance_work_mem)
CONFIGS = [
    ("vector, 2 workers, 1GB", "vector", 2, "1GB"),
    ("halfvec, 2 workers, 1GB", "halfvec", 2, "1GB"),
    ("vector, no workers, 1GB", "vector", 0, "1GB"),
    ("vector, 2 workers, 64MB", "vector", 2, "64MB"),
]
ROW_BY_ROW = 2_000


def _build(cursor: Any, storage: str, workers: int, memory: str, dimensions: int) -> float:
    cursor.execute(f"SET maintenance_work_mem = '{memory}'")
    cursor.execute(f"SET max_parallel_maintenance_workers = {int(workers)}")
    cursor.execute("DROP INDEX IF EXISTS bench_build_idx")
    started = time.perf_counter()
    cursor.execute(
        f"CREATE INDEX bench_build_idx ON bench_build USING hnsw "
        f"((embedding::{storage}({dimensions})) {storage}_cosine_ops) "
        "WITH (m = 16, ef_construction = 64)"
    )
    return time.perf_counter() - started


def _recall(cursor: Any, storage: str, dimensions: int, vectors: Any, ids: list[str]) -> float:
    import numpy as np

    hits = []
    for index in range(0, len(ids), max(1, len(ids) // 100))[:100]:
        query = vectors[index]
        truth = {ids[i] for i in np.argsort(-(vectors @ query))[:10]}
        literal = "[" + ",".join(repr(float(x)) for x in query) + "]"
        cursor.execute(
            f"SELECT id FROM bench_build ORDER BY embedding::{storage}({dimensions}) <=> "
            f"%s::{storage}({dimensions}) LIMIT 10",
            [literal],
        )
        hits.append(len(truth & {str(row[0]) for row in cursor.fetchall()}) / 10)
    return statistics.fmean(hits)


def measure(records: int) -> dict[str, Any]:
    import numpy as np
    from django.db import connection
    from pgvector.psycopg import register_vector

    from benchmarks.corpus import passages
    from memoryhub.conf import memoryhub_settings

    embedder = memoryhub_settings.embedder()
    texts = passages(records)
    vectors = np.array(embedder.embed_documents(texts), dtype=np.float32)
    ids = [str(uuid.uuid4()) for _ in texts]
    connection.ensure_connection()
    raw = connection.connection
    register_vector(raw)
    with raw.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_build")
        cursor.execute("CREATE TABLE bench_build (id uuid, embedding vector)")
        with cursor.copy("COPY bench_build FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["uuid", "vector"])
            for pk, vector in zip(ids, vectors, strict=True):
                copy.write_row((uuid.UUID(pk), vector))
        raw.commit()
        cursor.execute("VACUUM ANALYZE bench_build")
        raw.commit()
        times: dict[str, list[float]] = {label: [] for label, *_ in CONFIGS}
        figures: dict[str, Any] = {}
        for label, storage, workers, memory in [*CONFIGS, *reversed(CONFIGS)]:
            times[label].append(_build(cursor, storage, workers, memory, embedder.dimensions))
            raw.commit()
            if label not in figures:
                cursor.execute("SET hnsw.ef_search = 40")
                cursor.execute("SELECT pg_relation_size('bench_build_idx')")
                figures[label] = {
                    "megabytes": round(cursor.fetchone()[0] / 2**20, 1),
                    "recall@10": round(
                        _recall(cursor, storage, embedder.dimensions, vectors, ids), 3
                    ),
                }
        for label, samples in times.items():
            figures[label]["seconds"] = round(statistics.fmean(samples), 2)
            figures[label]["ms_per_vector"] = round(1000 * statistics.fmean(samples) / records, 3)
        # Row by row: the same vectors inserted one statement each into an indexed table.
        cursor.execute("RESET maintenance_work_mem")
        cursor.execute("RESET max_parallel_maintenance_workers")
        cursor.execute("TRUNCATE bench_build")
        cursor.execute("DROP INDEX IF EXISTS bench_build_idx")
        cursor.execute(
            f"CREATE INDEX bench_build_idx ON bench_build USING hnsw "
            f"((embedding::vector({embedder.dimensions})) vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64)"
        )
        count = min(ROW_BY_ROW, records)
        with cursor.copy("COPY bench_build FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["uuid", "vector"])
            for pk, vector in zip(ids[count:], vectors[count:], strict=True):
                copy.write_row((uuid.UUID(pk), vector))
        raw.commit()
        started = time.perf_counter()
        for pk, vector in zip(ids[:count], vectors[:count], strict=True):
            cursor.execute("INSERT INTO bench_build VALUES (%s, %s)", [pk, vector])
            raw.commit()
        row_by_row = (time.perf_counter() - started) / count
        cursor.execute("DROP TABLE bench_build")
        raw.commit()
    baseline = figures[CONFIGS[0][0]]["ms_per_vector"]
    return {
        "builds": figures,
        "row_by_row_ms_per_vector": round(row_by_row * 1000, 3),
        "row_by_row_over_bulk": round(row_by_row * 1000 / baseline, 1),
    }


def section(results: dict[str, Any]) -> str:
    rows = [
        "| build | seconds | ms a vector | size MB | recall@10 (ef_search 40) |",
        "|---|---|---|---|---|",
    ]
    for label, figures in results["builds"].items():
        rows.append(
            f"| {label} | {figures['seconds']} | {figures['ms_per_vector']} | "
            f"{figures['megabytes']} | {figures['recall@10']} |"
        )
    return "\n".join(
        [
            BEGIN,
            "## Index builds (`python -m benchmarks.index_builds`)",
            "",
            f"{results['records']:,} passages ({results['model']}), the model's HNSW index "
            "(m 16, ef_construction 64) built twice per configuration, interleaved; "
            f"{results['cpus']} CPUs, {results['date']}.",
            "",
            *rows,
            "",
            f"Row by row (one INSERT each into a table with the index, "
            f"{min(ROW_BY_ROW, results['records']):,} vectors on top of the rest): "
            f"{results['row_by_row_ms_per_vector']} ms a vector, "
            f"{results['row_by_row_over_bulk']}x the bulk build's.",
            END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.index_builds")
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks")
    args = parser.parse_args(argv)

    from benchmarks.run import setup_django

    setup_django("memoryhub_bench_index_builds")
    from memoryhub.conf import memoryhub_settings

    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "records": args.records,
        "model": memoryhub_settings.embedder().name,
        **measure(args.records),
    }
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "results-index-builds.json").write_text(json.dumps(results, indent=2) + "\n")
    replace_section(args.output / "REPORT.md", BEGIN, END, section(results))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
