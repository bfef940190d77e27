"""``HttpMemory``: a MemorySource over memoryhub's REST API, for agents in other services.

It composes exactly like local memory (``CompositeMemory([HttpMemory(...), ...])``).
The tenant is the API key's: ``ctx.scope`` is not sent (the server never trusts a body
for scope).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from ..items import MemoryItem, as_write_item, thaw
from .base import MemoryContext, MemoryWriteRefused

__all__ = ["HttpMemory", "HttpMemoryError"]


class HttpMemoryError(RuntimeError):
    """The API answered with an error (``status`` and its JSON ``code``)."""

    def __init__(self, status: int, code: str, detail: str, errors: Any = None) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.errors = errors
        super().__init__(f"HTTP {status} {code}: {detail}")


class HttpMemory:
    """Query and write one domain of a memoryhub server.

    ``sources`` limits queries to those knowledge bases; writes go to ``write_to``.
    ``namespaces`` and ``mode`` are sent with every query. Timeouts are httpx's.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        domain: str,
        sources: Sequence[str] | None = None,
        write_to: str = "memory",
        namespaces: Sequence[str] = ("",),
        mode: str = "hybrid",
        name: str | None = None,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.domain = domain
        self.sources = list(sources) if sources is not None else None
        self.write_to = write_to
        self.namespaces = list(namespaces)
        self.mode = mode
        self.name = name or (
            self.sources[0] if self.sources and len(self.sources) == 1 else write_to
        )
        self._headers = {"Authorization": f"Api-Key {api_key}"}
        self._timeout = timeout
        self._transport = transport

    def __repr__(self) -> str:
        return f"HttpMemory({self.base_url!r}, domain={self.domain!r})"

    async def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        url = f"{self.base_url}/api/v1/domains/{self.domain}/{path}"
        async with httpx.AsyncClient(
            headers=self._headers, timeout=self._timeout, transport=self._transport
        ) as client:
            response = await client.post(url, json=body)
        try:
            payload = response.json()
        except ValueError:
            payload = {}
        if response.status_code >= 400:
            if payload.get("code") == "write_refused":
                raise MemoryWriteRefused(str(payload.get("source")), int(payload.get("n", 0)))
            raise HttpMemoryError(
                response.status_code,
                str(payload.get("code", "error")),
                str(payload.get("detail", response.text[:200])),
                payload.get("errors"),
            )
        return payload

    async def query(
        self,
        query: str,
        *,
        k: int,
        ctx: MemoryContext | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        body: dict[str, Any] = {
            "query": query,
            "k": k,
            "namespaces": self.namespaces,
            "mode": self.mode,
        }
        if self.sources is not None:
            body["sources"] = self.sources
        if where:
            body["where"] = thaw(where)
        payload = await self._post("query", body)
        return [_item(row) for row in payload.get("items", [])]

    async def write(
        self, items: Sequence[MemoryItem], *, ctx: MemoryContext | None = None
    ) -> dict[str, Any]:
        default = self.namespaces[0] if len(self.namespaces) == 1 else None
        body = {
            "source": self.write_to,
            "items": [as_write_item(item, default_namespace=default) for item in items],
        }
        return await self._post("records", body)


def _item(row: Mapping[str, Any]) -> MemoryItem:
    created = row.get("created_at")
    return MemoryItem(
        content=row["content"],
        source=row["source"],
        score=row.get("score"),
        metadata=row.get("metadata") or {},
        id=row.get("id"),
        key=row.get("key"),
        kind=row.get("kind"),
        namespace=row.get("namespace"),
        tags=tuple(row.get("tags") or ()),
        created_at=datetime.fromisoformat(created.replace("Z", "+00:00")) if created else None,
        dedupe_count=row.get("dedupe_count"),
        dedupe_sources=tuple(row["dedupe_sources"]) if row.get("dedupe_sources") else None,
    )
