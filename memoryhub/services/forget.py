"""Forgetting memory (GDPR Article 17): hard deletes with an audit trail of counts only.

Rows are deleted (the vectors live in them), the domain's cache generation is bumped and
its cached query results are deleted, queued indexing tasks for the erased ids find
nothing and do nothing, and one ``memory.forgotten`` observation records counts per
knowledge base and a salted hash of the selector, never the content or the namespace in
clear.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.core.cache import caches
from django.db import connection, transaction
from django.db.models import Count, F, Func, JSONField, Q, QuerySet, TextField, Value
from django.utils import timezone

from tenants.models import Domain

from .. import observe, policy, signals
from ..cache import erase_on_commit
from ..conf import memoryhub_settings
from ..exceptions import ReceiptNotFound, UnknownSource, ValidationFailed, WriteRefused
from ..models import (
    ErasureReceipt,
    ImportChunk,
    ImportJob,
    KnowledgeBase,
    MemoryRecord,
    Observation,
    RecordVersion,
)
from ..scope import Scope, tenant_scope
from ..vocabulary import MAX_SOURCE_NAME_LENGTH, ForgetRequestSerializer, field_names
from . import idempotency, imports, word_statistics
from .distribution import distributed_tables, is_citus, org_of
from .records import get_record
from .scheduling import send
from .store.deletion import delete_records
from .store.locks import lock_domain, lock_namespaces
from .store.refusals import refuse, refuse_record_change
from .store.transient import run_again_when_cancelled

logger = logging.getLogger(__name__)

__all__ = [
    "ERASURE_REGISTRY",
    "ForgetRequest",
    "ForgetResult",
    "NothingToForget",
    "forget",
    "forget_knowledge_base",
    "forget_org",
    "forget_record",
    "get_receipt",
    "preview",
    "preview_org",
    "receipts_for_namespace",
    "salted_hash",
    "undo_job",
]


class NothingToForget(ValidationFailed):
    """A forget was malformed or named no selector; forgetting everything needs ``all``."""

    def __init__(
        self,
        message: str = "Name a namespace, key or source, or set all=true.",
        field: str = "non_field_errors",
    ) -> None:
        super().__init__({field: [message]})


@dataclass(frozen=True, slots=True)
class ForgetRequest:
    """What to erase inside a scope. Empty selectors with ``all=False`` are refused.

    ``source`` is a one-name shorthand of ``sources`` (give one or the other). The shared
    namespace (``""``) is every knowledge base's common memory: forgetting it needs an
    explicit ``sources`` list, so an unset variable in a script cannot wipe it.
    """

    namespace: str | None = None
    key: str | None = None
    source: str | None = None
    all: bool = False
    sources: tuple[str, ...] | None = None
    #: The records an import job created (undoing the import).
    import_job: int | None = None

    def __post_init__(self) -> None:  # noqa: C901
        for name in ("namespace", "key", "source"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or "\x00" in value):
                raise NothingToForget("must be a string without NUL characters.", name)
        if self.key is not None and not self.key:
            raise NothingToForget("may not be empty.", "key")
        if self.source is not None and not self.source:
            raise NothingToForget("may not be empty.", "source")
        if not isinstance(self.all, bool):
            raise NothingToForget("must be true or false.", "all")
        if self.sources is not None:
            if self.source is not None:
                raise NothingToForget("give source or sources, not both.", "sources")
            if isinstance(self.sources, str) or not isinstance(self.sources, list | tuple):
                raise NothingToForget("must be a list of knowledge base names.", "sources")
            if not self.sources:
                raise NothingToForget("name at least one knowledge base.", "sources")
            for name in self.sources:
                if (
                    not isinstance(name, str)
                    or not name
                    or "\x00" in name
                    or len(name) > MAX_SOURCE_NAME_LENGTH
                ):
                    raise NothingToForget("must be knowledge base names.", "sources")
            object.__setattr__(self, "sources", tuple(dict.fromkeys(self.sources)))
        elif self.source is not None:
            object.__setattr__(self, "sources", (self.source,))
        if self.import_job is not None and (
            isinstance(self.import_job, bool) or not isinstance(self.import_job, int)
        ):
            raise NothingToForget("must be an import job's id.", "import_job")
        if (
            not self.all
            and self.namespace is None
            and self.key is None
            and self.sources is None
            and self.import_job is None
        ):
            raise NothingToForget()
        if self.namespace == "" and self.key is None and self.sources is None:
            raise NothingToForget(
                'forgetting the shared namespace ("") erases the common memory of every'
                " knowledge base of the domain: name them in sources.",
                "sources",
            )

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ForgetRequest:
        """A forget as a door receives it (a REST body, an MCP tool's arguments): the
        selectors only; any other field is refused by name."""
        unknown = sorted(set(body) - field_names(ForgetRequestSerializer))
        if unknown:
            raise ValidationFailed({name: ["is not a field of a forget."] for name in unknown})
        return cls(
            namespace=body.get("namespace"),
            key=body.get("key"),
            source=body.get("source"),
            sources=body.get("sources"),
            all=body.get("all", False),
        )

    @property
    def is_subject_erasure(self) -> bool:
        """Erasing a data subject's namespace: reaches read-only KBs too."""
        return policy.is_subject_erasure(
            namespace=self.namespace, key=self.key, everything=self.all
        )


@dataclass(slots=True)
class ForgetResult:
    """Counts per knowledge base; ``refused`` names read-only ones that ignored it."""

    deleted: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    cancelled_imports: int = 0
    #: The id of the erasure's permanent receipt (``ErasureReceipt``), if it erased.
    receipt: str | None = None


def salted_hash(value: str) -> str:
    """An HMAC of ``value`` keyed by ``ERASURE_RECEIPT_KEY`` (the site's ``SECRET_KEY``
    when unset): comparable, not reversible; a dedicated key survives rotating the
    secret key, so old receipts can still be looked up."""
    key = memoryhub_settings.ERASURE_RECEIPT_KEY or settings.SECRET_KEY
    return hmac.new(key.encode(), value.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


def _selected(request: ForgetRequest) -> QuerySet[MemoryRecord]:
    records = MemoryRecord.objects.all()
    if request.namespace is not None:
        records = records.filter(namespace=request.namespace)
    if request.key is not None:
        records = records.filter(key=request.key)
    if request.sources is not None:
        records = records.filter(knowledge_base__name__in=request.sources)
    if request.import_job is not None:
        records = records.filter(import_job_id=request.import_job)
    return records


def preview(scope: Scope, request: ForgetRequest) -> dict[str, int]:
    """Counts per knowledge base of what ``forget`` would erase, erasing nothing."""
    with tenant_scope(scope):
        rows = (
            _selected(request)
            .values("knowledge_base__name")
            .annotate(n=Count("id"))
            .order_by("knowledge_base__name")
        )
        return {row["knowledge_base__name"]: row["n"] for row in rows}


def forget(
    scope: Scope,
    request: ForgetRequest,
    *,
    principal: policy.Principal = policy.AGENT,
    batch: uuid.UUID | None = None,
) -> ForgetResult:
    """Hard-delete the records ``request`` selects in ``scope``; return counts per KB.

    ``sources`` naming a knowledge base the domain lacks is :class:`UnknownSource` (a
    misspelt erasure must not look like a success). ``principal`` is who forgets (by
    default an unnamed agent). Read-only knowledge bases whose records the request
    selects refuse the forget unless the policy lets ``principal`` curate in the scope's
    org or it erases a data subject (:mod:`memoryhub.policy`): one whose policy is ``refuse``
    fails the whole request with :class:`WriteRefused` (nothing is deleted; the
    refusal is counted), one whose policy is ``ignore`` keeps its records and is
    reported under ``refused``.

    ``principal`` needs the ``forget`` permission in ``scope``, and ``erase_subject``
    for a whole namespace (:attr:`ForgetRequest.is_subject_erasure`):
    :class:`~memoryhub.exceptions.PolicyDenied` otherwise, nothing deleted.
    """
    policy.require(principal, policy.Action.FORGET, scope)
    if request.is_subject_erasure:
        policy.require(principal, policy.Action.ERASE_SUBJECT, scope)
    result, refusal = run_again_when_cancelled(
        partial(_forget_once, scope, request, principal=principal, batch=batch)
    )
    if refusal is not None:
        raise refusal
    return result


def _forget_once(
    scope: Scope,
    request: ForgetRequest,
    *,
    principal: policy.Principal,
    batch: uuid.UUID | None,
) -> tuple[ForgetResult, WriteRefused | None]:
    """One transaction of :func:`forget` (run again whole if the database cancels it):
    what it erased, and the refusal of a read-only knowledge base if there was one."""
    result = ForgetResult()
    actor = policy.actor_label(principal)
    with transaction.atomic(), tenant_scope(scope):
        if request.sources is not None:
            _check_sources(request.sources)
        # Locks, in the order every writer takes them (import job rows, the domain, the
        # namespaces): a running import or a write in flight commits first and is erased
        # below; one that starts now waits, and is new data.
        imports = _lock_imports(request)
        _lock_writers(scope, request)
        records = _selected(request)
        counts: dict[int, int] = {}
        for kb_id in records.select_for_update(of=("self",)).values_list(
            "knowledge_base_id", flat=True
        ):
            counts[kb_id] = counts.get(kb_id, 0) + 1
        knowledge_bases = {kb.pk: kb for kb in KnowledgeBase.objects.filter(pk__in=counts)}
        refusal = _apply_read_only(scope, request, knowledge_bases, counts, result, principal)
        erased = {kb_id: n for kb_id, n in counts.items() if kb_id in knowledge_bases}
        if refusal is None:
            result.cancelled_imports = _cancel_imports(imports, request, principal)
        if refusal is None and erased:
            _, orphans = delete_records(records.filter(knowledge_base_id__in=erased))
            for kb_id, n in orphans.items():
                erased[kb_id] = erased.get(kb_id, 0) + n
                if kb_id not in knowledge_bases:
                    knowledge_bases[kb_id] = KnowledgeBase.objects.get(pk=kb_id)
            result.deleted = sum(erased.values())
            result.by_source = dict(
                sorted((knowledge_bases[kb_id].name, n) for kb_id, n in erased.items())
            )
        if refusal is None and (result.deleted or result.cancelled_imports):
            # Answers kept for retries may hold what was erased (an update's record).
            idempotency.forget_domain(scope)
            _record_receipt(scope, _selector(request), result, actor, batch)
            _signal(scope, request, result, actor)
    return result, refusal


def _signal(scope: Scope, request: ForgetRequest, result: ForgetResult, actor: str) -> None:
    """Tell the host project (``memoryhub.signals``), once this erasure commits."""
    common = {"scope": scope, "receipt": result.receipt, "deleted": result.deleted, "actor": actor}
    signals.send_on_commit(
        signals.records_forgotten,
        **common,
        by_source=dict(result.by_source),
        selector=_selector(request),
    )
    if request.is_subject_erasure and request.namespace:
        signals.send_on_commit(signals.subject_erased, **common, namespace=request.namespace)


def _lock_writers(scope: Scope, request: ForgetRequest) -> None:
    """Wait for the writes this erasure concerns, and hold off new ones until it commits.

    A namespace's erasure takes the domain's writer lock shared and the (knowledge base,
    namespace) locks writes take; an erasure of whole knowledge bases, of the domain or
    of a key across namespaces takes the domain's writer lock exclusively.
    """
    if request.namespace is None:
        lock_domain(scope, exclusive=True)
        return
    lock_domain(scope)
    knowledge_bases = KnowledgeBase.objects.order_by("pk")
    if request.sources is not None:
        knowledge_bases = knowledge_bases.filter(name__in=request.sources)
    for knowledge_base in knowledge_bases:
        lock_namespaces(knowledge_base, [request.namespace])


#: What an erasure leaves of an import job made for the erased namespace: no file name
#: or namespaces (and no file: ``_drop_files`` deletes its chunks).
ERASED_JOB = {"filename": "(erased)", "namespace": "", "namespaces": None}


def _drop_files(jobs: QuerySet[ImportJob]) -> None:
    # By each job's org and id, not a subquery: on a cluster, the delete goes to the
    # org's shard group only.
    by_org: dict[int, list[int]] = {}
    for org_id, pk in jobs.values_list("org_id", "pk"):
        by_org.setdefault(org_id, []).append(pk)
    for org_id, ids in by_org.items():
        ImportChunk.objects.filter(org_id=org_id, job_id__in=ids).delete()


def _scrub_jobs(jobs: QuerySet[ImportJob], namespace: str | None) -> None:
    """Remove what ``jobs`` say of an erased ``namespace`` (``None``: whole knowledge
    bases or the domain, so every job loses its name).

    A job made for the namespace (chosen as the import's namespace, or the only one its
    file wrote) loses its file name and namespaces: the name may be the subject's. A
    shared file that also held lines for the subject keeps its name and loses the
    namespace from the list of those it wrote.
    """
    if namespace is None:
        jobs.update(**ERASED_JOB)
        return
    made_for = Q(namespace=namespace) | Q(namespaces=[namespace])
    _drop_files(jobs.filter(made_for))
    jobs.filter(made_for).update(**ERASED_JOB)
    _drop_kept_files(jobs.exclude(made_for), namespace)
    jobs.filter(namespaces__contains=[namespace]).exclude(made_for).update(
        namespaces=Func(
            F("namespaces"),
            Value(namespace, output_field=TextField()),
            arg_joiner=" - ",
            template="(%(expressions)s)",
            output_field=JSONField(),
        )
    )


def _drop_kept_files(jobs: QuerySet[ImportJob], namespace: str) -> None:
    """Drop the kept files (a failed import's, kept for a re-run) of ``jobs`` that may
    hold lines of ``namespace``: it is in the namespaces the file writes, they were too
    many to list, or its text names it.

    The whole file goes, not the subject's lines: a line's namespace may come from a
    column, a field, a JSON escape or the import's default, and a file rewritten without
    some of them is one nobody chose to import. The job says why it cannot be run again.
    """
    kept = list(jobs.filter(chunks__isnull=False).distinct().values_list("org_id", "pk"))
    if not kept:
        return
    doomed: set[int] = set(
        jobs.filter(pk__in=[pk for _, pk in kept])
        .filter(Q(namespaces__contains=[namespace]) | Q(namespaces__isnull=True))
        .values_list("pk", flat=True)
    )
    for org_id, pk in kept:
        if (
            pk not in doomed
            and ImportChunk.objects.filter(
                org_id=org_id, job_id=pk, text__contains=namespace
            ).exists()
        ):
            doomed.add(pk)
    if not doomed:
        return
    _drop_files(ImportJob.objects.filter(pk__in=doomed))
    for job in ImportJob.objects.filter(pk__in=doomed):
        errors = dict(job.errors or {})
        errors["file"] = [
            *errors.get("file", []),
            "dropped: an erasure removed a person's data it held; import it again.",
        ]
        ImportJob.objects.filter(pk=job.pk).update(errors=errors)


def _import_jobs(request: ForgetRequest) -> QuerySet[ImportJob]:
    jobs = ImportJob.objects.all()
    if request.sources is not None:
        jobs = jobs.filter(knowledge_base__name__in=request.sources)
    return jobs


def _lock_imports(request: ForgetRequest) -> list[ImportJob]:
    """The scope's unfinished imports that ``request`` may concern, locked.

    A running import holds its row until it commits: the lock waits for it, so its
    records are there to be erased when the erasure selects them. Taken first, in id
    order, as imports take theirs before a write's locks.
    """
    return list(
        _import_jobs(request)
        .select_for_update(of=("self",))
        .select_related("knowledge_base")
        .filter(status__in=(ImportJob.Status.QUEUED, ImportJob.Status.RUNNING))
        .order_by("pk")
    )


def _cancel_imports(
    jobs: list[ImportJob], request: ForgetRequest, principal: policy.Principal
) -> int:
    """Cancel the locked imports that would write what ``request`` erases, and scrub
    what finished ones say of an erased namespace (``_scrub_jobs``).

    A job is cancelled (``failed``, its text dropped) when it names the erased
    namespace or holds a line for it, or when the request erases whole knowledge bases
    or the domain; the task that picks it up later finds it failed and imports nothing.
    An agent's forget leaves imports into read-only knowledge bases alone, as it leaves
    their records (unless it erases a data subject). Returns how many were cancelled.
    """
    cancelled = 0
    for job in jobs:
        if policy.refuses_change(
            [job.knowledge_base],
            principal=principal,
            subject_erasure=request.is_subject_erasure,
        ):
            continue
        if not _job_writes(job, request):
            continue
        _drop_files(ImportJob.objects.filter(pk=job.pk))
        _scrub_jobs(ImportJob.objects.filter(pk=job.pk), request.namespace)
        ImportJob.objects.filter(pk=job.pk).update(
            status=ImportJob.Status.CANCELLED,
            errors={"file": ["cancelled: an erasure removed the data it was importing."]},
            finished_at=timezone.now(),
        )
        cancelled += 1
    if request.namespace and request.key is None:
        finished = _import_jobs(request).exclude(
            status__in=(ImportJob.Status.QUEUED, ImportJob.Status.RUNNING)
        )
        refused = policy.refuses_change(
            KnowledgeBase.objects.filter(pk__in=finished.values("knowledge_base")),
            principal=principal,
            subject_erasure=request.is_subject_erasure,
        )
        _scrub_jobs(finished.exclude(knowledge_base__in=refused), request.namespace)
    return cancelled


def _job_writes(job: ImportJob, request: ForgetRequest) -> bool:
    """Whether the job would write a record ``request`` erases (whole knowledge bases
    and the domain: any job; a namespace and/or a key: a line for it, or when that
    cannot be told cheaply, yes). Undoing an import concerns no other job."""
    if request.import_job is not None:
        return False
    return imports.may_write(job, namespace=request.namespace, key=request.key)


def _check_sources(names: Sequence[str]) -> None:
    """Inside the scope: every named knowledge base exists (``UnknownSource`` otherwise)."""
    found = set(KnowledgeBase.objects.filter(name__in=names).values_list("name", flat=True))
    for name in names:
        if name not in found:
            raise UnknownSource(name)


def _apply_read_only(
    scope: Scope,
    request: ForgetRequest,
    knowledge_bases: dict[int, KnowledgeBase],
    counts: dict[int, int],
    result: ForgetResult,
    principal: policy.Principal,
) -> WriteRefused | None:
    """Count the refusals of read-only knowledge bases among those the request selects
    records in; drop ``ignore`` ones from ``knowledge_bases`` (reported in ``result``),
    and return the refusal of the first ``refuse`` one, if any."""
    refusal: WriteRefused | None = None
    for knowledge_base in policy.refuses_change(
        knowledge_bases.values(),
        principal=principal,
        subject_erasure=request.is_subject_erasure,
    ):
        refused = refuse(
            scope, knowledge_base, counts[knowledge_base.pk], principal, change="forget"
        )
        if refused is None:
            result.refused.append(knowledge_base.name)
            del knowledge_bases[knowledge_base.pk]
        elif refusal is None:
            refusal = refused
    result.refused.sort()
    return refusal


def _selector(request: ForgetRequest) -> dict[str, Any]:
    """The request as a receipt keeps it: namespace and key as keyed hashes."""
    selector: dict[str, Any] = {"all": request.all}
    for name in ("namespace", "key"):
        value = getattr(request, name)
        if value is not None:
            selector[name] = salted_hash(value)
    if request.sources is not None:
        selector["sources"] = list(request.sources)
    if request.import_job is not None:
        selector["import_job"] = request.import_job
    return selector


def _record_receipt(
    scope: Scope,
    selector: dict[str, Any],
    result: ForgetResult,
    actor: str,
    batch: uuid.UUID | None,
) -> None:
    """The permanent receipt and the audit observation (counts and hashes, never the
    content or the namespace), then the cache's erasure and the vacuum after commit."""
    domain = Domain.objects.select_related("org").get(pk=scope.domain_id)
    receipt = ErasureReceipt.unscoped.create(
        actor=actor[:150],
        org_id=scope.org_id,
        org_slug=domain.org.slug,
        domain_id=scope.domain_id,
        domain_slug=domain.slug,
        batch=batch or uuid.uuid4(),
        selector=selector,
        by_source=result.by_source,
        deleted=result.deleted,
        cancelled_imports=result.cancelled_imports,
    )
    result.receipt = str(receipt.pk)
    sources = selector.get("sources") or []
    observe.record_in_scope(
        Observation.Kind.MEMORY_FORGOTTEN,
        scope,
        source=sources[0] if len(sources) == 1 else "",
        count=result.deleted,
        payload={"by_source": result.by_source, "selector": selector, "receipt": result.receipt},
        actor=actor,
    )
    # Counts of the domain's common words may count erased records' words: gone with
    # them, counted again from what remains by the sweeper.
    word_statistics.forget(scope)
    erase_on_commit(scope)
    transaction.on_commit(schedule_vacuum)


#: Every store that can hold a data subject's data, and how an erasure reaches it (or
#: why it need not). ``tests/erasure/test_erasure_registry.py`` fails on a model with a field
#: that may hold subject data and no entry here: a new store must say how it is erased.
ERASURE_REGISTRY: dict[str, str] = {
    "memoryhub.MemoryRecord": "hard-deleted (every knowledge base, read-only ones included)",
    "memoryhub.ImportJob": "unfinished jobs for the subject cancelled; jobs made for the "
    "subject lose file name and namespaces, shared ones the subject's namespace "
    "(_scrub_jobs)",
    "memoryhub.ImportChunk": "the files of cancelled jobs deleted (_drop_files), and the"
    " files failed imports keep for a re-run that may hold the subject's lines"
    " (_drop_kept_files)",
    "memoryhub.RecordVersion": "a record's previous states: deleted with the record (the "
    "foreign key cascades) by every path that deletes records",
    "admin.LogEntry": "entries about erased records deleted (store.deletion); a record's "
    "str() is its kind and id, never content",
    "memoryhub.Observation": "holds counts, knowledge base names and keyed hashes only",
    "memoryhub.ErasureReceipt": "the receipt: counts and the selector as a keyed hash",
    "memoryhub.KnowledgeBase": "operator-curated names and descriptions, not subject data",
    "memoryhub.IdempotentRequest": "answers kept for retries (an update's holds the record):"
    " every erasure in the domain deletes the domain's (idempotency.forget_domain), the"
    " sweeper those older than IDEMPOTENCY_TTL",
    "sessions.Session": "login sessions of staff users, not memory",
    "memoryhub.WordFrequency": "a large domain's common words (held by at least 20 of "
    "its records) and their counts: deleted by every erasure in the domain "
    "(word_statistics.forget), counted again by the sweeper from what remains",
    "memoryhub.WordStatistics": "when a domain's words were counted, and how many "
    "records it held: counts only",
}

#: The tables an erasure deletes from or rewrites, vacuumed and analysed after it.
VACUUM_KEY = "memoryhub:vacuum-scheduled"
ERASED_TABLES = (MemoryRecord, RecordVersion, ImportJob, ImportChunk)


def schedule_vacuum() -> None:
    """After an erasure commits: vacuum and analyse the erased tables within
    ``VACUUM_AFTER_ERASURE`` seconds, so neither dead tuples nor planner samples of
    erased rows outlive it. One run per interval covers every erasure in it."""
    delay = memoryhub_settings.VACUUM_AFTER_ERASURE
    if delay is None:
        return
    if not current_app.conf.task_always_eager:  # eager: it runs now, nothing to merge
        try:
            if not caches[memoryhub_settings.CACHE_ALIAS].add(VACUUM_KEY, 1, timeout=delay + 60):
                return  # a run is already due, and will cover this erasure too
        except Exception as exc:  # the erasure is committed: never fail it
            logger.warning("could not schedule the vacuum after an erasure: %s", exc)
    send(
        "vacuum_erased",
        what="the vacuum after an erasure",
        left="left to autovacuum",
        countdown=delay,
    )


def vacuum_erased_tables() -> list[str]:
    """``VACUUM (ANALYZE)`` the tables erasures touch, and the admin log (it may have
    held a record's content), on the default database; returns the tables vacuumed.

    The scheduling key goes first, so an erasure during the run schedules another. A
    table the database user may not vacuum (PostgreSQL only warns and skips it) is
    logged as an error and left out of the result.
    """
    caches[memoryhub_settings.CACHE_ALIAS].delete(VACUUM_KEY)
    if connection.in_atomic_block:
        # VACUUM cannot run in a transaction (an eager task inside one, in tests).
        logger.warning("vacuum after erasure skipped: inside a transaction")
        return []
    tables = [model._meta.db_table for model in (*ERASED_TABLES, LogEntry)]
    existing = set(connection.introspection.table_names())
    done = []
    with connection.cursor() as cursor:
        for table in tables:
            if table not in existing:
                continue
            cursor.execute(
                "SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class"
                " WHERE oid = %s::regclass",
                [table],
            )
            (owner,) = cursor.fetchone()
            if not owner:
                logger.error("cannot vacuum %s after an erasure: not its owner", table)
                continue
            cursor.execute(f"VACUUM (ANALYZE) {connection.ops.quote_name(table)}")
            _clear_stats_if_empty(cursor, table)
            done.append(table)
    return done


#: On a worker, for shard ``%1$s``: clear its statistics when it is empty.
_CLEAR_SHARD_STATS = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM %1$s) THEN 0 ELSE (
    SELECT count(pg_clear_attribute_stats(s.schemaname::text, s.tablename::text,
                                          s.attname::text, s.inherited))
      FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename
     WHERE c.oid = '%1$s'::regclass AND s.schemaname = current_schema()) END
"""


def _clear_stats_if_empty(cursor: Any, table: str) -> None:
    """ANALYZE of a table left empty keeps its old statistics (PostgreSQL only replaces
    them from a sample of rows): an erasure that emptied it would leave erased values in
    ``pg_stats``. PostgreSQL 18 can clear them (``pg_clear_attribute_stats``, the table
    owner may); on older servers the stale values stay until rows come back and are
    analysed, and an error is logged.

    On a Citus cluster a distributed table's statistics are its shards', on the workers:
    each shard the erasure emptied has its statistics cleared there."""
    if is_citus(connection) and table in distributed_tables(connection):
        cursor.execute(
            "SELECT success, result FROM run_command_on_shards(%s, %s)", [table, _CLEAR_SHARD_STATS]
        )
        for success, result in cursor.fetchall():
            if not success:
                logger.error("clearing the statistics of a shard of %s failed: %s", table, result)
        return
    cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {connection.ops.quote_name(table)})")
    if cursor.fetchone()[0]:
        return
    cursor.execute("SELECT to_regprocedure('pg_clear_attribute_stats(text,text,text,boolean)')")
    if cursor.fetchone()[0] is None:
        cursor.execute(
            "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() AND tablename = %s",
            [table],
        )
        if cursor.fetchone()[0]:
            logger.error("%s is empty after an erasure, and keeps old statistics", table)
        return
    cursor.execute(
        "SELECT pg_clear_attribute_stats(schemaname::text, tablename::text, attname::text,"
        " inherited) FROM pg_stats WHERE schemaname = current_schema() AND tablename = %s",
        [table],
    )


def forget_org(
    org_id: int, *, principal: policy.Principal, batch: uuid.UUID | None = None
) -> ForgetResult:
    """Erase every record of every domain of an org (the admin's org erasure); its
    domains' receipts share one batch."""
    total = ForgetResult()
    batch = batch or uuid.uuid4()
    for domain_id in Domain.objects.filter(org_id=org_id).values_list("pk", flat=True):
        result = forget(
            Scope(org_id, domain_id),
            ForgetRequest(all=True),
            principal=principal,
            batch=batch,
        )
        total.deleted += result.deleted
        for name, count in result.by_source.items():
            total.by_source[name] = total.by_source.get(name, 0) + count
    return total


def forget_record(
    scope: Scope, record_id: Any, *, principal: policy.Principal = policy.AGENT
) -> ForgetResult:
    """Hard-delete one record by id (``RecordNotFound`` if the scope has no such record).

    A record of a read-only knowledge base is refused (``WriteRefused``, counted) unless
    ``principal`` may curate in its org.
    """
    record = get_record(scope, record_id)
    refuse_record_change(scope, record, change="forget", principal=principal)
    knowledge_base = record.knowledge_base
    result = ForgetResult()
    with transaction.atomic(), tenant_scope(scope):
        selected = MemoryRecord.objects.filter(pk=record.pk)
        if not selected.exists():
            return result
        _, orphans = delete_records(selected)
        result.deleted = 1 + sum(orphans.values())
        by_source = {knowledge_base.pk: 1}
        for kb_id, n in orphans.items():
            by_source[kb_id] = by_source.get(kb_id, 0) + n
        names = dict(KnowledgeBase.objects.filter(pk__in=by_source).values_list("pk", "name"))
        result.by_source = {names[kb_id]: n for kb_id, n in sorted(by_source.items())}
        _record_receipt(
            scope,
            {"id": str(record.pk), "sources": [knowledge_base.name]},
            result,
            policy.actor_label(principal),
            None,
        )
    return result


def get_receipt(scope: Scope, receipt_id: Any) -> ErasureReceipt:
    """The scope's erasure receipt ``receipt_id`` (:class:`ReceiptNotFound` otherwise)."""
    try:
        pk = uuid.UUID(str(receipt_id))
    except ValueError:
        raise ReceiptNotFound(receipt_id) from None
    with tenant_scope(scope):
        receipt = ErasureReceipt.objects.filter(pk=pk).first()
    if receipt is None:
        raise ReceiptNotFound(receipt_id)
    return receipt


def receipts_for_namespace(namespace: str) -> QuerySet[ErasureReceipt]:
    """Receipts of erasures of ``namespace`` (looked up by its keyed hash), unscoped:
    the caller narrows them to the orgs it may see."""
    return ErasureReceipt.unscoped.filter(selector__namespace=salted_hash(namespace))


def forget_knowledge_base(scope: Scope, name: str, *, principal: policy.Principal) -> ForgetResult:
    """Erase a knowledge base's records (before the knowledge base itself is deleted)."""
    return forget(scope, ForgetRequest(source=name), principal=principal)


def schedule_knowledge_base_deletion(
    knowledge_base: KnowledgeBase, *, principal: policy.Principal
) -> None:
    """Mark the knowledge base as being deleted (it takes no writes from now) and let a
    worker erase its records and then delete it: a million records is minutes of work,
    never a request's. In eager mode (no broker) it runs when the transaction commits."""
    KnowledgeBase.unscoped.filter(pk=knowledge_base.pk, deleting_since__isnull=True).update(
        deleting_since=timezone.now()
    )
    transaction.on_commit(
        partial(enqueue_knowledge_base_deletion, knowledge_base.pk, principal=principal)
    )


def enqueue_knowledge_base_deletion(knowledge_base_id: int, *, principal: policy.Principal) -> None:
    """Send the deletion to a worker, which acts for ``principal``
    (:func:`memoryhub.policy.principal_for_task`)."""
    send(
        "delete_knowledge_base",
        knowledge_base_id,
        policy.actor_label(principal),
        what=f"deletion of knowledge base {knowledge_base_id}",
        left="left marked for the sweeper",
    )


def delete_knowledge_base(
    knowledge_base_id: int, *, principal: policy.Principal
) -> ForgetResult | None:
    """Erase a knowledge base marked for deletion (with a receipt), then delete it."""
    with transaction.atomic():
        knowledge_base = (
            KnowledgeBase.unscoped.select_for_update()
            .filter(org_id__in=org_of(KnowledgeBase, knowledge_base_id))
            .filter(pk=knowledge_base_id, deleting_since__isnull=False)
            .first()
        )
        if knowledge_base is None:  # already gone, or not marked
            return None
        scope = Scope(knowledge_base.org_id, knowledge_base.domain_id)
        result = forget_knowledge_base(scope, knowledge_base.name, principal=principal)
        knowledge_base.delete()
    return result


def deletions_for_sweep(older_than: timedelta | None = None) -> list[int]:
    """Knowledge bases marked for deletion whose message never arrived."""
    if older_than is None:
        older_than = timedelta(seconds=memoryhub_settings.SWEEP_PENDING_AFTER)
    return list(
        KnowledgeBase.unscoped.filter(deleting_since__lte=timezone.now() - older_than).values_list(
            "pk", flat=True
        )[:100]
    )


def preview_org(org_id: int) -> list[tuple[str, str, int]]:
    """(domain slug, knowledge base, live record count) rows for an org erasure page."""
    rows: list[tuple[str, str, int]] = []
    for domain in Domain.objects.filter(org_id=org_id).order_by("slug"):
        for name, count in preview(Scope(org_id, domain.pk), ForgetRequest(all=True)).items():
            rows.append((domain.slug, name, count))
    return rows


# --- undoing an import ----------------------------------------------------------------


def undoing_for_sweep(older_than: timedelta | None = None) -> list[int]:
    """Undos whose message never arrived."""
    if older_than is None:
        older_than = timedelta(seconds=memoryhub_settings.SWEEP_PENDING_AFTER)
    cutoff = timezone.now() - older_than
    return list(
        ImportJob.unscoped.filter(
            status=ImportJob.Status.UNDOING, updated_at__lte=cutoff
        ).values_list("pk", flat=True)[:100]
    )


def undo_job(scope: Scope, job_id: int, *, principal: policy.Principal) -> ImportJob:
    """Queue the erasure of the records this job created (done by a worker: it can be a
    million records). A running job is cancelled first by the caller."""
    with transaction.atomic():
        job = imports.get_job(scope, job_id, lock=True)
        if job.status not in (
            ImportJob.Status.DONE,
            ImportJob.Status.FAILED,
            ImportJob.Status.CANCELLED,
        ):
            raise imports.JobStateError(f"the import is {job.get_status_display().lower()}.")
        ImportJob.unscoped.filter(pk=job.pk).update(
            status=ImportJob.Status.UNDOING, updated_at=timezone.now()
        )
        ImportChunk.objects.filter(job=job).delete()
        transaction.on_commit(partial(enqueue_undo, job.pk, principal=principal))
    return imports.get_job(scope, job_id)


def enqueue_undo(job_id: int, *, principal: policy.Principal) -> None:
    """Send the undo to a worker, which acts for ``principal``
    (:func:`memoryhub.policy.principal_for_task`)."""
    send(
        "undo_import",
        job_id,
        policy.actor_label(principal),
        what=f"undo of import {job_id}",
        left="left undoing",
    )


def finish_undo(job_id: int, *, principal: policy.Principal) -> ImportJob | None:
    """Erase the job's records (the worker's side of :func:`undo_job`), with a receipt."""
    job = ImportJob.unscoped.filter(pk=job_id).first()
    if job is None or job.status != ImportJob.Status.UNDOING:
        return job
    scope = Scope(job.org_id, job.domain_id)
    with transaction.atomic():
        result = forget(scope, ForgetRequest(import_job=job.pk), principal=principal)
        now = timezone.now()
        ImportJob.unscoped.filter(pk=job.pk).update(
            status=ImportJob.Status.UNDONE,
            receipt=result.receipt or "",
            finished_at=now,
            updated_at=now,
        )
    return ImportJob.unscoped.get(pk=job_id)
