"""A scripted stand-in for a hosted model, so that the examples run offline.

A local HTTP server on a free port (the standard library's) answers the two APIs the
examples call, with replies written in advance, in order:

* OpenAI's Chat Completions (``POST /v1/chat/completions``), which OpenAI-compatible
  servers share: the n-th request gets ``replies[n]``;
* Anthropic's Messages (``POST /v1/messages``): the n-th request gets ``turns[n]``, a
  list of content blocks (text, or a ``tool_use`` for Claude's memory tool).

It understands nothing: it shows the examples' plumbing (memoryhub keeping the
conversation, the memory tool's files) without a model or a network. Past its script
it answers an error, as a model that is not there would. It keeps every request body it
was sent, in order, for whoever wants to look (memoryhub's own tests do).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OfflineModel(ThreadingHTTPServer):
    """Answers both APIs from one script; ``requests`` holds every body, in order."""

    def __init__(
        self, replies: Sequence[str] = (), turns: Sequence[list[dict[str, Any]]] = ()
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies = list(replies)
        self.turns = list(turns)
        self.requests: list[dict[str, Any]] = []
        self.answered = {"chat": 0, "messages": 0}
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        """Anthropic's ``base_url``."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def base_url(self) -> str:
        """OpenAI's ``base_url``."""
        return f"{self.url}/v1"

    def messages(self, request: int) -> list[tuple[str, str]]:
        """``(role, text)`` of each message of the ``request``-th request."""
        found = []
        for message in self.requests[request]["messages"]:
            content = message["content"]
            if isinstance(content, list):
                content = "".join(part.get("text", "") for part in content)
            found.append((message["role"], content))
        return found

    def tool_results(self) -> list[dict[str, Any]]:
        """Every ``tool_result`` block a Messages client sent, in order."""
        return [
            block
            for body in self.requests
            for message in body.get("messages", [])
            if message["role"] == "user" and isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests.append(body)
            if path == "/v1/chat/completions":
                return self._chat(body)
            if path == "/v1/messages":
                return self._message(body)
        return 404, {"error": {"message": f"no such path: {path}", "type": "not_found"}}

    def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        n = self.answered["chat"]
        if n >= len(self.replies):
            error = {"message": "the offline script has ended", "type": "server_error"}
            return 500, {"error": error}
        self.answered["chat"] += 1
        message = {"role": "assistant", "content": self.replies[n]}
        return 200, {
            "id": f"chatcmpl-offline-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "offline"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    def _message(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        n = self.answered["messages"]
        if n >= len(self.turns):
            error = {"type": "invalid_request_error", "message": "the offline script has ended"}
            return 400, {"type": "error", "error": error}
        self.answered["messages"] += 1
        content = self.turns[n]
        uses_tools = any(block["type"] == "tool_use" for block in content)
        return 200, {
            "id": f"msg_offline_{n}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "offline"),
            "content": content,
            "stop_reason": "tool_use" if uses_tools else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }


class _Handler(BaseHTTPRequestHandler):
    server: OfflineModel

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        status, answer = self.server.answer(self.path.split("?")[0], body)
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serving(
    *, replies: Sequence[str] = (), turns: Sequence[list[dict[str, Any]]] = ()
) -> Iterator[OfflineModel]:
    """Serve the script until the block ends; yields the server (its ``base_url`` is
    OpenAI's base URL, its ``url`` Anthropic's)."""
    model = OfflineModel(replies, turns)
    thread = threading.Thread(target=model.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield model
    finally:
        model.shutdown()
        model.server_close()
        thread.join()
