"""What an import must leave out because it was erased: the erasure receipts of the
target org, of the org the archive came from (by slug: receipts outlive their org), and
those travelling in the archive, and what follows from them.

A record is refused when a receipt made after it was written erased its namespace, key,
knowledge base or domain, or the record itself (an erasure by id); and with it what the
erasure also took: the facts it superseded, and the facts consolidation derived from
erased records alone. Receipts compare keyed hashes (``ERASURE_RECEIPT_KEY``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from tenants.models import Domain

from ...models import ErasureReceipt
from ..forget import salted_hash
from .checking import when

__all__ = ["Erasures"]

_ANY = object()


@dataclass(frozen=True)
class _Receipt:
    key: str | None
    sources: frozenset[str] | None
    erased_at: datetime


class Erasures:
    """The receipts an import compares each record with, and the records it refuses."""

    def __init__(self) -> None:
        self.by_namespace: dict[tuple[str, Any], list[_Receipt]] = defaultdict(list)
        #: Records erased by id: (domain slug, record id) → when.
        self.by_id: dict[tuple[str, str], datetime] = {}
        #: Source ids of the archive's records refused (:meth:`decide`).
        self.refused: set[str] = set()
        self.loaded_at: datetime | None = None
        self._hashes: dict[str, str] = {}

    def load(
        self, org_ids: Iterable[int], slugs: Iterable[str], since: datetime | None = None
    ) -> None:
        """The receipts of the orgs ``org_ids`` and of any org once called one of
        ``slugs`` (made after ``since``, if given), each under its domain's slug then and
        its domain's slug now."""
        receipts = ErasureReceipt.unscoped.filter(
            Q(org_id__in=list(org_ids)) | Q(org_slug__in=list(slugs))
        )
        if since is not None:
            receipts = receipts.filter(created_at__gte=since)
        now = dict(Domain.objects.filter(org_id__in=list(org_ids)).values_list("pk", "slug"))
        for receipt in receipts.iterator():
            for domain in {receipt.domain_slug, now.get(receipt.domain_id, receipt.domain_slug)}:
                self.remember(domain, receipt.selector, receipt.created_at)

    def remember(self, domain: str, selector: Any, erased_at: datetime) -> None:
        """One receipt, by its domain and what it selected."""
        if not isinstance(selector, dict) or selector.get("import_job") is not None:
            return  # an import's undo names records by their import, not their subject
        if selector.get("id") is not None:
            self.by_id[(domain, str(selector["id"]))] = erased_at
            return
        namespace = selector.get("namespace")
        if namespace is None and not any(selector.get(f) for f in ("all", "key", "sources")):
            return
        sources = selector.get("sources")
        self.by_namespace[(domain, namespace if namespace is not None else _ANY)].append(
            _Receipt(selector.get("key"), frozenset(sources) if sources else None, erased_at)
        )

    def erased(self, line: dict[str, Any], *ids: str) -> bool:
        """Whether a receipt made after the record ``line`` was written erased it (its
        ``ids``: as the archive names it, and as it is known here)."""
        written = when(line["created_at"])
        for pk in ids:
            at = self.by_id.get((line["domain"], pk))
            if at is not None and at >= written:
                return True
        namespace = line.get("namespace") or ""
        if namespace not in self._hashes:
            self._hashes[namespace] = salted_hash(namespace)
        candidates = self.by_namespace.get((line["domain"], self._hashes[namespace]), [])
        for receipt in candidates + self.by_namespace.get((line["domain"], _ANY), []):
            if receipt.erased_at < written:
                continue
            if receipt.sources is not None and line["knowledge_base"] not in receipt.sources:
                continue
            if receipt.key is not None and (
                line.get("key") is None or salted_hash(line["key"]) != receipt.key
            ):
                continue
            return True
        return False

    def decide(self, lines: Iterable[dict[str, Any]], target_id: Any) -> None:
        """Read the archive's receipts and records once: the records refused, with the
        facts they superseded and the facts derived from refused records alone. Holds
        the refused ids and the links of superseded and derived facts, not the records."""
        predecessors: dict[str, list[str]] = defaultdict(list)
        derived: dict[str, list[str]] = {}
        for line in lines:
            if line["type"] == "receipt":
                self.remember(line["domain"], line.get("selector"), when(line["created_at"]))
            elif line["type"] == "record":
                if self.erased(line, line["id"], target_id(line["id"])):
                    self.refused.add(line["id"])
                if line.get("superseded_by"):
                    predecessors[line["superseded_by"]].append(line["id"])
                if line.get("derived_from"):
                    derived[line["id"]] = list(line["derived_from"])
        waiting = list(self.refused)
        while waiting:
            for before in predecessors.get(waiting.pop(), ()):
                if before not in self.refused:
                    self.refused.add(before)
                    waiting.append(before)
        for fact, sources in derived.items():
            if sources and all(source in self.refused for source in sources):
                self.refused.add(fact)
