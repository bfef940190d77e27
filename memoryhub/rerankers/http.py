"""A ``/rerank`` endpoint over HTTP: the Cohere shape (Cohere, Jina, vLLM, LiteLLM) or
Hugging Face text-embeddings-inference's.

* ``api="cohere"`` (default) posts ``{"model", "query", "documents", "top_n"}`` to
  ``{base_url}/rerank`` and reads ``{"results": [{"index", "relevance_score"}]}``;
  ``base_url`` is e.g. ``http://vllm:8000/v1``, ``https://api.jina.ai/v1`` or
  ``https://api.cohere.com/v2``.
* ``api="tei"`` posts ``{"query", "texts"}`` to ``{base_url}/rerank`` and reads
  ``[{"index", "score"}]`` (every text is scored; the best ``top_n`` are kept).

Requests follow the retry policy of memoryhub's other OpenAI-compatible clients
(:mod:`memoryhub.openai_compatible`): retried with exponential backoff on 429, 408 and
5xx answers, timeouts and connection errors, ``Retry-After`` honoured. Since a query
waits for the answer, the defaults are short, and ``deadline`` bounds the whole call:
no request starts, and no sleep is begun, that would end after it. A malformed answer is
not retried (a model scores the same documents the same way twice).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import httpx

from ..openai_compatible import RETRYABLE_STATUS, BearerClientOwner, retry_after
from .base import Outcome, RerankerError, checked_ranking

__all__ = ["APIS", "HttpReranker"]

APIS = ("cohere", "tei")


class HttpReranker(BearerClientOwner):
    """Reranks with a remote cross-encoder; see the module docstring.

    One ``httpx.Client`` per instance, shared by every thread that calls
    :meth:`rerank` (the query service's and, through
    ``memoryhub.sources.ItemReranker``, an event loop's worker threads).
    ``extra_body`` is merged into every request (``{"return_documents": False}`` spares
    Jina echoing the documents back; ``{"truncate": True}`` lets TEI cut long texts).
    """

    def __init__(  # noqa: PLR0913
        self,
        *,
        base_url: str,
        model: str = "",
        api: Literal["cohere", "tei"] = "cohere",
        path: str = "/rerank",
        api_key: str | None = None,
        api_key_env: str = "MEMORYHUB_RERANK_API_KEY",
        timeout: float = 5.0,
        max_attempts: int = 3,
        backoff: float = 0.2,
        max_sleep: float = 1.0,
        deadline: float = 10.0,
        extra_body: Mapping[str, Any] | None = None,
        name: str | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, not {api!r}")
        if not base_url:
            raise ValueError("base_url is required")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if timeout <= 0 or deadline <= 0:
            raise ValueError("timeout and deadline must be positive")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api = api
        self.path = path
        self._api_key = api_key if api_key is not None else os.environ.get(api_key_env, "")
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_sleep = max_sleep
        self.deadline = deadline
        self.extra_body = dict(extra_body or {})
        self.name = name or f"{api}-{model or 'default'}"
        self.transport = transport
        self.sleep = sleep
        self.clock = clock
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:  # never show the API key
        return f"HttpReranker(api={self.api!r}, model={self.model!r}, base_url={self.base_url!r})"

    def rerank(
        self, query: str, documents: Sequence[str], *, top_n: int
    ) -> list[tuple[int, float]]:
        """The best ``top_n`` of ``documents`` as ``(index, score)``, best first."""
        if top_n < 1:
            raise ValueError("top_n must be at least 1")
        if not documents:
            return []
        payload = self._post(self._body(query, list(documents), top_n))
        return checked_ranking(self._pairs(payload), len(documents), top_n)

    def _body(self, query: str, documents: list[str], top_n: int) -> dict[str, Any]:
        if self.api == "tei":
            return {"query": query, "texts": documents, **self.extra_body}
        body: dict[str, Any] = {"query": query, "documents": documents, "top_n": top_n}
        if self.model:
            body["model"] = self.model
        return {**body, **self.extra_body}

    def _pairs(self, payload: Any) -> list[tuple[Any, Any]]:
        """The ``(index, score)`` pairs of an answer, unchecked; ``RerankerError`` when
        the answer does not have the API's shape."""
        results = payload.get("results") if isinstance(payload, dict) else None
        if self.api == "tei":
            results = payload
        if not isinstance(results, list):
            expected = "a list" if self.api == "tei" else 'an object with a "results" list'
            raise RerankerError(f"the answer is not {expected}")
        pairs: list[tuple[Any, Any]] = []
        for position, result in enumerate(results):
            if not isinstance(result, dict) or "index" not in result:
                raise RerankerError(f"result {position} has no index")
            score = result.get("relevance_score", result.get("score"))
            pairs.append((result["index"], score))
        return pairs

    def _post(self, body: dict[str, Any]) -> Any:
        """The JSON of the first 200 answer, retried as the module docstring says."""
        started = self.clock()
        outcome: Outcome = "unavailable"
        status: int | None = None
        detail = ""
        attempts = 0
        for attempt in range(1, self.max_attempts + 1):
            remaining = self.deadline - (self.clock() - started)
            if remaining <= 0:  # a sleep ended later than asked: no time is left
                outcome, detail = "timeout", f"{detail}; the deadline passed"
                break
            attempts = attempt
            wait: float | None = None
            try:
                response = self.client.post(
                    self.path, json=body, timeout=min(self.timeout, remaining)
                )
            except httpx.TimeoutException as exc:
                outcome, status, detail = "timeout", None, type(exc).__name__
            except httpx.HTTPError as exc:
                outcome, status, detail = "unavailable", None, type(exc).__name__
            else:
                status = response.status_code
                if status == 200:
                    try:
                        return response.json()
                    except ValueError:
                        raise RerankerError(
                            "the answer is not JSON", status=200, attempts=attempt
                        ) from None
                detail = f"HTTP {status}"  # never the body: it may echo a document
                if status not in RETRYABLE_STATUS:
                    raise RerankerError(detail, outcome="refused", status=status, attempts=attempt)
                outcome = "rate_limited" if status == 429 else "unavailable"
                wait = retry_after(response)
            if attempt == self.max_attempts:
                break
            delay = self.backoff * 2 ** (attempt - 1) if wait is None else wait
            elapsed = self.clock() - started
            if delay > self.max_sleep or elapsed + delay >= self.deadline:
                detail += f"; a retry would wait {delay:g}s"
                break
            self.sleep(delay)
        raise RerankerError(
            f"gave up after {attempts} attempt(s): {detail}",
            outcome=outcome,
            status=status,
            attempts=attempts,
        )
