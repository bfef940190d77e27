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
from ...exceptions import ValidationFailed
from ...models import ErasureReceipt, KnowledgeBase, MemoryRecord, Observation, RecordVersion
from ...models import content_hash as hash_of
from ...policy import Action
from ...scope import Scope
from ...vocabulary import RecordUpdate, WriteItem
from .. import indexing
from ..dispatch import schedule_indexing
from ..forget.request import salted_hash
from . import format
from .exporting import KNOWLEDGE_BASE_FIELDS, RECEIPT_FIELDS, RECORD_FIELDS, VERSION_FIELDS
from .format import ArchiveInvalid

__all__ = ["BATCH", "ImportReport", "import_archive"]

#: Records written per transaction.
BATCH = 500
#: Errors an invalid archive is reported with, at most.
MOST_ERRORS = 20
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
) -> ImportReport:
    """Import the archive ``path`` into the org ``org`` (default: the archive's own
    slug, created if missing). With ``dry_run`` nothing is written; the report says
    what would have been."""
    path = Path(path)
    manifest = format.read_manifest(path)
    _check(path, manifest)
    slug = org or str((manifest.get("org") or {}).get("slug") or "")
    if not slug:
        raise ArchiveInvalid("the manifest names no org: give one.", field="org")
    run = _Run(manifest, slug, dry_run, principal)
    for _number, line in format.lines(path):
        run.take(line)
    run.flush()
    run.observe()
    return run.report


# --- checking ------------------------------------------------------------------------


def _check(path: Path, manifest: dict[str, Any]) -> None:
    errors: list[str] = []
    order = _Order()

    def check(number: int, line: dict[str, Any]) -> None:
        if len(errors) < MOST_ERRORS:
            problems = line_problems(line)
            errors.extend(f"line {number}: {problem}" for problem in problems or order.after(line))

    format.verify(path, manifest, check)
    if errors:
        raise ValidationFailed({"archive": errors})
    if manifest["counts"].get("receipt") and manifest.get("receipt_key") != (
        format.receipt_key_fingerprint()
    ):
        raise ArchiveInvalid(
            "its erasure receipts were made with another ERASURE_RECEIPT_KEY: set the"
            " source deployment's key here, or nothing erased could be told apart.",
            field="receipt_key",
        )


class _Order:
    """What a line may refer to: the domains and knowledge bases declared before it, and
    for a record's earlier state, the record just before it."""

    def __init__(self) -> None:
        self.domains: set[str] = set()
        self.knowledge_bases: set[tuple[str, str]] = set()
        self.record: str | None = None

    def after(self, line: dict[str, Any]) -> list[str]:
        kind = line["type"]
        if kind == "domain":
            self.domains.add(line["slug"])
            return []
        if kind == "version":
            if line["record"] != self.record:
                return [f"record: {line['record']} is not the record just before it."]
            return []
        self.record = line["id"] if kind == "record" else None
        if line["domain"] not in self.domains:
            return [f"domain: {line['domain']!r} is not declared before it."]
        if kind == "knowledge_base":
            self.knowledge_bases.add((line["domain"], line["name"]))
        elif (
            kind == "record"
            and (line["domain"], line["knowledge_base"]) not in self.knowledge_bases
        ):
            return [f"knowledge_base: {line['knowledge_base']!r} is not declared before it."]
        return []


def line_problems(line: dict[str, Any]) -> list[str]:
    """What is wrong with one line, by field (the write rules for a record's fields)."""
    kind = line["type"]
    try:
        if kind == "record":
            WriteItem.parse({f: line.get(f) for f in ("namespace", *RECORD_FIELDS[2:11])})
            return _record_problems(line)
        if kind == "version":
            RecordUpdate.parse({f: line.get(f) for f in VERSION_FIELDS[1:10]})
            return _need(line, {"record": _uuid, "version": _positive, "changed_at": _moment})
    except ValidationFailed as exc:
        return [f"{name}: {' '.join(map(str, messages))}" for name, messages in exc.errors.items()]
    if kind == "domain":
        return _need(line, {"slug": _slug, "name": _text(200), "hybrid_vector_weight": _weight})
    if kind == "knowledge_base":
        return _need(
            line,
            {
                "domain": _slug,
                "name": _slug,
                "description": _text(100_000),
                "read_only": _flag,
                "consolidate": _flag,
                "on_write": lambda value: value in KnowledgeBase.OnWrite.values,
                "refused_writes": _count,
            },
        )
    return _need(
        line,
        {
            "domain": _slug,
            "id": _uuid,
            "created_at": _moment,
            "batch": _uuid,
            "actor": _text(150),
            "selector": lambda value: isinstance(value, dict),
            "by_source": lambda value: isinstance(value, dict),
            "deleted": _count,
            "cancelled_imports": _count,
        },
    )


def _record_problems(line: dict[str, Any]) -> list[str]:
    problems = _need(
        line,
        {
            "id": _uuid,
            "domain": _slug,
            "knowledge_base": _slug,
            "created_at": _moment,
            "version": _positive,
        },
    )
    if not isinstance(line.get("content"), str) or not line["content"]:
        problems.append("content: may not be empty.")
    if line.get("superseded_by") is not None and not _uuid(line["superseded_by"]):
        problems.append("superseded_by: must be a record id.")
    if not isinstance(line.get("derived_from") or [], list) or not all(
        _uuid(x) for x in line.get("derived_from") or []
    ):
        problems.append("derived_from: must be a list of record ids.")
    vector = line.get("embedding")
    if vector is not None and (
        not isinstance(vector, list)
        or not all(isinstance(x, int | float) for x in vector)
        or not isinstance(line.get("embedding_model"), str)
    ):
        problems.append("embedding: must be a list of numbers with its embedding_model.")
    return problems


