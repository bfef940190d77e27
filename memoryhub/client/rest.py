"""``RestClient``: one domain of a memoryhub server's REST API, as every client here
speaks to it (``HttpMemory``, the key/value stores, the LangGraph store).

It holds what they share: the domain's URLs, the API key's header, the timeout and the
transport, and the httpx clients made from them. Requests go through
:mod:`memoryhub.client.retries` (an ``Idempotency-Key`` on each change) and error
statuses through :mod:`memoryhub.client.errors`, which each client applies with what it
knows of the call (its knowledge bases, whether it reads, writes or forgets).
"""

from __future__ import annotations

import httpx

__all__ = ["RestClient"]


class RestClient:
    """The REST API of ``domain`` on the server at ``base_url``, with ``api_key``.

    ``transport`` is httpx's (tests, proxies): a blocking one serves :meth:`blocking`, an
    async one :meth:`asynchronous`; the other kind of client then uses httpx's default.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        domain: str,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.domain = domain
        self.headers = {"Authorization": f"Api-Key {api_key}"}
        self.timeout = timeout
        self.transport = transport

    @property
    def domain_url(self) -> str:
        """The domain's URL, which every path of the API below it is relative to."""
        return f"{self.base_url}/api/v1/domains/{self.domain}/"

    def url(self, path: str) -> str:
        return self.domain_url + path

    def blocking(self) -> httpx.Client:
        """A blocking client of the domain's API (relative paths are the domain's)."""
        sync = self.transport if isinstance(self.transport, httpx.BaseTransport) else None
        return httpx.Client(
            base_url=self.domain_url, headers=self.headers, timeout=self.timeout, transport=sync
        )

    def asynchronous(self) -> httpx.AsyncClient:
        """An async client of the domain's API (relative paths are the domain's)."""
        transport = self.transport if isinstance(self.transport, httpx.AsyncBaseTransport) else None
        return httpx.AsyncClient(
            base_url=self.domain_url,
            headers=self.headers,
            timeout=self.timeout,
            transport=transport,
        )
