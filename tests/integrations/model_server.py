"""A real local HTTP server standing in for an OpenAI-compatible model: it answers
``POST /v1/chat/completions`` with scripted replies, in order, and keeps every request
body it was sent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedModel(ThreadingHTTPServer):
    """Answers the n-th chat completion with ``replies[n]``; past the script, a 500."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), ChatCompletionsHandler)
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def messages(self, request: int) -> list[tuple[str, str]]:
        """``(role, text)`` of each message of the ``request``-th request."""
        found = []
        for message in self.requests[request]["messages"]:
            content = message["content"]
            if isinstance(content, list):
                content = "".join(part.get("text", "") for part in content)
            found.append((message["role"], content))
        return found


class ChatCompletionsHandler(BaseHTTPRequestHandler):
    server: ScriptedModel

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        answered = len(self.server.requests) - 1
        if self.path != "/v1/chat/completions" or answered >= len(self.server.replies):
            self._send(500, {"error": {"message": "not in the script", "type": "server_error"}})
            return
        message = {"role": "assistant", "content": self.server.replies[answered]}
        self._send(
            200,
            {
                "id": f"chatcmpl-{answered}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def scripted_model(replies: list[str]) -> Iterator[ScriptedModel]:
    server = ScriptedModel(replies)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