def _need(line: dict[str, Any], checks: dict[str, Any]) -> list[str]:
    return [
        f"{name}: is missing or malformed." for name, ok in checks.items() if not ok(line.get(name))
    ]


def _when(value: str) -> datetime:
    """A moment of a checked line (:func:`_moment`)."""
    moment = parse_datetime(value)
    assert moment is not None
    return moment


def _uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return isinstance(value, str)


def _slug(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64 and "\x00" not in value


def _moment(value: Any) -> bool:
    try:
        return isinstance(value, str) and parse_datetime(value) is not None
    except ValueError:
        return False


def _text(most: int) -> Any:
    return lambda value: isinstance(value, str) and len(value) <= most and "\x00" not in value


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _weight(value: Any) -> bool:
    return value is None or (
        isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
    )


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31


# --- importing -----------------------------------------------------------------------


@dataclass
class _Receipt:
    key: str | None
    sources: frozenset[str] | None
    erased_at: datetime


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
        self.erasures: dict[tuple[str, Any], list[_Receipt]] = defaultdict(list)
        self.batch: list[dict[str, Any]] = []
        self.created_in: dict[tuple[int, int], int] = defaultdict(int)
        self.embedder = memoryhub_settings.embedder()
        if self.org is not None:
            self._load_receipts()

    def _create_org(self, slug: str) -> None:
        if not policy.allows_anywhere(self.principal, Action.CREATE_ORG):
            raise policy.PolicyDenied(Action.CREATE_ORG)
        self.report.created["org"] = 1
        if not self.report.dry_run:
            name = (self.manifest.get("org") or {}).get("name") or slug
            self.org = Org.objects.create(slug=slug, name=name)

    def _load_receipts(self) -> None:
        assert self.org is not None
        slugs = dict(Domain.objects.filter(org=self.org).values_list("pk", "slug"))
        for receipt in ErasureReceipt.unscoped.filter(org_id=self.org.pk).iterator():
            self._remember(
                slugs.get(receipt.domain_id, receipt.domain_slug),
                receipt.selector,
                receipt.created_at,
            )

    def _remember(self, domain: str, selector: dict[str, Any], erased_at: datetime) -> None:
        """Index one receipt by its domain and namespace hash (``_ANY``: every namespace)."""
        if not isinstance(selector, dict) or selector.get("import_job") is not None:
            return  # an import's undo names records by their import, not their subject
        namespace = selector.get("namespace")
        if (
            namespace is None
            and not selector.get("all")
            and not selector.get("key")
            and not selector.get("sources")
        ):
            return
        sources = selector.get("sources")
        self.erasures[(domain, namespace if namespace is not None else _ANY)].append(
            _Receipt(selector.get("key"), frozenset(sources) if sources else None, erased_at)
        )

    def erased(self, line: dict[str, Any], hashes: dict[str, str]) -> bool:
        """Whether a receipt keeps ``line`` out: one of its namespace (or key, knowledge
        base, domain) made after the record was written."""
        namespace = line.get("namespace") or ""
        if namespace not in hashes:
            hashes[namespace] = salted_hash(namespace)
        written = _when(line["created_at"])
        candidates = self.erasures.get((line["domain"], hashes[namespace]), []) + self.erasures.get(
            (line["domain"], _ANY), []
        )
        for receipt in candidates:
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
        erased_at = _when(line["created_at"])
        self._remember(line["domain"], line.get("selector") or {}, erased_at)
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
            new = self._new_records(batch)
            if not self.report.dry_run and new:
                self._write(new)
        self.report.created["record"] += len(new)
        self.report.created["version"] += sum(len(line["versions"]) for line in new)

    def _new_records(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The lines of ``batch`` to write: not there yet, not erased, not expired,
        their key and id free."""
        hashes: dict[str, str] = {}
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
            reason = self._skip_reason(line, taken, hashes, now)
            if reason:
                self.report.skipped[reason] += 1
            else:
                new.append(line)
        return self._free_keys(new)

    def _skip_reason(
        self, line: dict[str, Any], taken: dict[Any, int], hashes: dict[str, str], now: datetime
    ) -> str:
        owner = taken.get(uuid.UUID(line["target"]))
        if owner is not None:
            return "unchanged" if self.org is not None and owner == self.org.pk else "conflict"
        if self.erased(line, hashes):
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
        held = set()
        for each in keyed:
            kb = self.knowledge_bases.get((each["domain"], each["knowledge_base"]))
            if kb is None:
                continue
            if MemoryRecord.unscoped.filter(
                org_id=kb.org_id,
                knowledge_base=kb,
                namespace=each.get("namespace") or "",
                key=each["key"],
                superseded_by__isnull=True,
            ).exists():
                held.add(each["id"])
        self.report.skipped["conflict"] += len(held)
        return [line for line in lines if line["id"] not in held]

    def _write(self, lines: list[dict[str, Any]]) -> None:
        records = [self._record(line) for line in lines]
        MemoryRecord.unscoped.bulk_create(records)
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
        fields["superseded_by"] = (
            self._id(line["superseded_by"]) if line.get("superseded_by") else None
        )
        fields["derived_from"] = [self._id(source) for source in line.get("derived_from") or []]
        fields["tags"] = list(line.get("tags") or [])
        fields["metadata"] = line.get("metadata") or {}
        fields["namespace"] = line.get("namespace") or ""
        return MemoryRecord(
            id=line["target"],
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
