"""Export an org, or one of its domains, as an archive (:mod:`.format`): its domains,
knowledge bases, erasure receipts (keyed hashes only), records with every stored field,
their validity and supersession links, consolidation provenance and history, and
optionally their vectors with their model's name.

Records are read a page at a time in key order (a keyset, never an offset), so an
export of millions of records holds one page in memory; a record's earlier states
follow it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from django.utils import timezone

from tenants.models import Domain, Org

from ... import __version__
from ...items import STORED_FIELDS
from ...models import ErasureReceipt, KnowledgeBase, MemoryRecord, RecordVersion
from .format import ArchiveInvalid, Writer, receipt_key_fingerprint, writing

__all__ = ["PAGE", "RECORD_FIELDS", "VERSION_FIELDS", "export_archive"]

#: Records read per statement.
PAGE = 1000
#: What an archive keeps of a record (beside its domain, knowledge base and vector).
RECORD_FIELDS = (
    "id",
    "namespace",
    *STORED_FIELDS,
    "created_at",
    "updated_at",
    "superseded_by",
    "derived_from",
    "consolidation",
    "version",
    "changed_by",
    "change_cause",
)
#: What it keeps of a record's earlier state.
VERSION_FIELDS = (
    "version",
    "content",
    "key",
    "kind",
    "tags",
    "metadata",
    "expires_at",
    "occurred_at",
    "valid_from",
    "valid_until",
    "changed_at",
    "actor",
    "cause",
)
KNOWLEDGE_BASE_FIELDS = (
    "name",
    "description",
    "read_only",
    "on_write",
    "consolidate",
    "refused_writes",
    "created_at",
)
RECEIPT_FIELDS = (
    "id",
    "created_at",
    "actor",
    "batch",
    "selector",
    "by_source",
    "deleted",
    "cancelled_imports",
)


def plain(value: Any) -> Any:
    """``value`` as JSON holds it: moments as ISO 8601, ids as text, vectors as lists."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if hasattr(value, "tolist"):
        return [float(x) for x in value.tolist()]
    return value


def export_archive(
    org: Org,
    path: Path | str,
    *,
    domain: str | None = None,
    vectors: bool = False,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Write ``org`` (or its domain ``domain``) to the archive ``path``; returns the
    manifest (its counts say what was written). ``progress`` is told the records written
    so far, a page at a time."""
    domains = list(Domain.objects.filter(org=org).order_by("slug"))
    if domain is not None:
        domains = [d for d in domains if d.slug == domain]
        if not domains:
            raise Domain.DoesNotExist(f"org {org.slug!r} has no domain {domain!r}.")
    path = Path(path)
    models: set[str] = set()
    erasures = erasure_count(org.pk)
    with writing(path) as out:
        for each in domains:
            out.write("domain", _domain_line(each))
        for each in domains:
            for kb in _knowledge_bases(each):
                out.write(
                    "knowledge_base",
                    {
                        "domain": each.slug,
                        **{f: plain(getattr(kb, f)) for f in KNOWLEDGE_BASE_FIELDS},
                    },
                )
        for each in domains:
            for receipt in ErasureReceipt.unscoped.filter(
                org_id=org.pk, domain_id=each.pk
            ).order_by("created_at", "id"):
                fields = {f: plain(getattr(receipt, f)) for f in RECEIPT_FIELDS}
                out.write("receipt", {"domain": each.slug, **fields})
        for each in domains:
            models |= _write_records(out, each, vectors=vectors, progress=progress)
        manifest = out.finish(
            {
                "created_at": timezone.now().isoformat(),
                "memoryhub": __version__,
                "org": {"slug": org.slug, "name": org.name},
                "domain": domain,
                "vectors": vectors,
                "embedding_models": sorted(models),
                "receipt_key": receipt_key_fingerprint(),
            }
        )
    if erasure_count(org.pk) != erasures:
        # An erasure committed while the records were read: the file may hold some of
        # what it erased, without its receipt.
        path.unlink(missing_ok=True)
        raise ArchiveInvalid("an erasure in the org ran during the export: export again.")
    return manifest


def erasure_count(org_id: int) -> int:
    """How many erasures the org has made (receipts are never deleted: a count that grew
    is an erasure that committed)."""
    return ErasureReceipt.unscoped.filter(org_id=org_id).count()


def _domain_line(domain: Domain) -> dict[str, Any]:
    return {
        "slug": domain.slug,
        "name": domain.name,
        "hybrid_vector_weight": domain.hybrid_vector_weight,
        "created_at": plain(domain.created_at),
    }


def _knowledge_bases(domain: Domain) -> Iterator[KnowledgeBase]:
    """The domain's knowledge bases, but those being deleted."""
    return iter(
        KnowledgeBase.unscoped.filter(
            org_id=domain.org_id, domain=domain, deleting_since__isnull=True
        ).order_by("name")
    )


def _write_records(
    out: Writer, domain: Domain, *, vectors: bool, progress: Callable[[int], None] | None
) -> set[str]:
    """Each record of ``domain`` (but expired ones, and those of a knowledge base being
    deleted), each followed by its earlier states; the embedding models seen."""
    names = dict(
        KnowledgeBase.unscoped.filter(
            org_id=domain.org_id, domain=domain, deleting_since__isnull=True
        ).values_list("pk", "name")
    )
    columns = [*RECORD_FIELDS, "knowledge_base_id", "embedding_model"]
    if vectors:
        columns.append("embedding")
    models: set[str] = set()
    for page in _pages(domain, columns, list(names)):
        states = versions_of(domain.org_id, [row["id"] for row in page])
        for row in page:
            line = {"domain": domain.slug, "knowledge_base": names[row["knowledge_base_id"]]}
            line.update((f, plain(row[f])) for f in RECORD_FIELDS)
            if vectors and row["embedding"] is not None:
                line["embedding"] = plain(row["embedding"])
                line["embedding_model"] = row["embedding_model"]
                models.add(row["embedding_model"])
            out.write("record", line)
            for state in states.get(row["id"], ()):
                out.write("version", {"record": str(row["id"]), **state})
        if progress is not None:
            progress(out.counts["record"])
    return models


def _pages(
    domain: Domain, columns: Sequence[str], knowledge_bases: list[int]
) -> Iterator[list[dict[str, Any]]]:
    """The domain's records, :data:`PAGE` at a time in id order."""
    now = timezone.now()
    records = (
        MemoryRecord.unscoped.filter(
            org_id=domain.org_id, domain_id=domain.pk, knowledge_base_id__in=knowledge_bases
        )
        .exclude(expires_at__lte=now)
        .order_by("id")
    )
    after: uuid.UUID | None = None
    while True:
        page = records if after is None else records.filter(id__gt=after)
        rows = list(page.values(*columns)[:PAGE])
        if not rows:
            return
        yield rows
        after = rows[-1]["id"]


def versions_of(org_id: int, record_ids: list[Any]) -> dict[Any, list[dict[str, Any]]]:
    """The earlier states of ``record_ids``, oldest first, by record id."""
    states: dict[Any, list[dict[str, Any]]] = {}
    for row in (
        RecordVersion.unscoped.filter(org_id=org_id, record_id__in=record_ids)
        .order_by("record_id", "version")
        .values("record_id", *VERSION_FIELDS)
    ):
        record = row.pop("record_id")
        states.setdefault(record, []).append({f: plain(v) for f, v in row.items()})
    return states
