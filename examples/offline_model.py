"""A scripted stand-in for a hosted model, so that the examples run offline.

A local HTTP server on a free port (the standard library's) answers the two APIs the
examples call, with replies written in advance, in order:

* OpenAI's Chat Completions (``POST /v1/chat/completions``), which OpenAI-compatible
  servers share: the n-th request gets ``replies[n]``;
* Anthropic's Messages (``POST /v1/messages``): the n-th request gets ``turns[n]``, a
  list of content blocks (text, or a ``tool_use`` for Claude's memory tool).

It understands nothing: it shows the examples' plumbing (memoryhub keeping the
conversation, the memory tool's files) without a model or a network. Past its script
it answers an error, as a model that is not there would.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Script:
    replies: list[str] = field(default_factory=list)
    turns: list[list[dict[str, Any]]] = field(default_factory=list)
    answered: dict[str, int] = field(default_factory=lambda: {"chat": 0, "messages": 0})


def _chat(script: Script, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    n = script.answered["chat"]
    if n >= len(script.replies):
        return 500, {"error": {"message": "the offline script has ended", "type": "server_error"}}
    script.answered["chat"] += 1
    message = {"role": "assistant", "content": script.replies[n]}
    return 200, {
        "id": f"chatcmpl-offline-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "offline"),
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _messages(script: Script, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    n = script.answered["messages"]
    if n >= len(script.turns):
        error = {"type": "invalid_request_error", "message": "the offline script has ended"}
        return 400, {"type": "error", "error": error}
    script.answered["messages"] += 1
    content = script.turns[n]
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


@contextmanager
def serving(
    *, replies: list[str] | None = None, turns: list[list[dict[str, Any]]] | None = None
) -> Iterator[str]:
    """Serve the script; yields the server's URL (``…/v1`` is OpenAI's base URL, the URL
    itself Anthropic's)."""
    script = Script(list(replies or []), list(turns or []))
    routes = {"/v1/chat/completions": _chat, "/v1/messages": _messages}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            route = routes.get(self.path.split("?")[0])
            status, answer = route(script, body) if route else (404, {"error": "no such path"})
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
