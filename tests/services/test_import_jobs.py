"""Imports are jobs with a lifecycle: stored in chunks and streamed, validated before a
line is written, written in batches that commit with their progress, cancelled, resumed,
re-run and undone (exactly the records the job created, with a receipt), per tenant."""

from __future__ import annotations

import json
from functools import partial

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from memoryhub import policy
from memoryhub.models import ErasureReceipt, ImportChunk, ImportJob, MemoryRecord
from memoryhub.scope import Scope
from memoryhub.services import forget, imports, knowledge_bases, write
from memoryhub.services.forget import ForgetRequest
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db


def jsonl(n: int, start: int = 0, **extra: object) -> str:
    return "\n".join(json.dumps({"content": f"fact {i}", **extra}) for i in range(start, start + n))


def queue(scope: Scope, text: str, *, kb: str = "handbook", fmt: str = "jsonl", **kwargs):
    knowledge_base = knowledge_bases.ensure_knowledge_base(scope, kb)
    return imports.create_job(
        scope, knowledge_base, text=text, format=fmt, filename=f"f.{fmt}", **kwargs
    )


def created_by(job: ImportJob) -> int:
    return MemoryRecord.unscoped.filter(import_job=job).count()


def test_a_file_is_stored_in_chunks_of_whole_lines_and_streamed(tenant, monkeypatch):
    monkeypatch.setattr(imports.jobs, "STORED_CHUNK_BYTES", 200)
    # A CSV field with a newline inside quotes, across many chunks.
    rows = [f'"line one of {i}\nline two of {i}",k{i}' for i in range(40)]
    job = queue(tenant.scope, "content,key\n" + "\n".join(rows) + "\n", fmt="csv")
    chunks = list(job.chunks.order_by("seq").values_list("text", flat=True))
    assert len(chunks) > 5 and all(chunk.endswith("\n") for chunk in chunks)
    imports.run_job(job.pk)
    job.refresh_from_db()
    assert (job.status, job.total, job.imported) == ("done", 40, 40)
    record = MemoryRecord.unscoped.get(key="k17")
    assert record.content == "line one of 17\nline two of 17"
    assert not ImportChunk.objects.filter(job=job).exists()  # the file goes when done


def test_validation_fails_the_job_before_a_line_is_written(tenant):
    job = queue(tenant.scope, jsonl(700) + '\n{"content": ""}\n' + jsonl(5, 700))
    imports.run_job(job.pk)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.FAILED
    assert job.errors == {"line 701": ["content: may not be blank."]}
    assert created_by(job) == 0 and job.imported == 0
    assert not job.chunks.exists()  # nothing to re-run: the file must be fixed


def test_a_resumed_job_writes_only_what_its_committed_batches_did_not(tenant):
    job = queue(tenant.scope, jsonl(25))
    # A worker validated the file and committed the first 10 items, then died.
    ImportJob.unscoped.filter(pk=job.pk).update(status="running", validated=True, total=25)
    job.refresh_from_db()
    imports.jobs._write_batch(job, tenant.scope, [{"content": f"fact {i}"} for i in range(10)])
    imports.run_job(job.pk)  # the redelivered message
    job.refresh_from_db()
    assert (job.status, job.imported, created_by(job)) == ("done", 25, 25)
    assert MemoryRecord.unscoped.filter(content="fact 3").count() == 1


def test_cancel_stops_at_the_next_batch_and_undo_erases_exactly_what_the_job_created(
    tenant, other_tenant
):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    write.write(
        tenant.scope,
        [{"content": "fact 2"}, {"content": "old text", "key": "kept"}],
        sources=["handbook"],
    )
    theirs = queue(other_tenant.scope, jsonl(3))
    imports.run_job(theirs.pk)
    text = jsonl(20) + "\n" + json.dumps({"content": "new text", "key": "kept"})
    job = queue(tenant.scope, text)
    ImportJob.unscoped.filter(pk=job.pk).update(status="running", validated=True, total=21)
    job.refresh_from_db()
    imports.jobs._write_batch(job, tenant.scope, [{"content": f"fact {i}"} for i in range(10)])
    imports.cancel_job(tenant.scope, job.pk, principal=policy.SystemPrincipal(label="admin:ops"))
    imports.run_job(job.pk)  # the worker's next batch finds it cancelled
    job.refresh_from_db()
    assert (job.status, job.imported) == ("cancelled", 10)
    # "fact 2" existed before: deduplicated, not created by the job.
    assert created_by(job) == 9

    forget.undo_job(tenant.scope, job.pk, principal=policy.SystemPrincipal(label="admin:ops"))
    # The worker's side (eager here): the task carries the label, and acts for it.
    forget.finish_undo(job.pk, principal=policy.principal_for_task("admin:ops"))
    job.refresh_from_db()
    assert job.status == ImportJob.Status.UNDONE and created_by(job) == 0
    receipt = ErasureReceipt.unscoped.get(pk=job.receipt)
    assert (receipt.deleted, receipt.selector["import_job"]) == (9, job.pk)
    assert receipt.actor == "admin:ops"
    assert MemoryRecord.unscoped.filter(content="fact 2", org=tenant.org).count() == 1
    assert MemoryRecord.unscoped.get(key="kept").content == "old text"
    assert created_by(theirs) == 3  # the other org's import is untouched
    with pytest.raises(imports.JobStateError):
        forget.undo_job(tenant.scope, job.pk, principal=policy.SYSTEM)


