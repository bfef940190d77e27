"""An import reads every line as the REST API reads a body, so a file never fails
half-way in the writer for a reason its validation could have named: a lone surrogate,
a key given twice, a CSV field too long to read are the line's error, with its number,
before anything is written. And a failed import's kept file holds no line of a person
once they are erased."""

from __future__ import annotations

import json

import pytest
from django.db import DatabaseError

from memoryhub import policy
from memoryhub.models import ImportChunk, ImportJob, MemoryRecord
from memoryhub.scope import Scope
from memoryhub.services import imports, knowledge_bases
from memoryhub.services.forget import ForgetRequest, forget
from tests import cluster

pytestmark = pytest.mark.django_db


def queue(scope: Scope, text: str, fmt: str = "jsonl"):
    knowledge_base = knowledge_bases.ensure_knowledge_base(scope, "handbook")
    return imports.create_job(
        scope,
        knowledge_base,
        text=text,
        format=fmt,
        filename=f"shared.{fmt}",
        principal=policy.AgentPrincipal(label="admin:ops"),
    )


def ran(job: ImportJob) -> ImportJob:
    imports.run_job(job.pk)
    job.refresh_from_db()
    return job


def written(scope: Scope) -> int:
    return MemoryRecord.unscoped.filter(org_id=scope.org_id).count()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"content": "half a pair \\ud800 here"}', "content: contains an unpaired UTF-16"),
        ('{"content": "twice", "content": "again"}', "is not JSON"),
        ('{"content": "deep", "metadata": ' + "[" * 100 + "]" * 100 + "}", "nested too deeply"),
        ('{"content": "not a number", "metadata": {"n": NaN}}', "must be a finite number"),
    ],
    ids=["surrogate", "duplicate-key", "depth", "nan"],
)
def test_a_jsonl_line_the_writer_would_refuse_fails_validation_with_its_number(
    tenant, line, message
):
    job = ran(queue(tenant.scope, '{"content": "fine"}\n' + line + '\n{"content": "fine too"}\n'))

    assert job.status == ImportJob.Status.FAILED
    assert list(job.errors) == ["line 2"], job.errors
    assert message in " ".join(job.errors["line 2"])
    assert written(tenant.scope) == 0


def test_a_csv_field_too_long_to_read_is_its_lines_error(tenant):
    text = "content,key\nfine,a\n" + "x" * 140_000 + ",b\nfine too,c\n"

    job = ran(queue(tenant.scope, text, fmt="csv"))

    assert job.status == ImportJob.Status.FAILED
    assert list(job.errors) == ["line 3"], job.errors
    assert "field larger than field limit" in job.errors["line 3"][0]
    assert written(tenant.scope) == 0


def test_csv_columns_of_time_scoped_facts_are_fields_not_metadata(tenant):
    text = (
        "content,key,valid_from,valid_until\n"
        "Alice lives in Lyon,city,2020-01-01T00:00:00Z,2024-01-01T00:00:00Z\n"
    )

    job = ran(queue(tenant.scope, text, fmt="csv"))

    assert job.status == ImportJob.Status.DONE, job.errors
    record = MemoryRecord.unscoped.get(org_id=tenant.org.pk)
    assert (record.valid_from.year, record.valid_until.year) == (2020, 2024)
    assert record.metadata == {}


@cluster.single_node("fails the import's write with a trigger on a tenant table")
def test_a_failed_shared_imports_kept_file_holds_no_line_of_an_erased_subject(
    tenant, other_tenant, cancel
):
    lines = [
        {"content": "Alice's code word is zorblax-7731", "namespace": "user:alice"},
        {"content": "Bob's note", "namespace": "user:bob"},
    ]
    job = queue(tenant.scope, "\n".join(json.dumps(line) for line in lines))
    theirs = queue(other_tenant.scope, json.dumps(lines[0]))
    cancel(MemoryRecord._meta.db_table, 1_000, ("XX000", "the write failed"))
    for each in (job, theirs):
        with pytest.raises(DatabaseError):
            imports.run_job(each.pk)
    job.refresh_from_db()
    assert job.status == ImportJob.Status.FAILED
    assert imports.progress(job)["can_rerun"]  # the file is kept for a re-run

    forget(tenant.scope, ForgetRequest(namespace="user:alice"))

    mine = ImportChunk.objects.filter(org_id=tenant.org.pk, text__contains="zorblax")
    assert not mine.exists()
    job.refresh_from_db()
    assert job.filename == "shared.jsonl"  # a shared file keeps its name
    assert "user:alice" not in (job.namespaces or [])
    assert any("erasure" in message for message in job.errors["file"])
    assert not imports.progress(job)["can_rerun"]
    # Another org's kept file of a namespace of the same name is untouched.
    assert ImportChunk.objects.filter(org_id=other_tenant.org.pk, text__contains="zorblax").exists()
