"""``python -m benchmarks.admin [--records N] [--lines M]``: the operator's admin at volume.

Measures, on a knowledge base of ``N`` records (loaded straight into the table: the admin
is what is measured, not ingest):

- the knowledge base's change page (time and size), saving it, its delete confirmation,
  the operator home and the records list, through Django's test client in this process
  (no network; the median of 5 requests);

and an import of an ``M``-line JSON Lines file:

- the request's side (store the file in chunks; it must not depend on ``M`` beyond the
  copy), and
- the worker's side in its own process (validate every line, write in batches): lines per
  second and the process's peak RSS (the target: < 300 MB at 1M lines). Indexing is the
  pipeline's, measured by the main benchmark; here records are left pending.

Writes ``benchmarks/results-admin.json`` and the "Admin" section of ``REPORT.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.report import replace_section

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "benchmarks" / "REPORT.md"
RESULTS = ROOT / "benchmarks" / "results-admin.json"
BEGIN, END = "<!-- admin:begin -->", "<!-- admin:end -->"


def load_records(knowledge_base: Any, n: int) -> float:
    from django.db import connection

    from memoryhub.models import MemoryRecord, content_hash

    started = time.perf_counter()
    batch = 20_000
    for start in range(0, n, batch):
        MemoryRecord.unscoped.bulk_create(
            MemoryRecord(
                org_id=knowledge_base.org_id,
                domain_id=knowledge_base.domain_id,
                knowledge_base=knowledge_base,
                namespace=f"user:{i % 5000}",
                content=f"Stored fact number {i} about the handbook.",
                content_hash=content_hash(f"Stored fact number {i} about the handbook."),
                status=MemoryRecord.Status.INDEXED,
            )
            for i in range(start, min(start + batch, n))
        )
        sys.stderr.write(f"\rloading records {min(start + batch, n)}/{n}")
    sys.stderr.write("\n")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) memoryhub_memoryrecord")
    return time.perf_counter() - started


def page(client: Any, url: str, repeat: int = 5) -> dict[str, Any]:
    times, size, status = [], 0, 0
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url, secure=True)
        times.append(time.perf_counter() - started)
        size, status = len(response.content), response.status_code
    return {
        "ms": round(statistics.median(times) * 1000, 1),
        "kb": round(size / 1024, 1),
        "status": status,
    }


def measure_pages(knowledge_base: Any) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.create_superuser("bench-admin", "b@example.com", "x")
    client = Client()
    client.force_login(user)
    kb_url = f"/admin/memoryhub/knowledgebase/{knowledge_base.pk}/"
    results = {
        "knowledge base page": page(client, kb_url + "change/"),
        "delete confirmation": page(client, kb_url + "delete/"),
        "operator home": page(client, "/admin/"),
        "records list (this KB)": page(
            client, f"/admin/memoryhub/memoryrecord/?knowledge_base__id__exact={knowledge_base.pk}"
        ),
    }
    started = time.perf_counter()
    saved = client.post(
        kb_url + "change/",
        {"name": knowledge_base.name, "description": "measured", "on_write": "refuse"},
        secure=True,
    )
    results["save the knowledge base"] = {
        "ms": round((time.perf_counter() - started) * 1000, 1),
        "kb": 0,
        "status": saved.status_code,
    }
    return results


WORKER = """
import sys, time, django
django.setup()
from memoryhub.services import imports
started = time.perf_counter()
job = imports.run_job(int(sys.argv[1]))
elapsed = time.perf_counter() - started
# VmHWM: this process's own peak (ru_maxrss would start from the parent's RSS at fork).
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(job.status, job.imported, round(elapsed, 2), peak)
"""


def measure_import(knowledge_base: Any, lines: int) -> dict[str, Any]:
    from memoryhub.models import ImportChunk
    from memoryhub.scope import Scope
    from memoryhub.services import imports

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as handle:
        for i in range(lines):
            handle.write(
                json.dumps(
                    {
                        "content": f"Imported passage {i}: a line of the support handbook.",
                        "key": f"passage-{i}",
                        "namespace": f"user:{i % 1000}",
                        "tags": ["import"],
                    }
                )
                + "\n"
            )
        path = Path(handle.name)
    size = path.stat().st_size
    scope = Scope(knowledge_base.org_id, knowledge_base.domain_id)
    started = time.perf_counter()
    with path.open("rb") as file:
        job = imports.create_job(
            scope, knowledge_base, file=file, format="jsonl", filename="bench.jsonl"
        )
    stored = time.perf_counter() - started
    chunks = ImportChunk.objects.filter(job=job).count()
    env = dict(os.environ)
    # A broker nobody consumes: the records stay pending (indexing is measured elsewhere).
    env["CELERY_BROKER_URL"] = "memory://"
    worker = subprocess.run(
        [sys.executable, "-c", WORKER, str(job.pk)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    status, imported, seconds, max_rss_kb = worker.stdout.split()[-4:]
    path.unlink()
    return {
        "lines": lines,
        "file_mb": round(size / 1024**2, 1),
        "chunks": chunks,
        "request_seconds": round(stored, 2),
        "status": status,
        "imported": int(imported),
        "worker_seconds": float(seconds),
        "lines_per_second": round(int(imported) / float(seconds)),
        "worker_peak_rss_mb": round(int(max_rss_kb) / 1024),
    }


def section(runs: list[dict[str, Any]]) -> str:
    """The report's "Admin" section: every scale measured, side by side."""
    runs = sorted(runs, key=lambda run: run["records"])
    names = list(runs[-1]["pages"])
    header = "| page | " + " | ".join(f"{run['records']:,} records" for run in runs) + " |"
    rows = [
        f"| {name} | "
        + " | ".join(
            f"{run['pages'][name]['ms']} ms, {run['pages'][name]['kb']} KB"
            f" ({run['pages'][name]['status']})"
            if name in run["pages"]
            else "—"
            for run in runs
        )
        + " |"
        for name in names
    ]
    imports = [
        f"- {imp['lines']:,} JSON lines ({imp['file_mb']} MB, {run['date']}): the request "
        f"stored it in {imp['chunks']} chunks in {imp['request_seconds']} s; the worker "
        f"validated and wrote it in {imp['worker_seconds']} s (**{imp['lines_per_second']:,} "
        f"lines/s**, records left pending for the indexing pipeline) with a peak RSS of "
        f"**{imp['worker_peak_rss_mb']} MB** (status {imp['status']})."
        for run in runs
        for imp in [run["import"]]
    ]
    return "\n".join(
        [
            BEGIN,
            "## Admin at volume",
            "",
            "`python -m benchmarks.admin --records N --lines M` "
            f"({runs[-1]['cpus']} CPUs). A knowledge base of N records (loaded straight "
            "into the table); pages through Django's test client in process, median of 5. "
            "Targets: the KB page < 300 ms and < 200 KB at 1M records; an import's worker "
            "< 300 MB peak RSS at 1M lines.",
            "",
            header,
            "|---|" + "---|" * len(runs),
            *rows,
            "",
            "Imports:",
            "",
            *imports,
            END,
        ]
    )


