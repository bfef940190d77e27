"""Sending a request again when the network or the server failed it for a moment, and
the key that makes that safe.

Every memoryhub client sends its writes, updates and forgets with an ``Idempotency-Key``
(:func:`new_idempotency_key`: one per call, the same on each of its attempts), so the
server acts once however many times the request arrives and answers each attempt as it
answered the first. A request is tried again after a connection error or a timeout, and
after a ``429``, ``502``, ``503`` or ``504`` (waiting what ``Retry-After`` asks, up to
``RetryPolicy.max_wait``); any other answer is the request's own and is returned as it
is. Retries are tenacity's; the waits grow exponentially with jitter.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    wait_random_exponential,
)

from ..openai_compatible import retry_after

__all__ = [
    "IDEMPOTENCY_HEADER",
    "RETRYABLE_STATUS",
    "RetryPolicy",
    "new_idempotency_key",
    "send",
    "send_async",
]

IDEMPOTENCY_HEADER = "Idempotency-Key"

#: Answers that say "not now" rather than "not this": worth another attempt.
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})

#: Failures of the exchange itself: nothing was answered.
TRANSPORT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def new_idempotency_key() -> str:
    """A fresh key for one call (its retries send it again)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class RetryPolicy:
    """How many times a request is sent in all, and how long to wait between tries."""

    attempts: int = 4
    backoff: float = 0.25
    max_wait: float = 8.0

    def _wait(self, state: RetryCallState) -> float:
        outcome = state.outcome
        if outcome is not None and not outcome.failed:
            asked = retry_after(outcome.result())
            if asked is not None:
                return min(asked, self.max_wait)
        return float(wait_random_exponential(multiplier=self.backoff, max=self.max_wait)(state))

    def _options(self) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.attempts),
            "wait": self._wait,
            "retry": retry_if_exception_type(TRANSPORT_ERRORS)
            | retry_if_result(lambda response: response.status_code in RETRYABLE_STATUS),
            # Out of attempts: the last answer is the caller's to read (an error status
            # raises there); the last transport error is raised.
            "retry_error_callback": lambda state: state.outcome.result(),
            "reraise": True,
        }


DEFAULT_POLICY = RetryPolicy()


def _with_key(kwargs: dict[str, Any], idempotency_key: str | None) -> dict[str, Any]:
    if idempotency_key is None:
        return kwargs
    headers = {**(kwargs.get("headers") or {}), IDEMPOTENCY_HEADER: idempotency_key}
    return {**kwargs, "headers": headers}


def send(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    idempotency_key: str | None = None,
    policy: RetryPolicy = DEFAULT_POLICY,
    **kwargs: Any,
) -> httpx.Response:
    """``client.request(method, url, **kwargs)``, tried again as the module says."""
    request: Callable[[], httpx.Response] = lambda: client.request(  # noqa: E731
        method, url, **_with_key(kwargs, idempotency_key)
    )
    return Retrying(**policy._options())(request)


async def send_async(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    idempotency_key: str | None = None,
    policy: RetryPolicy = DEFAULT_POLICY,
    **kwargs: Any,
) -> httpx.Response:
    """``await client.request(method, url, **kwargs)``, tried again as the module says."""

    async def request() -> httpx.Response:
        return await client.request(method, url, **_with_key(kwargs, idempotency_key))

    return await AsyncRetrying(**policy._options())(request)
