"""``python -m benchmarks.consolidation [--namespaces N] [--turns T]``: consolidation's
throughput and the HTTP extractor's fixed cost per batch.

``N`` namespaces of ``T`` episodic turns each (a conversation's worth: attribute
statements, repeats and chit-chat) are written with ``consolidate`` and indexed; then
each namespace is consolidated as a worker does (``services.consolidation.consolidate``,
in this process), first with the built-in extractor, then, on a second set of turns,
with the OpenAI-compatible extractor against a local scripted chat-completions server
that answers at once with no operations: the difference per batch is the HTTP
extractor's fixed overhead (prompt, request, validation), not a model's latency.

Writes ``benchmarks/results-consolidation.json`` and the "Consolidation" section of
``REPORT.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.report import replace_section

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "benchmarks" / "REPORT.md"
RESULTS = ROOT / "benchmarks" / "results-consolidation.json"
BEGIN, END = "<!-- consolidation:begin -->", "<!-- consolidation:end -->"

ATTRIBUTES = ["favourite colour", "home city", "job title", "preferred language", "team"]
VALUES = ["blue", "green", "Berlin", "Lisbon", "engineer", "designer", "German", "Portuguese"]
CHAT = [
    "Hi there, how are you today?",
    "Can you remind me about my meeting tomorrow?",
    "Thanks, that is all for now.",
    "I had pasta for lunch today.",
    "The support team answered my ticket quickly.",
    "Please summarise the last email from finance.",
]


def turns(rng: random.Random, n: int, salt: int) -> list[str]:
    out = []
    for i in range(n):
        roll = rng.random()
        if roll < 0.3:
            out.append(f"My {rng.choice(ATTRIBUTES)} is {rng.choice(VALUES)}.")
        elif roll < 0.5:
            out.append("The support team answered my ticket quickly.")
        else:
            out.append(f"{rng.choice(CHAT)} ({salt}-{i})")
    return out


class _Chat(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        message = {"role": "assistant", "content": json.dumps({"operations": []})}
        payload = json.dumps({"choices": [{"index": 0, "message": message}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def populate(scope: Any, namespaces: int, per: int, prefix: str, rng: random.Random) -> None:
    from memoryhub.models import MemoryRecord
    from memoryhub.services import indexing, write

    for n in range(namespaces):
        items = [
            {"content": text, "kind": "episodic", "namespace": f"{prefix}:{n}"}
            for text in turns(rng, per, n)
        ]
        result = write.write(scope, items, consolidate=True)
        indexing.index_records(result.record_ids)
    assert not MemoryRecord.unscoped.filter(status="pending", kind="episodic").exists()


class Timed:
    """The configured extractor, with the time of each ``extract`` call kept."""

    def __init__(self, inner: Any, calls: list[float]) -> None:
        self.inner, self.calls = inner, calls
        self.name, self.model = inner.name, getattr(inner, "model", "")

    def extract(self, episodes: Any, facts: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.inner.extract(episodes, facts)
        finally:
            self.calls.append(time.perf_counter() - started)


def consolidate_all(knowledge_base_id: int, prefix: str, namespaces: int) -> dict[str, Any]:
    from memoryhub.services import consolidation

    calls: list[float] = []
    configured = consolidation.configured_extractor
    consolidation.configured_extractor = lambda: Timed(configured(), calls)  # type: ignore[assignment]
    times, episodes, operations = [], 0, 0
    for n in range(namespaces):
        started = time.perf_counter()
        counts = consolidation.consolidate(knowledge_base_id, f"{prefix}:{n}")
        times.append(time.perf_counter() - started)
        assert counts is not None
        episodes += counts["episodes"]
        operations += sum(counts.get(op, 0) for op in ("add", "update", "delete", "none"))
    consolidation.configured_extractor = configured  # type: ignore[assignment]
    total = sum(times)
    return {
        "extract_p50_ms": round(statistics.median(calls) * 1000, 2),
        "turns": episodes,
        "operations": operations,
        "seconds": round(total, 2),
        "turns_per_second": round(episodes / total, 1),
        "run_p50_ms": round(statistics.median(times) * 1000, 1),
    }


def section(results: dict[str, Any]) -> str:
    builtin, http = results["builtin"], results["http"]
    return "\n".join(
        [
            BEGIN,
            "## Consolidation (`python -m benchmarks.consolidation`)",
            "",
            f"{results['namespaces']} namespaces × {results['turns']} episodic turns"
            f" (batches of {results['batch']}), consolidated as a worker does, in one"
            f" process; {results['cpus']} CPUs, {results['date']}.",
            "",
            "| extractor | turns | operations applied | turns/s | run p50 (a namespace)"
            " | extract() p50 (a batch) |",
            "|---|---|---|---|---|---|",
            f"| built-in | {builtin['turns']} | {builtin['operations']} |"
            f" {builtin['turns_per_second']} | {builtin['run_p50_ms']} ms |"
            f" {builtin['extract_p50_ms']} ms |",
            f"| OpenAI-compatible, local scripted server (answers no operations) |"
            f" {http['turns']} | {http['operations']} | {http['turns_per_second']} |"
            f" {http['run_p50_ms']} ms | {http['extract_p50_ms']} ms |",
            "",
            f"HTTP extractor's fixed overhead: {results['http_overhead_ms_per_batch']} ms a"
            " batch over the built-in's extract() (prompt, request, parsing, validation; a"
            " real model's latency comes on top). A run's time is mostly the operations it"
            " applies (each a write through the write path) and the similar-facts query.",
            END,
        ]
    )


def write_report(results: dict[str, Any]) -> None:
    replace_section(REPORT, BEGIN, END, section(results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.consolidation")
    parser.add_argument("--namespaces", type=int, default=40)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args(argv)

    from benchmarks.run import setup_django

    os.environ["CELERY_BROKER_URL"] = "memory://"  # nothing runs behind our back
    setup_django("memoryhub_bench_consolidation")
    from memoryhub.conf import memoryhub_settings
    from memoryhub.scope import Scope
    from memoryhub.services import knowledge_bases
    from tenants.models import Domain, Org

    org = Org.objects.create(slug="bench", name="Bench")
    domain = Domain.objects.create(org=org, slug="support", name="Support")
    scope = Scope(org.pk, domain.pk)
    knowledge_base = knowledge_bases.ensure_knowledge_base(scope, "memory")
    rng = random.Random(11)
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "namespaces": args.namespaces,
        "turns": args.turns,
        "batch": memoryhub_settings.CONSOLIDATION_BATCH,
    }
    populate(scope, args.namespaces, args.turns, "builtin", rng)
    results["builtin"] = consolidate_all(knowledge_base.pk, "builtin", args.namespaces)

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["MEMORYHUB_LLM_BASE_URL"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
    os.environ["MEMORYHUB_LLM_MODEL"] = "scripted"
    populate(scope, args.namespaces, args.turns, "http", rng)
    results["http"] = consolidate_all(knowledge_base.pk, "http", args.namespaces)
    server.shutdown()
    batches = max(1, -(-args.turns // memoryhub_settings.CONSOLIDATION_BATCH)) * args.namespaces
    del batches
    results["http_overhead_ms_per_batch"] = round(
        results["http"]["extract_p50_ms"] - results["builtin"]["extract_p50_ms"], 2
    )
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    write_report(results)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