def results_path(records: int) -> Path:
    return ROOT / "benchmarks" / f"results-admin-{records}.json"


def write_report(results: dict[str, Any]) -> None:
    """Keep this run's results beside the other scales', then rewrite the section."""
    results_path(results["records"]).write_text(json.dumps(results, indent=2) + "\n")
    runs = [
        json.loads(path.read_text())
        for path in sorted((ROOT / "benchmarks").glob("results-admin-*.json"))
    ]
    replace_section(REPORT, BEGIN, END, section(runs))


def pages_again() -> int:
    """Re-measure the pages on the existing benchmark database; keep the import figures."""
    import django

    from memoryhub.contrib.embedded_postgres import server as embedded

    data_dir = Path(os.environ.get("MEMORYHUB_DATA_DIR") or ROOT / ".memoryhub") / "postgres"
    socket = embedded.socket_dir(embedded.get_server(data_dir))
    os.environ["DATABASE_URL"] = f"postgresql://postgres@/memoryhub_bench_admin?host={socket}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("SECRET_KEY", "bench-pages")
    django.setup()
    from django.contrib.auth import get_user_model

    from memoryhub.models import KnowledgeBase

    get_user_model().objects.filter(username="bench-admin").delete()
    results = json.loads(RESULTS.read_text())  # the last run's database
    results["pages"] = measure_pages(KnowledgeBase.unscoped.get(name="handbook"))
    results["pages_date"] = datetime.now(UTC).isoformat(timespec="seconds")
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    write_report(results)
    print(json.dumps(results["pages"], indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.admin")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument(
        "--pages-only",
        action="store_true",
        help="measure the pages again on the last run's database (after a change to them)",
    )
    args = parser.parse_args(argv)

    from benchmarks.run import setup_django

    # A broker nobody consumes in this process: an import is the worker's (measured in
    # its own process below), never this one's.
    os.environ["CELERY_BROKER_URL"] = "memory://"
    if args.pages_only:
        return pages_again()
    setup_django("memoryhub_bench_admin")
    from memoryhub.services import knowledge_bases
    from tenants.models import Domain, Org

    org = Org.objects.create(slug="bench", name="Bench")
    domain = Domain.objects.create(org=org, slug="support", name="Support")
    from memoryhub.scope import Scope

    scope = Scope(org.pk, domain.pk)
    handbook = knowledge_bases.ensure_knowledge_base(scope, "handbook", read_only=True)
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "records": args.records,
    }
    results["load_seconds"] = round(load_records(handbook, args.records), 1)
    results["pages"] = measure_pages(handbook)
    imported_into = knowledge_bases.ensure_knowledge_base(scope, "imports")
    results["import"] = measure_import(imported_into, args.lines)
    results["peak_rss_mb_this_process"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    write_report(results)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
