"""What memoryhub's clients of OpenAI-compatible endpoints share (the embedder and the
consolidation extractor): one ``httpx.Client`` with JSON and, when there is a key, a
bearer token."""

from __future__ import annotations

import httpx

__all__ = ["bearer_client"]


def bearer_client(
    base_url: str,
    api_key: str | None,
    *,
    timeout: float,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return httpx.Client(base_url=base_url, headers=headers, timeout=timeout, transport=transport)
