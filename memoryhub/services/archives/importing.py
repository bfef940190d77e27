"""Import an archive (:mod:`.format`) into an org: the same one, or another slug.

The archive is read three times, streaming, and written once:

1. every line is checked (its hash and counts against the manifest, each record's
   fields by the rules a write obeys): a damaged or invalid archive writes nothing;
2. domains, knowledge bases and erasure receipts are created where missing;
3. records (and their history) are written a batch at a time, each batch in its own
   transaction: an import stopped half-way is finished by running it again.

Importing twice changes nothing: a record keeps its id (or, into another org, an id
derived from it and the org's slug), and one that exists is left as it is.

**Nothing erased comes back.** A record whose subject was erased in the target org after
the record was written (an erasure receipt of its namespace, key, knowledge base or
domain, there or travelling in the archive) is refused and counted; the receipts' keyed
hashes are compared, so the receipts must have been made with the same key
(``ERASURE_RECEIPT_KEY``).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from tenants.models import Domain, Org

from ... import observe, policy
from ...cache import bump_generation_on_commit
from ...conf import memoryhub_settings
from ...exceptions import PolicyDenied
from ...items import MOMENT_FIELDS
from ...models import ErasureReceipt, KnowledgeBase, MemoryRecord, Observation, RecordVersion
from ...models import content_hash as hash_of
from ...policy import Action
from ...scope import Scope
from .. import indexing
from ..dispatch import schedule_indexing
from ..store import bulk
from ..store.locks import lock_domain, lock_namespaces
from . import checking, format
from .checking import when
from .erasures import Erasures
from .exporting import KNOWLEDGE_BASE_FIELDS, RECEIPT_FIELDS, RECORD_FIELDS, VERSION_FIELDS
from .format import ArchiveInvalid

__all__ = ["BATCH", "ImportReport", "import_archive"]

#: Records written per transaction.
BATCH = 500
#: The namespace of the ids derived for records imported into another org.
_IDS = uuid.UUID("5c1f5b0e-7d7e-4c52-9a8a-6d656d6f7279")
_ANY = object()


@dataclass
class ImportReport:
    """What an import did (or, in a dry run, would do)."""

    org: str
    dry_run: bool
    created: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("org", *format.KINDS), 0)
    )
    #: Records left as they were: already there (``unchanged``), their subject erased
    #: (``erased``), their key held by another record or their id by another org
    #: (``conflict``), or expired.
    skipped: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("unchanged", "erased", "conflict", "expired"), 0)
    )
    #: Records stored with the archive's vectors, and those sent to be embedded.
    vectors_reused: int = 0
    to_embed: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "org": self.org,
            "dry_run": self.dry_run,
            "created": self.created,
            "skipped": self.skipped,
            "vectors_reused": self.vectors_reused,
            "to_embed": self.to_embed,
        }


def import_archive(
    path: Path | str,
    *,
    org: str | None = None,
    dry_run: bool = False,
    principal: policy.Principal = policy.SYSTEM,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Import the archive ``path`` into the org ``org`` (default: the archive's own
    slug, created if missing). With ``dry_run`` nothing is written; the report says
    what would have been."""
    path = Path(path)
    manifest = format.read_manifest(path)
    checking.check(path, manifest)
    slug = org or str((manifest.get("org") or {}).get("slug") or "")
    if not slug:
        raise ArchiveInvalid("the manifest names no org: give one.", field="org")
    run = _Run(manifest, slug, dry_run, principal)
    run.progress = progress
    run.erasures.decide((line for _number, line in format.lines(path)), run._id)
    for _number, line in format.lines(path):
        run.take(line)
    run.flush()
    run.observe()
    return run.report


# --- importing -----------------------------------------------------------------------


