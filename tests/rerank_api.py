"""A real local HTTP server standing in for a ``/rerank`` endpoint (the Cohere shape at
``/v1/rerank``, text-embeddings-inference's at ``/rerank``), with scripted scores,
statuses and answers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeRerankAPI(ThreadingHTTPServer):
    """Scores each document by ``scores[document]`` (``default`` when absent).

    ``script`` lists statuses to answer before the first 200 (a 429 carries
    ``Retry-After: retry_after``); ``answer``, when set, replaces the body of a 200
    (given the request body and the answer it would have sent); ``delay`` sleeps before
    answering. ``requests`` keeps every request body, ``headers_seen`` their headers.
    """

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), RerankHandler)
        self.scores: dict[str, float] = {}
        self.default = 0.0
        self.script: list[int] = []
        self.retry_after = "0"
        self.answer: Callable[[dict[str, Any], Any], Any] | None = None
        self.delay = 0.0
        self.requests: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        """The base URL of the Cohere-shaped endpoint (``{url}/rerank``)."""
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    @property
    def root(self) -> str:
        """The base URL of the TEI-shaped endpoint (``{root}/rerank``)."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def documents_sent(self) -> list[str]:
        return [
            doc for body in self.requests for doc in body.get("documents", body.get("texts", []))
        ]


class RerankHandler(BaseHTTPRequestHandler):
    server: FakeRerankAPI

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        self.server.headers_seen.append(dict(self.headers))
        if self.server.delay:
            time.sleep(self.server.delay)
        status = self.server.script.pop(0) if self.server.script else 200
        if self.path not in ("/v1/rerank", "/rerank"):
            status = 404
        if status != 200:
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", self.server.retry_after)
            self.send_header("Content-Length", "17")
            self.end_headers()
            self.wfile.write(b'{"error": "nope"}')
            return
        payload = self._scored(body)
        if self.server.answer is not None:
            payload = self.server.answer(body, payload)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _scored(self, body: dict[str, Any]) -> Any:
        tei = self.path == "/rerank"
        documents = body["texts"] if tei else body["documents"]
        scored = sorted(
            (
                (index, self.server.scores.get(document, self.server.default))
                for index, document in enumerate(documents)
            ),
            key=lambda pair: -pair[1],
        )
        if tei:
            return [{"index": index, "score": score} for index, score in scored]
        top = scored[: body.get("top_n") or len(scored)]
        results = [{"index": index, "relevance_score": score} for index, score in top]
        return {"id": "rerank-1", "results": results, "meta": {}}


@contextmanager
def serving() -> Iterator[FakeRerankAPI]:
    server = FakeRerankAPI()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
