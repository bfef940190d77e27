"""``HttpMemory``: a MemorySource over memoryhub's REST API, for agents in other services.

It composes exactly like local memory (``CompositeMemory([HttpMemory(...), ...])``).
The tenant is the API key's: ``ctx.scope`` is not sent (the server never trusts a body
for scope).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from ..exceptions import WriteRefused
from ..items import MemoryItem, RecordResult, WriteResult, as_write_item, thaw
from .errors import error_for
from .rest import RestClient
from .retries import new_idempotency_key, send, send_async

if TYPE_CHECKING:
    from ..sources import MemoryContext

__all__ = ["HttpMemory"]


class WritePolicy:
    """What a write target says of itself (does it take writes?), asked at most once per
    ``seconds``; a write's own answer is news and replaces it at once. ``DjangoMemory``
    and ``HttpMemory`` derive their ``accepts_writes`` from one of these."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._known: tuple[float, bool] | None = None

    def get(self, ask: Callable[[], bool]) -> bool:
        if self._known is None or self._known[0] <= time.monotonic():
            self.remember(ask())
        assert self._known is not None
        return self._known[1]

    def remember(self, accepts: bool) -> None:
        self._known = (time.monotonic() + self.seconds, accepts)


class HttpMemory:
    """Query and write one domain of a memoryhub server.

    ``sources`` limits queries to those knowledge bases; writes go to ``write_to``.
    ``namespaces`` and ``mode`` are sent with every query. Timeouts are httpx's; a
    request the network or a busy server failed is sent again, a write with an
    ``Idempotency-Key`` so it is stored once (:mod:`memoryhub.client.retries`).

    ``accepts_writes`` is what the server says of ``write_to`` (its ``sources``
    endpoint: False when that knowledge base is read-only), read when first asked and
    kept ``POLICY_SECONDS``; every write's answer updates it. ``write`` returns the
    server's buckets as a :class:`~memoryhub.items.WriteResult`, so a
    composition files a knowledge base that ignored the write under ``refused``.
    The server records the ``memory.written`` observation (``observes_writes``). An
    error status raises as :mod:`memoryhub.client.errors` says (a read-only refusal is
    ``WriteRefused``, invalid input ``ValidationFailed``, as in process).
    """

    observes_writes: ClassVar[bool] = True
    POLICY_SECONDS: ClassVar[float] = 30.0

    def __init__(  # noqa: PLR0913
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
        self._rest = RestClient(
            base_url, api_key=api_key, domain=domain, timeout=timeout, transport=transport
        )
        self.base_url, self.domain = self._rest.base_url, domain
        self.sources = list(sources) if sources is not None else None
        self.write_to = write_to
        self.namespaces = list(namespaces)
        self.mode = mode
        self.name = name or (
            self.sources[0] if self.sources and len(self.sources) == 1 else write_to
        )
        self._policy = WritePolicy(self.POLICY_SECONDS)

    def __repr__(self) -> str:
        return f"HttpMemory({self.base_url!r}, domain={self.domain!r})"

    async def _post(
        self, path: str, body: Mapping[str, Any], *, sources: Sequence[str], action: str
    ) -> Any:
        async with self._rest.asynchronous() as client:
            response = await send_async(
                client,
                "POST",
                path,
                json=body,
                idempotency_key=new_idempotency_key() if action != "read" else None,
            )
        return _payload(response, sources=sources, action=action)

    @property
    def accepts_writes(self) -> bool:
        """Whether ``write_to`` takes writes, as the server's ``sources`` say (cached)."""
        return self._policy.get(self._ask_sources)

    def _ask_sources(self) -> bool:
        # Blocking, once per POLICY_SECONDS: a property cannot await. A knowledge base
        # that does not exist yet is created by the first write: it accepts.
        with self._rest.blocking() as client:
            rows = _payload(send(client, "GET", "sources"), sources=(), action="read")
        return not any(row.get("read_only") for row in rows if row["name"] == self.write_to)

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
        payload = await self._post("query", body, sources=self.sources or (), action="read")
        return [_item(row) for row in payload.get("items", [])]

    async def write(
        self, items: Sequence[MemoryItem], *, ctx: MemoryContext | None = None
    ) -> WriteResult:
        default = self.namespaces[0] if len(self.namespaces) == 1 else None
        body = {
            "source": self.write_to,
            "items": [as_write_item(item, default_namespace=default) for item in items],
        }
        try:
            payload = await self._post("records", body, sources=[self.write_to], action="write")
        except WriteRefused:
            self._policy.remember(False)
            raise
        result = WriteResult(
            accepted=list(payload.get("accepted", [])),
            refused=list(payload.get("refused", [])),
            failed=dict(payload.get("failed", {})),
            records=[
                RecordResult(
                    id=row["id"],
                    key=row.get("key"),
                    status=row["status"],
                    deduplicated=bool(row.get("deduplicated")),
                    source=row["source"],
                )
                for row in payload.get("records", [])
            ],
        )
        if self.write_to in result.refused:
            self._policy.remember(False)
        elif self.write_to in result.accepted:
            self._policy.remember(True)
        return result


def _payload(response: httpx.Response, *, sources: Sequence[str], action: str) -> Any:
    """The JSON body; an error status raises (:func:`~memoryhub.client.errors.error_for`
    of a call that named ``sources`` and needed ``action``)."""
    if response.status_code >= 400:
        raise error_for(response, sources=sources, action=action)
    try:
        return response.json()
    except ValueError:
        return {}


def _moment(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _item(row: Mapping[str, Any]) -> MemoryItem:
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
        created_at=_moment(row.get("created_at")),
        occurred_at=_moment(row.get("occurred_at")),
        dedupe_count=row.get("dedupe_count"),
        dedupe_sources=tuple(row["dedupe_sources"]) if row.get("dedupe_sources") else None,
        derived_from=tuple(row.get("derived_from") or ()),
    )