class _Run:
    """One import: the target org, its domains and knowledge bases as they are found or
    made, the receipts that keep erased subjects out, and the batch being gathered."""

    def __init__(
        self, manifest: dict[str, Any], slug: str, dry_run: bool, principal: policy.Principal
    ) -> None:
        self.manifest = manifest
        self.report = ImportReport(org=slug, dry_run=dry_run)
        self.principal = principal
        self.same_org = slug == (manifest.get("org") or {}).get("slug")
        self.org = Org.objects.filter(slug=slug).first()
        if self.org is None:
            self._create_org(slug)
        self.domains: dict[str, Domain | None] = {}
        self.knowledge_bases: dict[tuple[str, str], KnowledgeBase | None] = {}
        self.erasures = Erasures()
        self.receipts_read_at = timezone.now()
        self.batch: list[dict[str, Any]] = []
        self.seen = 0
        self.progress: Callable[[int], None] | None = None
        self.created_in: dict[tuple[int, int], int] = defaultdict(int)
        self.embedder = memoryhub_settings.embedder()
        self.erasures.load(self._org_ids(), self._slugs())

    def _org_ids(self) -> list[int]:
        return [self.org.pk] if self.org is not None else []

    def _slugs(self) -> set[str]:
        """The slugs whose receipts apply: the target's, and the archive's own org's
        (receipts outlive their org)."""
        return {self.report.org, str((self.manifest.get("org") or {}).get("slug") or "")} - {""}

    def _create_org(self, slug: str) -> None:
        if not policy.allows_anywhere(self.principal, Action.CREATE_ORG):
            raise PolicyDenied(Action.CREATE_ORG)
        self.report.created["org"] = 1
        if not self.report.dry_run:
            name = (self.manifest.get("org") or {}).get("name") or slug
            self.org = Org.objects.create(slug=slug, name=name)

    # --- lines -----------------------------------------------------------------------

    def take(self, line: dict[str, Any]) -> None:
        kind = line["type"]
        if kind == "domain":
            self._domain(line)
        elif kind == "knowledge_base":
            self._knowledge_base(line)
        elif kind == "receipt":
            self._receipt(line)
        elif kind == "record":
            if len(self.batch) >= BATCH:
                self.flush()
            self.batch.append({**line, "versions": []})
        elif self.batch and self.batch[-1]["id"] == line["record"]:
            self.batch[-1]["versions"].append(line)
        else:
            raise ArchiveInvalid(f"a version of record {line['record']} is not right after it.")

    def _domain(self, line: dict[str, Any]) -> None:
        found = (
            None
            if self.org is None
            else Domain.objects.filter(org=self.org, slug=line["slug"]).first()
        )
        if found is None:
            self.report.created["domain"] += 1
            if self.org is not None and not self.report.dry_run:
                found = Domain.objects.create(
                    org=self.org,
                    slug=line["slug"],
                    name=line.get("name") or "",
                    hybrid_vector_weight=line.get("hybrid_vector_weight"),
                )
                if line.get("created_at"):
                    Domain.objects.filter(pk=found.pk).update(created_at=line["created_at"])
        if found is not None:
            policy.require(self.principal, Action.IMPORT, Scope.for_domain(found))
        self.domains[line["slug"]] = found

    def _knowledge_base(self, line: dict[str, Any]) -> None:
        domain = self._in_domain(line)
        found = None
        if domain is not None:
            found = KnowledgeBase.unscoped.filter(
                org_id=domain.org_id, domain=domain, name=line["name"]
            ).first()
        if found is None:
            self.report.created["knowledge_base"] += 1
            if domain is not None and not self.report.dry_run:
                fields = {
                    f: line[f] for f in KNOWLEDGE_BASE_FIELDS if f in line and f != "created_at"
                }
                found = KnowledgeBase.unscoped.create(org_id=domain.org_id, domain=domain, **fields)
                if line.get("created_at"):
                    KnowledgeBase.unscoped.filter(pk=found.pk).update(created_at=line["created_at"])
        self.knowledge_bases[(line["domain"], line["name"])] = found

    def _receipt(self, line: dict[str, Any]) -> None:
        erased_at = when(line["created_at"])
        domain = self._in_domain(line)
        target = self._id(line["id"])
        if ErasureReceipt.unscoped.filter(pk=target).exists():
            return
        self.report.created["receipt"] += 1
        if domain is None or self.report.dry_run:
            return
        fields = {f: line.get(f) for f in RECEIPT_FIELDS if f not in ("id", "created_at")}
        ErasureReceipt.unscoped.create(
            id=target,
            created_at=erased_at,
            org_id=domain.org_id,
            org_slug=domain.org.slug,
            domain_id=domain.pk,
            domain_slug=domain.slug,
            **fields,
        )

    def _in_domain(self, line: dict[str, Any]) -> Domain | None:
        if line["domain"] not in self.domains:
            raise ArchiveInvalid(f"domain {line['domain']!r} is not declared before its contents.")
        return self.domains[line["domain"]]

    def _id(self, source: str) -> str:
        """The id a record (or receipt) takes here: its own in its own org, else one
        derived from it and the target's slug (the same at each import)."""
        if self.same_org:
            return source
        return str(uuid.uuid5(_IDS, f"{self.report.org}:{source}"))

    # --- records ---------------------------------------------------------------------

    def flush(self) -> None:
        batch, self.batch = self.batch, []
        if not batch:
            return
        with transaction.atomic():
            if not self.report.dry_run:
                self._hold_off_erasures(batch)
            new = self._new_records(batch)
            if not self.report.dry_run and new:
                self._write(new)
        self.report.created["record"] += len(new)
        self.seen += len(batch)
        if self.progress is not None:
            self.progress(self.seen)
        self.report.created["version"] += sum(len(line["versions"]) for line in new)

    def _hold_off_erasures(self, batch: list[dict[str, Any]]) -> None:
        """Take the locks every writer takes (an erasure waits for this batch, or this
        batch for it), then read the receipts made since the last batch: an erasure that
        committed during the import keeps its subject out of the batches after it."""
        for (domain, name), kb in self.knowledge_bases.items():
            lines = [
                line for line in batch if (line["domain"], line["knowledge_base"]) == (domain, name)
            ]
            if lines and kb is not None:
                lock_domain(Scope(org_id=kb.org_id, domain_id=kb.domain_id))
                lock_namespaces(kb, {line.get("namespace") or "" for line in lines})
        since, self.receipts_read_at = self.receipts_read_at, timezone.now()
        self.erasures.load(self._org_ids(), self._slugs(), since=since)

    def _new_records(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The lines of ``batch`` to write: not there yet, not erased, not expired,
        their key and id free."""
        for line in batch:
            line["target"] = self._id(line["id"])
        taken = dict(
            MemoryRecord.unscoped.filter(pk__in=[line["target"] for line in batch]).values_list(
                "pk", "org_id"
            )
        )
        now = timezone.now()
        new = []
        for line in batch:
            reason = self._skip_reason(line, taken, now)
            if reason:
                self.report.skipped[reason] += 1
            else:
                new.append(line)
        return self._free_keys(new)

    def _skip_reason(self, line: dict[str, Any], taken: dict[Any, int], now: datetime) -> str:
        owner = taken.get(uuid.UUID(line["target"]))
        if owner is not None:
            return "unchanged" if self.org is not None and owner == self.org.pk else "conflict"
        if line["id"] in self.erasures.refused or self.erasures.erased(
            line, line["id"], line["target"]
        ):
            return "erased"
        expires = parse_datetime(line["expires_at"]) if line.get("expires_at") else None
        if expires is not None and expires <= now:
            return "expired"
        if self.knowledge_bases.get((line["domain"], line["knowledge_base"]), _ANY) is _ANY:
            raise ArchiveInvalid(
                f"knowledge base {line['knowledge_base']!r} is not declared before its records."
            )
        return ""

    def _free_keys(self, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Leave out current records whose key another current record holds here."""
        keyed = [
            line for line in lines if line.get("key") is not None and not line.get("superseded_by")
        ]
        if not keyed or self.org is None:
            return lines
        wanted = {}
        for each in keyed:
            kb = self.knowledge_bases.get((each["domain"], each["knowledge_base"]))
            if kb is not None:
                wanted[(kb.pk, each.get("namespace") or "", each["key"])] = each["id"]
        taken = MemoryRecord.unscoped.filter(
            org_id=self.org.pk,
            knowledge_base_id__in={kb for kb, _, _ in wanted},
            key__in={key for _, _, key in wanted},
            superseded_by__isnull=True,
        ).values_list("knowledge_base_id", "namespace", "key")
        held = {wanted[slot] for slot in taken if slot in wanted}
        self.report.skipped["conflict"] += len(held)
        return [line for line in lines if line["id"] not in held]

    def _write(self, lines: list[dict[str, Any]]) -> None:
        records = [self._record(line) for line in lines]
        bulk.copy_records(records)
        RecordVersion.unscoped.bulk_create(
            RecordVersion(
                org_id=record.org_id,
                domain_id=record.domain_id,
                record_id=record.pk,
                **{f: state[f] for f in VERSION_FIELDS if f in state},
            )
            for record, line in zip(records, lines, strict=True)
            for state in line["versions"]
        )
        self._keep_updated_at(records, lines)
        self._vectors(records, lines)
        for record in records:
            self.created_in[(record.org_id, record.domain_id)] += 1
        for org_id, domain_id in {(r.org_id, r.domain_id) for r in records}:
            bump_generation_on_commit(Scope(org_id=org_id, domain_id=domain_id))

    def _record(self, line: dict[str, Any]) -> MemoryRecord:
        kb = self.knowledge_bases[(line["domain"], line["knowledge_base"])]
        assert kb is not None
        fields = {f: line[f] for f in RECORD_FIELDS[1:] if f in line and f != "updated_at"}
        for moment in ("created_at", *MOMENT_FIELDS):
            if line.get(moment):
                fields[moment] = when(line[moment])
        fields["superseded_by"] = (
            uuid.UUID(self._id(line["superseded_by"])) if line.get("superseded_by") else None
        )
        fields["derived_from"] = [
            uuid.UUID(self._id(source)) for source in line.get("derived_from") or []
        ]
        fields["tags"] = list(line.get("tags") or [])
        fields["metadata"] = line.get("metadata") or {}
        fields["namespace"] = line.get("namespace") or ""
        return MemoryRecord(
            id=uuid.UUID(line["target"]),
            org_id=kb.org_id,
            domain_id=kb.domain_id,
            knowledge_base=kb,
            content_hash=hash_of(line["content"]),
            status=MemoryRecord.Status.PENDING,
            **fields,
        )

    def _keep_updated_at(self, records: list[MemoryRecord], lines: list[dict[str, Any]]) -> None:
        """``updated_at`` as the archive says (a bulk insert stamps it now)."""
        pairs = [
            (str(r.pk), line["updated_at"])
            for r, line in zip(records, lines, strict=True)
            if line.get("updated_at")
        ]
        if not pairs:
            return
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {MemoryRecord._meta.db_table} AS record SET updated_at = given.at"
                " FROM unnest(%s::uuid[], %s::timestamptz[]) AS given(id, at)"
                " WHERE record.org_id = %s AND record.id = given.id",
                [[p[0] for p in pairs], [p[1] for p in pairs], records[0].org_id],
            )

    def _vectors(self, records: list[MemoryRecord], lines: list[dict[str, Any]]) -> None:
        """The archive's vectors where they are the configured model's; the others are
        sent to be embedded."""
        reuse, embed = [], []
        for record, line in zip(records, lines, strict=True):
            vector = line.get("embedding")
            if vector is not None and line.get("embedding_model") == self.embedder.name:
                reuse.append(((record.pk, record.content, record.org_id, record.domain_id), vector))
            else:
                embed.append(str(record.pk))
        if reuse:
            indexing.store(
                [row for row, _ in reuse], [vector for _, vector in reuse], self.embedder.name
            )
        if embed:
            schedule_indexing(embed, bulk=len(embed) > 1, org_id=records[0].org_id)
        self.report.vectors_reused += len(reuse)
        self.report.to_embed += len(embed)

    def observe(self) -> None:
        if self.report.dry_run:
            return
        for (org_id, domain_id), count in sorted(self.created_in.items()):
            observe.record_in_scope(
                Observation.Kind.MEMORY_WRITTEN,
                Scope(org_id=org_id, domain_id=domain_id),
                count=count,
                payload={"archive": self.manifest.get("sha256"), "skipped": self.report.skipped},
                actor=policy.actor_label(self.principal),
            )