def test_another_orgs_job_is_not_found_by_its_id(tenant, other_tenant):
    theirs = queue(other_tenant.scope, jsonl(3))
    undo = partial(forget.undo_job, principal=policy.SYSTEM)
    for act in (imports.cancel_job, imports.rerun_job, undo):
        with pytest.raises(ImportJob.DoesNotExist):
            act(tenant.scope, theirs.pk)
    assert ImportJob.unscoped.get(pk=theirs.pk).status == ImportJob.Status.QUEUED


def test_a_failed_job_runs_again_from_where_it_stopped(tenant):
    job = queue(tenant.scope, jsonl(12))
    ImportJob.unscoped.filter(pk=job.pk).update(status="running", validated=True, total=12)
    job.refresh_from_db()
    imports.jobs._write_batch(job, tenant.scope, [{"content": f"fact {i}"} for i in range(5)])
    imports.jobs._finish(job.pk, ImportJob.Status.FAILED, {"file": ["OperationalError: gone"]})
    imports.rerun_job(tenant.scope, job.pk)
    imports.run_job(job.pk)
    job.refresh_from_db()
    assert (job.status, job.imported, created_by(job)) == ("done", 12, 12)


def test_an_erasure_mid_import_cancels_it_and_scrubs_the_subjects_traces(tenant):
    text = jsonl(6, namespace="user:carol") + "\n" + jsonl(6, 6, namespace="user:dave")
    job = queue(
        tenant.scope, text, namespace="", principal=policy.SystemPrincipal(label="admin:ops")
    )
    imports.jobs._claim(job.pk)  # a worker is on it
    imports.jobs._release(job.pk)
    ImportJob.unscoped.filter(pk=job.pk).update(status="running")
    job.refresh_from_db()
    assert imports.jobs._validate(job)
    job.refresh_from_db()
    assert job.namespaces == ["user:carol", "user:dave"]
    imports.jobs._write_batch(
        job, tenant.scope, [json.loads(line) for line in text.splitlines()[:3]]
    )
    result = forget.forget(tenant.scope, ForgetRequest(namespace="user:carol"))
    assert (result.deleted, result.cancelled_imports) == (3, 1)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.CANCELLED
    # A shared file keeps its name; the subject's namespace leaves its list.
    assert job.namespaces == ["user:dave"] and not job.chunks.exists()
    assert job.filename != "(erased)"
    imports.run_job(job.pk)
    assert not MemoryRecord.unscoped.filter(namespace="user:carol").exists()


# --- through the admin ------------------------------------------------------------------


def _member(client, org, role):
    user = MembershipFactory(org=org, role=role, user__is_staff=True).user
    client.force_login(user)
    return client


def test_the_admin_import_never_runs_in_the_request_and_can_be_undone(
    client, tenant, other_tenant, committed
):
    from celery import current_app

    handbook = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    operator = _member(client, tenant.org, "operator")
    url = f"/admin/memoryhub/knowledgebase/{handbook.pk}/import/"
    current_app.conf.task_always_eager = False  # a broker with no worker yet
    try:
        response = committed(
            operator.post, url, {"file": SimpleUploadedFile("a.jsonl", jsonl(30).encode())}
        )
    finally:
        current_app.conf.task_always_eager = True
    assert response.status_code == 302
    job = ImportJob.unscoped.get()
    assert job.status == ImportJob.Status.QUEUED and created_by(job) == 0
    progress_url = f"/admin/memoryhub/knowledgebase/{handbook.pk}/import/{job.pk}/progress/"
    assert operator.get(progress_url).json()["can_cancel"] is True

    imports.run_job(job.pk)  # the worker
    progress = operator.get(progress_url).json()
    assert (progress["status"], progress["imported"], progress["created"]) == ("done", 30, 30)
    assert progress["can_undo"] is True
    page = operator.get(f"/admin/memoryhub/knowledgebase/{handbook.pk}/change/").content.decode()
    assert f'id="import-{job.pk}"' in page and "Undo import" in page

    undo = f"/admin/memoryhub/knowledgebase/{handbook.pk}/import/{job.pk}/undo/"
    assert operator.get(undo).status_code == 405
    assert committed(operator.post, undo).status_code == 302
    job.refresh_from_db()
    assert job.status == ImportJob.Status.UNDONE and created_by(job) == 0
    page = operator.get(f"/admin/memoryhub/knowledgebase/{handbook.pk}/change/").content.decode()
    assert f"/admin/memoryhub/erasurereceipt/{job.receipt}/change/" in page


@pytest.mark.parametrize("role", ["viewer", "stranger"])
def test_viewers_and_other_orgs_cannot_cancel_or_undo(client, tenant, other_tenant, role):
    handbook = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    job = queue(tenant.scope, jsonl(3))
    imports.run_job(job.pk)
    org = tenant.org if role == "viewer" else other_tenant.org
    user = _member(client, org, "viewer" if role == "viewer" else "operator")
    for what in ("cancel", "undo", "rerun"):
        response = user.post(
            f"/admin/memoryhub/knowledgebase/{handbook.pk}/import/{job.pk}/{what}/"
        )
        assert response.status_code in (403, 404)
    progress = user.get(f"/admin/memoryhub/knowledgebase/{handbook.pk}/import/{job.pk}/progress/")
    assert progress.status_code == (200 if role == "viewer" else 404)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.DONE and created_by(job) == 3


def test_a_job_cancelled_during_validation_does_not_record_the_subjects_namespaces(tenant):
    job = queue(tenant.scope, jsonl(3, namespace="user:carol"))
    ImportJob.unscoped.filter(pk=job.pk).update(status="running")
    job.refresh_from_db()
    forget.forget(tenant.scope, ForgetRequest(namespace="user:carol"))  # cancels it meanwhile
    assert imports.jobs._validate(job) is False
    job.refresh_from_db()
    assert (job.status, job.namespaces, job.validated) == ("cancelled", None, False)
