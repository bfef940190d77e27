"""``python -m benchmarks.archives [--records N] [--subject M]``: what moving memory costs.

Fills one org with ``N`` records (one domain, 100 namespaces, a tenth of them with an
earlier state; written in bulk, as a large org's table holds them) and one data subject
with ``M`` more, then measures, each phase in a process of its own (so its peak memory is
its own):

* ``export``: ``export_archive`` of the org to a gzip-compressed archive, without vectors;
* ``dry-run``: ``import_archive(..., dry_run=True)`` of it into a new org slug (every line
  checked, every record's fate decided, nothing written);
* ``import``: the same import for real (records, earlier states; indexing is sent to a
  broker nobody consumes: the import's own path alone);
* ``again``: the same import once more (everything ``unchanged``);
* ``access``: the subject's access export (``access_export``), ``M`` records.

Reports records a second and peak resident memory per phase. Writes
``benchmarks/results-archives.json`` and the "Archives" section of ``REPORT.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.report import replace_section

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "benchmarks" / "REPORT.md"
RESULTS = ROOT / "benchmarks" / "results-archives.json"
BEGIN, END = "<!-- archives:begin -->", "<!-- archives:end -->"
DATABASE = "memoryhub_bench_archives"
ARCHIVE = ROOT / ".memoryhub" / "bench-archive.jsonl.gz"
PHASES = ("export", "dry-run", "import", "again", "access")


def fill(records: int, subject: int) -> None:
    """The org: ``records`` records and ``subject`` more in ``user:subject``."""
    from django.db import connection

    from memoryhub.models import MemoryRecord, RecordVersion, content_hash
    from memoryhub.scope import Scope
    from memoryhub.services import knowledge_bases
    from tenants.models import Domain, Org

    org = Org.objects.create(slug="bench", name="Bench")
    domain = Domain.objects.create(org=org, slug="support", name="Support")
    kb = knowledge_bases.ensure_knowledge_base(Scope.for_domain(domain), "memory")
    batch = 10_000
    for start in range(0, records + subject, batch):
        rows = []
        for n in range(start, min(start + batch, records + subject)):
            text = f"Customer note {n}: prefers email, plan tier {n % 7}, region {n % 13}."
            rows.append(
                MemoryRecord(
                    org_id=org.pk,
                    domain_id=domain.pk,
                    knowledge_base=kb,
                    namespace="user:subject" if n >= records else f"user:{n % 100}",
                    key=f"note-{n}" if n % 3 == 0 else None,
                    content=text,
                    content_hash=content_hash(text),
                    metadata={"n": n, "team": "support"},
                    tags=["bench"],
                    status=MemoryRecord.Status.INDEXED,
                    version=2 if n % 10 == 0 else 1,
                )
            )
        MemoryRecord.unscoped.bulk_create(rows)
        RecordVersion.unscoped.bulk_create(
            RecordVersion(
                org_id=org.pk,
                domain_id=domain.pk,
                record_id=row.pk,
                version=1,
                content=row.content + " (before)",
                kind=row.kind,
                tags=row.tags,
                metadata=row.metadata,
                changed_at=row.created_at,
                cause="create",
            )
            for row in rows
            if row.version == 2
        )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def phase(name: str, records: int) -> dict[str, Any]:
    """One phase, timed, in this process."""
    from memoryhub.services.archives import export_archive, import_archive
    from memoryhub.services.subjects import access_export
    from tenants.models import Domain, Org

    started = time.perf_counter()
    result: dict[str, Any] = {}
    if name == "export":
        manifest = export_archive(Org.objects.get(slug="bench"), ARCHIVE)
        result = {"lines": sum(manifest["counts"].values()), "bytes": ARCHIVE.stat().st_size}
    elif name in ("dry-run", "import", "again"):
        report = import_archive(ARCHIVE, org="bench-copy", dry_run=name == "dry-run")
        result = {"created": report.created["record"], "skipped": report.skipped}
    else:
        domains = list(Domain.objects.filter(org__slug="bench"))
        size = sum(len(piece) for piece in access_export(domains, "user:subject"))
        result = {"bytes": size}
    seconds = time.perf_counter() - started
    return {
        **result,
        "seconds": round(seconds, 2),
        "records_per_second": round(records / seconds),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def section(results: dict[str, Any]) -> str:
    rows = ["| phase | records | seconds | records/s | peak memory |", "|---|---|---|---|---|"]
    for name in PHASES:
        got = results["phases"][name]
        count = results["subject"] if name == "access" else results["records"] + results["subject"]
        rows.append(
            f"| {name} | {count:,} | {got['seconds']} | {got['records_per_second']:,} |"
            f" {got['peak_rss_mb']} MB |"
        )
    export = results["phases"]["export"]
    return "\n".join(
        [
            BEGIN,
            "## Archives (`python -m benchmarks.archives`)",
            "",
            f"An org of {results['records']:,} records (a tenth with an earlier state) and a"
            f" data subject of {results['subject']:,} more; each phase in its own process"
            f" (peak memory is the process's, Django included); {results['cpus']} CPUs,"
            f" {results['date']}. The archive (gzip, no vectors): {export['bytes'] / 1e6:.0f} MB."
            " The import's indexing goes to a broker nobody consumes: its own path alone.",
            "",
            *rows,
            END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.archives")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--subject", type=int, default=10_000)
    parser.add_argument("--phase", choices=PHASES, default=None)
    args = parser.parse_args(argv)

    from benchmarks.run import setup_django

    os.environ["CELERY_BROKER_URL"] = "memory://"
    if args.phase is not None:
        setup_django(DATABASE, fresh=False)
        count = args.subject if args.phase == "access" else args.records + args.subject
        print(json.dumps(phase(args.phase, count)))
        return 0
    setup_django(DATABASE)
    started = time.perf_counter()
    fill(args.records, args.subject)
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "records": args.records,
        "subject": args.subject,
        "fill_seconds": round(time.perf_counter() - started, 1),
        "phases": {},
    }
    for name in PHASES:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.archives",
                "--phase",
                name,
                "--records",
                str(args.records),
                "--subject",
                str(args.subject),
            ],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout
        results["phases"][name] = json.loads(out.strip().splitlines()[-1])
        print(name, results["phases"][name], flush=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    replace_section(REPORT, BEGIN, END, section(results))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
