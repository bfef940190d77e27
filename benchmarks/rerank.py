"""``python -m benchmarks.rerank [--records N] [--queries Q]``: what reranking adds to a
query.

``N`` passages (the standard library's docstrings, ``benchmarks.corpus``) are written to
one domain and indexed; then ``Q`` known-item queries (hybrid, k=5) are asked through the
query service in this process, the cache off, each twice in turn: without reranking
(``rerank=False``) and with the site's reranker, an ``HttpReranker`` against a local
scripted server that scores every document at once (a hash of it), at
``RERANK_CANDIDATES`` 20, 50 and 100. The difference is what reranking costs memoryhub
itself: the deeper candidate fetch, building the items, the request (the candidates'
content), parsing and checking the answer. A real cross-encoder's inference comes on
top. Last, a few queries against a reranker that refuses connections measure the
degraded path (the default retries, then the fused order).

Writes ``benchmarks/results-rerank.json`` and the "Reranking" section of ``REPORT.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import threading
import time
import zlib
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.report import replace_section
from memoryhub.rerankers import HttpReranker

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "benchmarks" / "REPORT.md"
RESULTS = ROOT / "benchmarks" / "results-rerank.json"
BEGIN, END = "<!-- rerank:begin -->", "<!-- rerank:end -->"
CANDIDATES = (20, 50, 100)
K = 5


class _Scripted(BaseHTTPRequestHandler):
    """A Cohere-shaped ``/v1/rerank`` that scores each document by a hash of it."""

    protocol_version = "HTTP/1.1"  # keep-alive, as a real server would
    # One segment per answer, sent at once: unbuffered, the status line and headers go
    # out before the body, and Nagle's algorithm then holds the body until the client's
    # delayed ACK, 40 ms later (real servers, uvicorn's or TEI's, do not do this).
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024
    #: Per request: its body's size and how many documents it carried.
    requests: list[tuple[int, int]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        body = json.loads(raw)
        _Scripted.requests.append((len(raw), len(body["documents"])))
        scored = sorted(
            (
                (index, zlib.crc32(text.encode()) / 2**32)
                for index, text in enumerate(body["documents"])
            ),
            key=lambda pair: -pair[1],
        )[: body["top_n"]]
        results = [{"index": index, "relevance_score": score} for index, score in scored]
        payload = json.dumps({"results": results}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class TimedReranker(HttpReranker):
    """``HttpReranker`` keeping the time of each ``rerank`` call in ``calls`` (the
    request, the scripted server's answer, parsing and the check)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.calls: list[float] = []

    def rerank(self, query: str, documents: Any, *, top_n: int) -> list[tuple[int, float]]:
        started = time.perf_counter()
        try:
            return super().rerank(query, documents, top_n=top_n)
        finally:
            self.calls.append(time.perf_counter() - started)


def _ms(values: list[float], quantile: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1000, 2)


def populate(records: int) -> Any:
    from benchmarks.corpus import passages
    from memoryhub.scope import Scope
    from memoryhub.services import indexing, write
    from tenants.models import Domain, Org

    org = Org.objects.create(slug="bench", name="Bench")
    domain = Domain.objects.create(org=org, slug="support", name="Support")
    scope = Scope(org.pk, domain.pk)
    texts = passages(records)
    for start in range(0, len(texts), 500):
        result = write.write(scope, [{"content": text} for text in texts[start : start + 500]])
        indexing.index_records(result.record_ids)
    return scope, texts


def configure(candidates: int, base_url: str, reranker: str) -> None:
    from django.conf import settings

    from memoryhub.conf import memoryhub_settings

    settings.MEMORYHUB = {
        **settings.MEMORYHUB,
        "CACHE_TTL": 0,
        "RERANKER": reranker,
        "RERANKER_OPTIONS": {"base_url": base_url, "model": "scripted"},
        "RERANK_CANDIDATES": candidates,
    }
    memoryhub_settings.reload()  # a new reranker (and client) for each configuration


def measure(scope: Any, questions: list[str]) -> dict[str, Any]:
    """Each question without and with reranking, in alternating order."""
    from memoryhub.conf import memoryhub_settings
    from memoryhub.services import query

    off: list[float] = []
    on: list[float] = []
    calls = memoryhub_settings.reranker().calls  # type: ignore[union-attr]
    calls.clear()
    _Scripted.requests.clear()
    for n, question in enumerate(questions):
        for rerank in (False, True) if n % 2 == 0 else (True, False):
            started = time.perf_counter()
            result = query.query(scope, query=question, k=K, rerank=rerank)
            (on if rerank else off).append(time.perf_counter() - started)
            assert result.reranked is rerank, "the scripted reranker failed"
    return {
        "off_p50_ms": _ms(off, 0.5),
        "off_p95_ms": _ms(off, 0.95),
        "on_p50_ms": _ms(on, 0.5),
        "on_p95_ms": _ms(on, 0.95),
        "added_p50_ms": round(_ms(on, 0.5) - _ms(off, 0.5), 2),
        "rerank_call_p50_ms": _ms(calls, 0.5),
        "rerank_call_p95_ms": _ms(calls, 0.95),
        "documents_mean": round(statistics.fmean(n for _, n in _Scripted.requests), 1),
        "request_kb_mean": round(statistics.fmean(b for b, _ in _Scripted.requests) / 1024, 1),
    }


def degraded(scope: Any, questions: list[str]) -> dict[str, Any]:
    """Queries against a reranker that refuses connections (the default retries)."""
    from memoryhub.services import query

    with ThreadingHTTPServer(("127.0.0.1", 0), _Scripted) as closed:
        url = f"http://127.0.0.1:{closed.server_address[1]}/v1"
    configure(50, url, "memoryhub.rerankers.HttpReranker")
    times = []
    for question in questions:
        started = time.perf_counter()
        result = query.query(scope, query=question, k=K)
        times.append(time.perf_counter() - started)
        assert not result.reranked
    return {"queries": len(times), "p50_ms": _ms(times, 0.5)}


def section(results: dict[str, Any]) -> str:
    rows = [
        "| RERANK_CANDIDATES (documents sent) | query p50 / p95 without | with reranking"
        " | added p50 | rerank() call p50 / p95 | request body |",
        "|---|---|---|---|---|---|",
    ]
    for candidates, row in results["candidates"].items():
        rows.append(
            f"| {candidates} ({row['documents_mean']:g}) | {row['off_p50_ms']} / {row['off_p95_ms']} ms |"
            f" {row['on_p50_ms']} / {row['on_p95_ms']} ms | +{row['added_p50_ms']} ms |"
            f" {row['rerank_call_p50_ms']} / {row['rerank_call_p95_ms']} ms |"
            f" {row['request_kb_mean']} KB |"
        )
    down = results["degraded"]
    return "\n".join(
        [
            BEGIN,
            "## Reranking (`python -m benchmarks.rerank`)",
            "",
            f"{results['records']:,} passages in one domain, {results['queries']} known-item"
            f" queries (hybrid, k={K}) through the query service, the cache off, each asked"
            " without and with reranking in turn; the reranker is `HttpReranker` against a"
            " local scripted `/v1/rerank` that answers at once (a thread of the same"
            " process, so its JSON work is counted in the call), so the figures are"
            " memoryhub's cost (the deeper candidate fetch, the items, the request and the"
            " check of the answer), not a model's: a cross-encoder's inference comes on top."
            f" {results['cpus']} CPUs shared with other work, {results['date']}: a"
            " difference of a few milliseconds is within this machine's noise.",
            "",
            *rows,
            "",
            f"A reranker that refuses connections: {down['p50_ms']} ms a query (p50 of"
            f" {down['queries']}) with the default retries (3 attempts, 0.2 s then 0.4 s"
            " apart), then the fused order. Shorten `max_attempts`/`deadline` in"
            " `RERANKER_OPTIONS` where a slow answer is worse than an unreranked one.",
            END,
        ]
    )


def write_report(results: dict[str, Any]) -> None:
    replace_section(REPORT, BEGIN, END, section(results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rerank")
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args(argv)

    from benchmarks.run import setup_django

    os.environ["CELERY_BROKER_URL"] = "memory://"  # indexing is called here, in process
    setup_django("memoryhub_bench_rerank")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    from benchmarks.corpus import known_item_query

    scope, texts = populate(args.records)
    rng = random.Random(5)
    questions = [known_item_query(rng.choice(texts), rng) for _ in range(args.queries)]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "records": len(texts),
        "queries": len(questions),
        "k": K,
        "candidates": {},
    }
    for candidates in CANDIDATES:
        configure(candidates, url, "benchmarks.rerank.TimedReranker")
        measure(scope, questions[:20])  # warm up: the new client's connection, plans
        results["candidates"][str(candidates)] = measure(scope, questions)
    server.shutdown()
    results["degraded"] = degraded(scope, questions[:5])
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    write_report(results)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
