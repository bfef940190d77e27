"""``python -m benchmarks.history [--records N] [--rounds R]``: what record history costs.

Writes ``N`` keyed records, then rewrites all of them ``R`` times with new content
(upserts by key, batches of 100, as an agent's memory changes), and updates ``N / 10``
of them one by one by id (``update_record``, the API's PATCH), first with history off
(``HISTORY_VERSIONS = 0``) and on (the default 50), twice each, interleaved (off, on,
on, off), each in a fresh domain; the figures are the means of the two runs' medians. Indexing
is not run (a broker nobody consumes): the write path alone is measured. Reports the
median per batch / per call, the ratio on/off (the target: ≤ 1.10 on the update path,
1.00 on the insert path, which writes no version) and the versions' storage per record.

Writes ``benchmarks/results-history.json`` and the "History" section of ``REPORT.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.report import replace_section

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "benchmarks" / "REPORT.md"
RESULTS = ROOT / "benchmarks" / "results-history.json"
BEGIN, END = "<!-- history:begin -->", "<!-- history:end -->"
BATCH = 100


def run(label: str, keep: int, records: int, rounds: int) -> dict[str, Any]:
    from django.conf import settings
    from django.db import connection

    from memoryhub.conf import memoryhub_settings
    from memoryhub.models import MemoryRecord, RecordVersion
    from memoryhub.scope import Scope
    from memoryhub.services import write
    from tenants.models import Domain, Org

    settings.MEMORYHUB = {**settings.MEMORYHUB, "HISTORY_VERSIONS": keep}
    memoryhub_settings.reload()
    org = Org.objects.create(slug=f"bench-{label}", name=label)
    domain = Domain.objects.create(org=org, slug="support", name="Support")
    scope = Scope(org.pk, domain.pk)

    def batches(round_: int) -> list[float]:
        times = []
        for start in range(0, records, BATCH):
            items = [
                {
                    "content": f"Fact {i} about the customer, revision {round_}.",
                    "key": f"fact-{i}",
                    "namespace": f"user:{i % 50}",
                    "tags": ["bench"],
                }
                for i in range(start, min(start + BATCH, records))
            ]
            started = time.perf_counter()
            write.write(scope, items)
            times.append(time.perf_counter() - started)
        return times

    insert = batches(0)
    upsert = [t for round_ in range(1, rounds + 1) for t in batches(round_)]
    ids = list(
        MemoryRecord.unscoped.filter(domain_id=domain.pk).values_list("pk", flat=True)[
            : max(1, records // 10)
        ]
    )
    updates = []
    for n, pk in enumerate(ids):
        started = time.perf_counter()
        write.update_record(scope, pk, {"content": f"Patched fact {n}."}, partial=True)
        updates.append(time.perf_counter() - started)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {RecordVersion._meta.db_table}")
        cursor.execute("SELECT pg_total_relation_size(%s)", [RecordVersion._meta.db_table])
        (size,) = cursor.fetchone()
    versions = RecordVersion.unscoped.filter(domain_id=domain.pk).count()
    return {
        "insert_batch_ms": round(statistics.median(insert) * 1000, 2),
        "upsert_batch_ms": round(statistics.median(upsert) * 1000, 2),
        "update_call_ms": round(statistics.median(updates) * 1000, 2),
        "versions": versions,
        "versions_table_bytes": size,
    }


def section(results: dict[str, Any]) -> str:
    off, on = results["off"], results["on"]
    rows = [
        "| path | history off | history on (50 kept) | on / off |",
        "|---|---|---|---|",
    ]
    for name, label in (
        ("insert_batch_ms", f"insert, batch of {BATCH}"),
        ("upsert_batch_ms", f"upsert by key, batch of {BATCH}"),
        ("update_call_ms", "update by id (PATCH)"),
    ):
        rows.append(f"| {label} | {off[name]} ms | {on[name]} ms | {results['ratio'][name]} |")
    per_version = on["versions_table_bytes"] / max(on["versions"], 1)
    return "\n".join(
        [
            BEGIN,
            "## History (`python -m benchmarks.history`)",
            "",
            f"{results['records']} keyed records rewritten {results['rounds']} times by key"
            f" and {results['records'] // 10} updated by id; medians; {results['cpus']} CPUs,"
            f" {results['date']}; indexing not run (the write path alone).",
            "",
            *rows,
            "",
            f"Storage: {on['versions']} versions in"
            f" {on['versions_table_bytes'] / 1e6:.1f} MB ({per_version:.0f} bytes a version,"
            " indexes included). Target: ≤ 1.10 on the update paths, 1.00 on insert.",
            END,
        ]
    )


def write_report(results: dict[str, Any]) -> None:
    replace_section(REPORT, BEGIN, END, section(results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.history")
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    from benchmarks.run import setup_django

    os.environ["CELERY_BROKER_URL"] = "memory://"
    setup_django("memoryhub_bench_history")
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "records": args.records,
        "rounds": args.rounds,
    }
    # Warm up (first connections, plan caches), then off and on twice, interleaved, each
    # in a fresh domain (the table grows as it goes: order must not favour either).
    run("warmup", 0, min(args.records, 500), 1)
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for n, (label, keep) in enumerate((("off", 0), ("on", 50), ("on", 50), ("off", 0))):
        runs[label].append(run(f"{label}{n}", keep, args.records, args.rounds))
    for label, measured in runs.items():
        results[label] = {
            name: (
                round(statistics.fmean(m[name] for m in measured), 2)
                if name.endswith("_ms")
                else measured[-1][name]
            )
            for name in measured[0]
        }
    results["ratio"] = {
        name: round(results["on"][name] / results["off"][name], 3)
        for name in ("insert_batch_ms", "upsert_batch_ms", "update_call_ms")
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    write_report(results)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
