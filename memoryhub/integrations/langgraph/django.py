"""The LangGraph store over memoryhub's services in this process (a Django project with
memoryhub installed): :mod:`memoryhub.integrations.langgraph` says how an item is a
record; this store and :class:`~memoryhub.integrations.langgraph.HttpMemoryhubStore`
behave alike."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable
from typing import Any

from asgiref.sync import sync_to_async
from langgraph.store.base import IndexConfig, Op, Result

from ... import policy
from ...exceptions import UnknownSource
from ...models import MemoryRecord
from ...scope import tenant_scope
from ...services import forget, records, write
from ...services import query as query_service
from ...sources.django import blocking
from ...vocabulary import bounds
from . import TAG, MemoryhubStoreBase, Row, listing_parameters

__all__ = ["MemoryhubStore"]


class MemoryhubStore(MemoryhubStoreBase):
    """A LangGraph store over memoryhub's services, in one domain (``scope``).

    ``principal`` is who the store acts for (:mod:`memoryhub.policy`; default operator
    code): reads need ``read``, puts ``write``, deletes ``forget``, as over the REST API
    (``PolicyDenied`` otherwise). Errors are the services' (``ValidationFailed`` naming
    the field, ``WriteRefused`` from a read-only knowledge base).
    """

    def __init__(
        self,
        scope: Any,
        *,
        principal: Any = None,
        source: str = "memory",
        index: IndexConfig | None = None,
    ) -> None:

        super().__init__(source=source, index=index)
        self.scope = scope
        self.principal = principal if principal is not None else policy.SYSTEM
        limits = bounds()
        self.max_k = limits.MAX_K
        self.max_write_items = limits.MAX_WRITE_ITEMS

    def __repr__(self) -> str:
        return f"MemoryhubStore({self.scope}, source={self.source!r})"

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return blocking(lambda: self._run(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await sync_to_async(self._run, thread_sensitive=True)(list(ops))

    def _require(self, action: str) -> None:

        policy.require(self.principal, policy.Action(action), self.scope)

    @staticmethod
    def _row(record: Any, score: float | None = None) -> Row:
        return Row(
            record.namespace,
            record.key,
            record.metadata,
            record.created_at,
            record.updated_at,
            score,
        )

    def _records(self, filters: dict[str, str], where: Any = None) -> Any:
        return records.list_records(
            self.scope,
            {"source": self.source, "tag": TAG, **filters},
            ordering="updated",
            where=where,
        )

    def _get(self, namespace: str, key: str) -> Row | None:
        self._require("read")
        record = self._records({"namespace": namespace, "key": key}).first()
        return self._row(record) if record is not None else None

    def _list(
        self,
        namespace: str | None,
        key_prefix: str,
        where: dict[str, Any] | None,
        offset: int,
        limit: int,
    ) -> list[Row]:
        self._require("read")
        filters = {"key_prefix": key_prefix}
        if namespace is not None:
            filters["namespace"] = namespace
        return [self._row(r) for r in self._records(filters, where)[offset : offset + limit]]

    def _query(
        self,
        namespaces: list[str],
        key_prefix: str,
        where: dict[str, Any] | None,
        query: str,
        k: int,
    ) -> list[Row]:
        self._require("read")
        try:
            result = query_service.query(
                self.scope,
                query=query,
                k=k,
                sources=[self.source],
                namespaces=namespaces,
                key_prefix=key_prefix,
                tags=[TAG],
                where=where,
            )
        except UnknownSource:
            return []  # nothing was put yet
        ids = [hit.id for hit in result.items if hit.id]
        with tenant_scope(self.scope):
            updated = dict(MemoryRecord.objects.filter(pk__in=ids).values_list("pk", "updated_at"))
        rows = []
        for hit in result.items:
            changed = updated.get(uuid.UUID(str(hit.id)))
            if changed is None or hit.namespace is None or hit.created_at is None:
                continue  # forgotten since it was ranked
            value = dict(hit.metadata)
            rows.append(Row(hit.namespace, hit.key, value, hit.created_at, changed, hit.score))
        return rows

    def _write(self, items: list[dict[str, Any]]) -> None:
        self._require("write")
        write.write(self.scope, items, sources=[self.source], principal=self.principal)

    def _forget(self, namespace: str, key: str) -> None:
        self._require("forget")
        request = forget.ForgetRequest(namespace=namespace, key=key, source=self.source)
        with contextlib.suppress(UnknownSource):  # nothing was put yet
            forget.forget(self.scope, request, principal=self.principal)

    def _directories(
        self,
        *,
        namespace: str | None,
        key_prefix: str | None,
        delimiter: str | None,
        cursor: str | None,
        limit: int,
    ) -> tuple[list[dict[str, str]], str | None]:
        self._require("read")
        raw = listing_parameters(self.source, namespace, key_prefix, delimiter, cursor, limit)
        try:
            page = records.list_namespaces(self.scope, raw)
        except UnknownSource:
            return [], None
        return page.rows, page.next
