"""Scale-out: the same load and the same questions on one embedded PostgreSQL and on a
Citus cluster (a coordinator and two workers built from Citus's source), in one run.

    python -m benchmarks.citus [--records N] [--tenants T] [--source citus.tar.gz] [--reuse]

Each target runs in a process of its own with the same harness (``benchmarks.run``:
tenants of which one holds 30% of the records, one 10%, the rest a Zipf-like tail;
passages of docstrings):

* **ingest**: the write service in one process, indexing run eagerly after each write,
  until the load has settled (``benchmarks.ingest.single_process``);
* **queries** of the 30% tenant and of a 1% tenant, vector and hybrid, through the query
  service (no cache): p50/p95 and known-item recall@10;
* on the cluster, **single-shard share**: every question asked again with
  ``citus.multi_task_query_log_level = error``, so a statement sent to more than one
  shard fails;
* on the cluster, **a tenant isolated, then moved, under writes**: the 1% tenant given a
  shard group of its own, then moved to the other worker, each while an agent writes to
  it turn by turn; the turns written per second meanwhile, and how many acknowledged
  turns are missing or doubled after each.

The results go to ``benchmarks/results-citus.json`` and ``benchmarks/REPORT-citus.md``.
Each target's figures are also kept as it finishes (``--keep``), so that a run cut short
on the cluster can be finished with ``--reuse`` without measuring the single node again.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = 60
K = 10


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 2),
    }


def _questions(
    scope: Any, offset: int, size: int, texts: list[str], rng: random.Random
) -> tuple[list[str], list[int]]:
    from benchmarks.corpus import known_item_query

    picks = [offset + rng.randrange(size) for _ in range(QUESTIONS)]
    return [known_item_query(texts[i], rng) for i in picks], picks


def _measure_tenant(scope: Any, questions: list[str], picks: list[int], texts: list[str]) -> dict:
    from benchmarks.run import known_item_recall
    from memoryhub.services import query

    figures: dict[str, Any] = {}
    for mode in ("vector", "hybrid"):
        for question in questions[:5]:  # warm the plans and the connection
            query.query(scope, query=question, k=K, mode=mode)
        samples = []
        for question in questions:
            started = time.perf_counter()
            query.query(scope, query=question, k=K, mode=mode)
            samples.append(time.perf_counter() - started)
        figures[mode] = _percentiles(samples)
    recall = known_item_recall(scope, questions, picks, texts)
    for mode in ("vector", "hybrid"):
        figures[mode]["recall@10"] = recall[mode]["recall@10"]
    return figures


def _single_shard_share(scopes: list[Any], questions: list[list[str]]) -> dict[str, Any]:
    from django.db import connection, transaction

    from memoryhub.services import query

    asked = routed = 0
    for scope, batch in zip(scopes, questions, strict=True):
        for mode in ("vector", "keyword", "hybrid"):
            for question in batch:
                asked += 1
                try:
                    with transaction.atomic(), connection.cursor() as cursor:
                        cursor.execute("SET LOCAL citus.multi_task_query_log_level = 'error'")
                        query.query(scope, query=question, k=K, mode=mode)
                except Exception:
                    continue
                routed += 1
    return {"queries": asked, "single_shard": routed, "share": round(routed / asked, 4)}


def _under_writes(scope: Any, what: str, operation: Any) -> dict[str, Any]:
    """Run ``operation()`` (a move or an isolation of ``scope``'s org) while an agent
    writes to the org turn by turn; what was acknowledged against what is stored."""
    from django.db import connections

    from memoryhub.models import MemoryRecord
    from memoryhub.services import write

    marker = f"written while the tenant {what}"
    written: list[str] = []
    errors: list[str] = []
    stop = threading.Event()
    working = threading.Event()

    def agent() -> None:
        n = 0
        try:
            while not stop.is_set():
                content = f"turn {n} {marker}"
                try:
                    write.write(scope, [{"content": content}])
                    written.append(content)
                except Exception as exc:
                    errors.append(repr(exc))
                if len(written) == 20:
                    working.set()
                n += 1
        finally:
            connections.close_all()

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    working.wait(timeout=120)
    at_start = len(written)
    started = time.perf_counter()
    outcome = operation()
    seconds = time.perf_counter() - started
    during = len(written) - at_start
    stop.set()
    thread.join(timeout=120)
    stored = list(
        MemoryRecord.unscoped.filter(org_id=scope.org_id, content__endswith=marker).values_list(
            "content", flat=True
        )
    )
    return {
        "outcome": str(outcome),
        "seconds": round(seconds, 2),
        "turns_during": during,
        "turns_per_second_during": round(during / seconds, 1) if seconds else None,
        "acknowledged": len(written),
        "lost": len(set(written) - set(stored)),
        "doubled": len(stored) - len(set(stored)),
        "errors": errors[:5],
    }


def _isolate_and_move_under_writes(scope: Any) -> dict[str, Any]:
    """Isolate the org on a shard group of its own, then move it to the other worker,
    each while an agent writes to it."""
    from django.db import connection

    from memoryhub.services import distribution

    isolated = _under_writes(
        scope, "is isolated", lambda: distribution.isolate_tenant(connection, scope.org_id)
    )
    before = distribution.tenant_node(connection, scope.org_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary'"
            " AND shouldhaveshards AND (nodename, nodeport) <> (%s, %s)",
            [before.host, before.port],
        )
        host, port = cursor.fetchone()
    moved = _under_writes(
        scope,
        "moves",
        lambda: distribution.move_tenant(connection, scope.org_id, host, port),
    )
    return {"isolate": isolated, "move": moved}


def child(target: str, records: int, tenants: int, output: Path) -> None:
    """Measure one target (the database ``BENCH_DATABASE_URL`` names, else the embedded
    server's)."""
    from benchmarks.corpus import passages
    from benchmarks.run import describe_setup, make_tenants, setup_django

    setup_django(f"memoryhub_bench_citus_{target}")
    from django.core.management import call_command
    from django.db import connection

    from benchmarks import ingest
    from memoryhub.services import distribution

    if target == "cluster":
        call_command("memoryhub_citus", "distribute")
    assert distribution.is_citus(connection) == (target == "cluster")
    texts = passages(records)
    scopes, sizes = make_tenants(records, tenants)
    results: dict[str, Any] = {"target": target, "records": records, "tenants": tenants}
    results["setup"] = describe_setup()
    results["ingest"] = ingest.single_process(scopes, sizes, texts)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) memoryhub_memoryrecord")
    rng = random.Random(42)
    one_percent = min(range(2, len(sizes)), key=lambda n: abs(sizes[n] - records / 100))
    chosen = {"30%": 0, "1%": one_percent}
    asked = []
    for label, index in chosen.items():
        offset = sum(sizes[:index])
        questions, picks = _questions(scopes[index], offset, sizes[index], texts, rng)
        asked.append(questions)
        results[label] = {
            "records": sizes[index],
            **_measure_tenant(scopes[index], questions, picks, texts),
        }
    if target == "cluster":
        results["routing"] = _single_shard_share([scopes[i] for i in chosen.values()], asked)
        results["operations"] = _isolate_and_move_under_writes(scopes[one_percent])
    output.write_text(json.dumps(results, indent=2, default=str))


def report(single: dict[str, Any], cluster: dict[str, Any]) -> str:
    rows = []
    ratio = cluster["ingest"]["seconds"] / single["ingest"]["seconds"]
    rows.append(
        f"| ingest, {single['records']:,} records (write service, indexing, settled)"
        f" | {single['ingest']['seconds']} s | {cluster['ingest']['seconds']} s"
        f" | {ratio:.2f}× |"
    )
    checks = []
    for label in ("30%", "1%"):
        for mode in ("vector", "hybrid"):
            one, many = single[label][mode], cluster[label][mode]
            rows.append(
                f"| {label} tenant ({single[label]['records']:,} records), {mode}: p50 / p95"
                f" | {one['p50_ms']} / {one['p95_ms']} ms | {many['p50_ms']} / {many['p95_ms']} ms"
                f" | {many['p50_ms'] / one['p50_ms']:.2f}× |"
            )
            rows.append(
                f"| {label} tenant, {mode}: known-item recall@10 | {one['recall@10']}"
                f" | {many['recall@10']} | {many['recall@10'] - one['recall@10']:+.3f} |"
            )
            checks.append(
                (
                    f"{label} {mode}: p50 within 1.5× of one node",
                    many["p50_ms"] <= 1.5 * one["p50_ms"],
                )
            )
            checks.append(
                (
                    f"{label} {mode}: recall within 0.01",
                    many["recall@10"] >= one["recall@10"] - 0.01,
                )
            )
    routing, operations = cluster["routing"], cluster["operations"]
    checks.append(("every tenant query single-shard", routing["share"] == 1.0))
    for name, run in operations.items():
        checks.append(
            (
                f"0 lost, 0 doubled across an online {name} under writes",
                run["lost"] == 0 and run["doubled"] == 0 and not run["errors"],
            )
        )
    lines = [
        "# Scale-out: one PostgreSQL beside a Citus cluster",
        "",
        f"{single['records']:,} records over {single['tenants']} tenants, the same harness and"
        f" questions on both (`python -m benchmarks.citus`). Run {datetime.now(UTC).isoformat(timespec='seconds')}"
        " on one machine: the cluster's coordinator and two workers share its 2 CPUs.",
        "",
        "| measure | one PostgreSQL | Citus (1 + 2) | cluster / one |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Tenant queries routed to a single shard: {routing['single_shard']} of"
        f" {routing['queries']} ({routing['share']:.0%}).",
        "",
        *(
            f"The 1% tenant, {name} under writes (synchronous commit on): {run['seconds']} s,"
            f" {run['turns_during']} turns written during it"
            f" ({run['turns_per_second_during']}/s), {run['acknowledged']} acknowledged,"
            f" {run['lost']} lost, {run['doubled']} doubled, {len(run['errors'])} errors."
            for name, run in operations.items()
        ),
        "",
        "| target | met |",
        "|---|---|",
        *(f"| {name} | {'met' if ok else '**not met**'} |" for name, ok in checks),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.citus")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--child", choices=["single", "cluster"])
    parser.add_argument("--output", type=Path)
    parser.add_argument(
        "--keep",
        type=Path,
        default=ROOT / ".memoryhub" / "bench-citus",
        help="where each target's figures are kept as it finishes (default: .memoryhub/bench-citus)",
    )
    parser.add_argument(
        "--busy",
        action="store_true",
        help="measure even when the machine's load average says other work shares it",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="take a target's figures from --keep when a run of the same size left them there",
    )
    options = parser.parse_args(argv)
    if options.child:
        child(options.child, options.records, options.tenants, options.output)
        return 0

    from benchmarks.host import busy
    from memoryhub.contrib.citus_cluster import Cluster, build
    from tests.cluster import source

    why = None if options.busy else busy()
    if why is not None:
        print(why, file=sys.stderr)
        return 2

    # A run stopped with SIGTERM (kill, a CI timeout) still stops and removes its cluster.
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))

    tarball = options.source or source()
    if tarball is None:
        print("no Citus source tarball: pass --source", file=sys.stderr)
        return 2
    results = {}
    with tempfile.TemporaryDirectory(prefix="memoryhub-bench-citus-") as scratch:
        cluster = Cluster(Path(scratch) / "cluster", build(tarball), workers=2, durable=False)
        cluster.start()
        try:
            url = cluster.create_database("memoryhub_bench_citus_cluster")
            for target in ("single", "cluster"):
                output = options.keep / f"{target}-{options.records}-{options.tenants}.json"
                if options.reuse and output.exists():
                    results[target] = json.loads(output.read_text())
                    print(f"{target}: reusing {output}", file=sys.stderr)
                    continue
                output.parent.mkdir(parents=True, exist_ok=True)
                env = {**os.environ, "PYTHONPATH": str(ROOT)}
                env.pop("BENCH_DATABASE_URL", None)
                if target == "cluster":
                    env["BENCH_DATABASE_URL"] = url
                command = [sys.executable, "-m", "benchmarks.citus", "--child", target]
                command += ["--records", str(options.records), "--tenants", str(options.tenants)]
                subprocess.run([*command, "--output", str(output)], env=env, cwd=ROOT, check=True)
                results[target] = json.loads(output.read_text())
        finally:
            cluster.destroy()
    (ROOT / "benchmarks" / "results-citus.json").write_text(json.dumps(results, indent=2))
    text = report(results["single"], results["cluster"])
    (ROOT / "benchmarks" / "REPORT-citus.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
