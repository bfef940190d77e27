"""What memoryhub's clients of OpenAI-compatible endpoints share (the embedder, the
consolidation extractor and the reranker): one ``httpx.Client`` with JSON and, when there
is a key, a bearer token; and one retry policy: which statuses are worth another attempt,
and how long a ``Retry-After`` asks to wait."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

__all__ = ["RETRYABLE_STATUS", "BearerClientOwner", "bearer_client", "retry_after"]

#: Answers worth another attempt: timeouts, conflicts, rate limits and server errors.
#: Any other status is the request's fault and is not retried.
RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


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


class BearerClientOwner:
    """The HTTP client of a class that talks to an OpenAI-compatible endpoint, built on
    first use from its ``base_url``, ``_api_key``, ``timeout`` and ``transport``, and
    closed by :meth:`close` (the next call builds it again)."""

    base_url: str
    _api_key: str
    timeout: float
    transport: httpx.BaseTransport | None = None
    _client: httpx.Client | None = None

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = bearer_client(
                self.base_url, self._api_key, timeout=self.timeout, transport=self.transport
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), if the response has one."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
