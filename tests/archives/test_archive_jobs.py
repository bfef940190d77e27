"""Archives in the admin: an export and an import run as worker jobs whose pages follow
their progress; an export is downloaded while it is kept, by its org's operators only;
any erasure in the org deletes it, and so does the sweeper after ARCHIVE_RETENTION."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta

import pytest
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from memoryhub import policy
from memoryhub.models import ArchiveJob, MemoryRecord
from memoryhub.services import maintenance, write
from memoryhub.services.archives import jobs
from memoryhub.services.forget import ForgetRequest, forget
from tests.factories import DomainFactory, MembershipFactory, OrgFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def acme(committed, tenant):
    committed(
        write.write,
        tenant.scope,
        [{"content": f"fact {n}", "namespace": "user:alice" if n % 2 else ""} for n in range(6)],
    )
    return tenant


def login(client, org, role="operator", **extra):
    user = MembershipFactory(org=org, role=role, user__is_staff=True, **extra).user
    client.force_login(user)
    return user


def test_an_operator_exports_follows_and_downloads(client, committed, acme, other_tenant):
    login(client, acme.org)
    page = client.get("/admin/memoryhub/archivejob/").content.decode()
    assert "Export an org" in page and "Import an archive" in page
    answer = committed(client.post, "/admin/memoryhub/archivejob/export/", {"org": acme.org.pk})
    job = ArchiveJob.unscoped.get()
    assert answer.status_code == 302 and answer["Location"].endswith(f"/{job.pk}/change/")
    assert (job.status, job.done, job.total) == ("done", 6, 6)
    job_page = client.get(answer["Location"]).content.decode()
    assert "6 record" in job_page and "Download" in job_page
    download = client.get(f"/admin/memoryhub/archivejob/{job.pk}/download/")
    body = gzip.decompress(b"".join(download.streaming_content)).decode()
    manifest = json.loads(body.splitlines()[0])
    assert manifest["org"]["slug"] == "acme" and manifest["counts"]["record"] == 6
    # Another org's operator sees no job and downloads nothing.
    client.logout()
    login(client, other_tenant.org, user__username="globex-op")
    assert str(job.pk) not in client.get("/admin/memoryhub/archivejob/").content.decode()
    assert client.get(f"/admin/memoryhub/archivejob/{job.pk}/download/").status_code == 404
    assert client.get(f"/admin/memoryhub/archivejob/{job.pk}/change/").status_code in (302, 404)
    foreign = committed(client.post, "/admin/memoryhub/archivejob/export/", {"org": acme.org.pk})
    assert foreign.status_code == 200 and "Select a valid choice" in foreign.content.decode()
    assert ArchiveJob.unscoped.count() == 1


def test_an_import_runs_as_a_job_and_says_what_it_did(client, committed, acme, tmp_path):
    from memoryhub.services.archives import export_archive

    archive = tmp_path / "acme.jsonl.gz"
    export_archive(acme.org, archive)
    sister = OrgFactory(slug="acme-eu")
    user = login(client, acme.org)
    MembershipFactory(org=sister, role="operator", user=user)
    upload = SimpleUploadedFile("acme.jsonl.gz", archive.read_bytes())
    answer = committed(
        client.post, "/admin/memoryhub/archivejob/import/", {"file": upload, "org": sister.pk}
    )
    assert answer.status_code == 302
    job = ArchiveJob.unscoped.get(kind="import")
    assert job.status == "done", job.error
    assert job.report["created"]["record"] == 6 and job.done == 6
    assert MemoryRecord.unscoped.filter(org=sister).count() == 6
    assert job.file == "" and not default_storage.listdir("memoryhub/archives")[1]
    page = client.get(f"/admin/memoryhub/archivejob/{job.pk}/change/").content.decode()
    assert "6 record" in page
    # A damaged file fails the job by name and writes nothing.
    broken = SimpleUploadedFile(
        "broken.jsonl", b'{"format": "memoryhub-archive", "version": 1}\n{}\n'
    )
    committed(
        client.post, "/admin/memoryhub/archivejob/import/", {"file": broken, "org": sister.pk}
    )
    failed = ArchiveJob.unscoped.filter(kind="import").latest("created_at")
    assert failed.status == "failed" and "archive" in failed.error
    assert MemoryRecord.unscoped.filter(org=sister).count() == 6


def test_a_viewer_may_neither_export_nor_import(client, acme):
    login(client, acme.org, role="viewer")
    assert client.get("/admin/memoryhub/archivejob/export/").status_code == 403
    assert client.get("/admin/memoryhub/archivejob/import/").status_code == 403
    assert client.get("/admin/memoryhub/archivejob/").status_code == 403


def test_an_erasure_or_the_retention_deletes_exports(committed, acme, other_tenant):
    operator = policy.SystemPrincipal(label="admin:op")
    first = jobs.start_export(acme.org, principal=operator)
    theirs = jobs.start_export(other_tenant.org, principal=operator)
    for job in (first, theirs):
        jobs.run_job(str(job.pk))
    first.refresh_from_db()
    kept = first.file
    assert kept and default_storage.exists(kept)
    committed(forget, acme.scope, ForgetRequest(namespace="user:alice"), principal=operator)
    first.refresh_from_db()
    assert first.file == "" and not default_storage.exists(kept)
    theirs.refresh_from_db()
    assert theirs.file and default_storage.exists(theirs.file)  # another org's erasure
    ArchiveJob.unscoped.filter(pk=theirs.pk).update(finished_at=timezone.now() - timedelta(days=2))
    maintenance.sweep()
    theirs.refresh_from_db()
    assert theirs.file == ""
    # A job whose message was lost is sent again by the sweeper.
    lost = ArchiveJob.unscoped.create(org=acme.org, kind="export", total=0)
    ArchiveJob.unscoped.filter(pk=lost.pk).update(created_at=timezone.now() - timedelta(hours=1))
    maintenance.sweep()
    lost.refresh_from_db()
    assert lost.status == "done"


def test_the_export_of_one_domain_counts_its_records(committed, acme):
    sales = DomainFactory(org=acme.org, slug="sales")
    from memoryhub.scope import Scope

    committed(write.write, Scope.for_domain(sales), [{"content": "only sales"}])
    job = jobs.start_export(acme.org, principal=policy.SYSTEM, domain=sales)
    jobs.run_job(str(job.pk))
    job.refresh_from_db()
    assert (job.status, job.total, job.report["counts"]["record"]) == ("done", 1, 1)
