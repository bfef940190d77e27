"""What an erasure does to imports: running ones of the erased namespace cancelled, their
kept files and rows scrubbed."""

from __future__ import annotations

import logging

from django.db.models import F, Func, JSONField, Q, QuerySet, TextField, Value
from django.utils import timezone

from ... import policy
from ...models import (
    ImportChunk,
    ImportJob,
    KnowledgeBase,
)
from .. import imports
from .request import ForgetRequest

logger = logging.getLogger(__name__)


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


def lock_imports(request: ForgetRequest) -> list[ImportJob]:
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


def cancel_imports(
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
