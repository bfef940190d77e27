"""Any OpenAI-compatible ``/v1/embeddings`` endpoint: OpenAI, Ollama, vLLM, LiteLLM.

Requests are batched, time-limited, and retried with exponential backoff on 429 and
5xx answers and on connection errors (``Retry-After`` is honoured). Anything else,
or running out of retries, raises :class:`EmbedderError`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import httpx

from ..openai_compatible import RETRYABLE_STATUS, BearerClientOwner, retry_after
from .base import EmbedderError


class OpenAICompatibleEmbedder(BearerClientOwner):
    def __init__(  # noqa: PLR0913
        self,
        *,
        model: str,
        dimensions: int,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        batch_size: int = 64,
        timeout: float = 30.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        send_dimensions: bool = False,
        name: str | None = None,
    ) -> None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ValueError("dimensions must be a positive integer")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.model = model
        self.dimensions = dimensions
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key if api_key is not None else os.environ.get(api_key_env, "")
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.send_dimensions = send_dimensions
        self.name = name or f"openai-{model}-{dimensions}"
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:  # never show the API key
        return f"OpenAICompatibleEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    def _post(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.send_dimensions:
            body["dimensions"] = self.dimensions
        last_error = ""
        for attempt in range(self.max_retries + 1):
            try:
                response = self.client.post("/embeddings", json=body)
            except httpx.HTTPError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                delay = self.backoff * 2**attempt
            else:
                if response.status_code == 200:
                    return self._parse(response, len(texts))
                last_error = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code not in RETRYABLE_STATUS:
                    raise EmbedderError(last_error)
                delay = retry_after(response) or self.backoff * 2**attempt
            if attempt < self.max_retries:
                time.sleep(min(delay, 30.0))
        raise EmbedderError(f"gave up after {self.max_retries + 1} attempts: {last_error}")

    def _parse(self, response: httpx.Response, expected: int) -> list[list[float]]:
        try:
            data = sorted(response.json()["data"], key=lambda row: row["index"])
            vectors = [[float(x) for x in row["embedding"]] for row in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(f"malformed embeddings response: {exc}") from exc
        if len(vectors) != expected:
            raise EmbedderError(f"asked for {expected} embeddings, got {len(vectors)}")
        for vector in vectors:
            if len(vector) != self.dimensions:
                raise EmbedderError(
                    f"model returned {len(vector)} dimensions, configured {self.dimensions}"
                )
        return vectors

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self._post(list(texts[start : start + self.batch_size])))
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._post([text])[0]
