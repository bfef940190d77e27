"""Erasure leaves nothing behind that brings the subject back or still says their words:
queued imports are cancelled and scrubbed, the admin's log keeps no content."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.contenttypes.models import ContentType
from rest_framework.test import APIClient

from memoryhub import policy
from memoryhub.models import ImportJob, KnowledgeBase, MemoryRecord
from memoryhub.services import imports, knowledge_bases, write
from memoryhub.services.forget import ForgetRequest, forget
from tests.factories import create_api_key

pytestmark = pytest.mark.django_db


def jsonl(*items: dict) -> str:
    return "\n".join(json.dumps(item) for item in items)


def queue(tenant, text: str, *, namespace: str = "", kb: str = "memory", filename="x.jsonl"):
    knowledge_base = knowledge_bases.ensure_knowledge_base(tenant.scope, kb)
    return imports.create_job(
        tenant.scope,
        knowledge_base,
        text=text,
        format="jsonl",
        filename=filename,
        namespace=namespace,
        principal=policy.AgentPrincipal(label="admin:ops"),
    )


def text_of(job: ImportJob) -> str:
    return "".join(job.chunks.order_by("seq").values_list("text", flat=True))


def test_a_queued_import_for_the_subject_never_brings_them_back(tenant, other_tenant):
    job = queue(
        tenant,
        jsonl(*({"content": f"Carol fact {n}"} for n in range(201))),
        namespace="user:carol",
        filename="carol-smith-export.jsonl",
    )
    theirs = queue(other_tenant, jsonl({"content": "globex carol"}), namespace="user:carol")
    result = forget(tenant.scope, ForgetRequest(namespace="user:carol"))
    assert result.cancelled_imports == 1
    job.refresh_from_db()
    assert job.status == ImportJob.Status.CANCELLED
    assert (text_of(job), job.filename, job.namespace) == ("", "(erased)", "")
    assert "Carol" not in json.dumps(job.errors)
    # The worker picks the job up later: it imports nothing.
    imports.run_job(job.pk)
    assert not MemoryRecord.unscoped.filter(namespace="user:carol", org=tenant.org).exists()
    # Another org's import for a namespace of the same name is not touched.
    theirs.refresh_from_db()
    assert theirs.status == ImportJob.Status.QUEUED and "globex carol" in text_of(theirs)


def test_an_import_with_lines_for_the_subject_is_cancelled_and_others_are_not(tenant):
    mixed = queue(
        tenant, jsonl({"content": "shared"}, {"content": "Carol!", "namespace": "user:carol"})
    )
    unrelated = queue(tenant, jsonl({"content": "Dave's"}), namespace="user:dave")
    forget(tenant.scope, ForgetRequest(namespace="user:carol"))
    mixed.refresh_from_db()
    unrelated.refresh_from_db()
    assert mixed.status == ImportJob.Status.CANCELLED and text_of(mixed) == ""
    assert unrelated.status == ImportJob.Status.QUEUED and "Dave" in text_of(unrelated)
    # A shared file is not the subject's: it keeps its name.
    assert (mixed.filename, mixed.namespace) == ("x.jsonl", "")


def test_a_finished_import_keeps_no_name_of_the_subject(tenant):
    job = queue(
        tenant,
        jsonl({"content": "Carol likes jazz."}),
        namespace="user:carol",
        filename="carol-smith-export.jsonl",
    )
    imports.run_job(job.pk)
    assert MemoryRecord.unscoped.filter(namespace="user:carol").count() == 1
    forget(tenant.scope, ForgetRequest(namespace="user:carol"))
    job.refresh_from_db()
    assert job.status == ImportJob.Status.DONE
    assert (job.filename, job.namespace) == ("(erased)", "")
    assert not MemoryRecord.unscoped.filter(namespace="user:carol").exists()


def test_a_finished_shared_import_keeps_its_name_and_loses_only_the_subject(tenant, other_tenant):
    lines = [
        {"content": f"{who} fact {n}", "namespace": f"user:{who}"}
        for n in range(5)
        for who in ("alice", "bob")
    ] + [{"content": "A shared line."}]
    shared = queue(tenant, jsonl(*lines), filename="crm-export.jsonl")
    only_alice = queue(
        tenant,
        jsonl({"content": "Alice only.", "namespace": "user:alice"}),
        filename="alice-smith.jsonl",
    )
    theirs = queue(other_tenant, jsonl(*lines), filename="crm-export.jsonl")
    for job in (shared, only_alice, theirs):
        imports.run_job(job.pk)
    shared.refresh_from_db()
    assert sorted(shared.namespaces) == ["", "user:alice", "user:bob"]
    forget(tenant.scope, ForgetRequest(namespace="user:alice"))
    shared.refresh_from_db()
    only_alice.refresh_from_db()
    theirs.refresh_from_db()
    # The shared file keeps its name; the subject's lines are gone, and so is the
    # subject's namespace from what the job says it wrote.
    assert (shared.filename, shared.namespace) == ("crm-export.jsonl", "")
    assert sorted(shared.namespaces) == ["", "user:bob"]
    assert not MemoryRecord.unscoped.filter(org=tenant.org, namespace="user:alice").exists()
    assert MemoryRecord.unscoped.filter(org=tenant.org, namespace="user:bob").count() == 5
    # A file that wrote only the subject's namespace was made for them.
    assert (only_alice.filename, only_alice.namespaces) == ("(erased)", None)
    # The other org's import of the same file is untouched.
    assert theirs.filename == "crm-export.jsonl"
    assert sorted(theirs.namespaces) == ["", "user:alice", "user:bob"]


def test_the_api_forget_cancels_the_import_too(tenant):
    job = queue(tenant, jsonl({"content": "Carol"}), namespace="user:carol")
    _, key = create_api_key(org=tenant.org, can_forget=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    response = client.post(
        f"/api/v1/domains/{tenant.domain.slug}/forget", {"namespace": "user:carol"}, format="json"
    )
    assert response.status_code == 200
    job.refresh_from_db()
    assert job.status == ImportJob.Status.CANCELLED


def test_an_agent_cannot_cancel_a_curated_import(tenant):
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    job = queue(tenant, jsonl({"content": "FAQ answer"}), namespace="faq", kb="handbook")
    forget(tenant.scope, ForgetRequest(namespace="faq"))  # not a subject's namespace
    job.refresh_from_db()
    assert job.status == ImportJob.Status.QUEUED
    assert KnowledgeBase.unscoped.get(name="handbook").refused_writes == 0


def test_a_forget_by_key_cancels_only_imports_that_write_that_key(tenant):
    writes_it = queue(tenant, jsonl({"content": "Carol", "key": "k"}), namespace="user:carol")
    other_key = queue(tenant, jsonl({"content": "Carol 2", "key": "j"}), namespace="user:carol")
    forget(tenant.scope, ForgetRequest(namespace="user:carol", key="k"))
    writes_it.refresh_from_db()
    other_key.refresh_from_db()
    assert writes_it.status == ImportJob.Status.CANCELLED
    assert other_key.status == ImportJob.Status.QUEUED


def test_the_admin_log_never_keeps_a_records_content(tenant, admin_client):
    knowledge_base = knowledge_bases.ensure_knowledge_base(tenant.scope, "memory")
    response = admin_client.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": knowledge_base.pk,
            "namespace": "user:bob",
            "kind": "semantic",
            "content": "Bob Martin is a VIP; his account manager is Carol.",
            "tags": "",
            "metadata": "{}",
        },
    )
    assert response.status_code == 302
    record = MemoryRecord.unscoped.get(namespace="user:bob")
    entries = LogEntry.objects.filter(object_id=str(record.pk))
    assert entries.exists()
    assert not any("Bob" in entry.object_repr for entry in entries)
    assert "Bob" not in admin_client.get("/admin/").text


def test_erasure_drops_the_admin_log_of_erased_records(tenant, admin_client):
    [result] = write.write(
        tenant.scope, [{"content": "Bob Martin is a VIP.", "namespace": "user:bob"}]
    ).records
    [kept] = write.write(tenant.scope, [{"content": "Shared fact."}]).records
    content_type = ContentType.objects.get_for_model(MemoryRecord)
    user = admin_client.get("/admin/").wsgi_request.user
    for record_id, text in ((result.id, "Bob Martin is a VIP."), (kept.id, "Shared fact.")):
        # As written before records stopped putting their content in the log.
        LogEntry.objects.create(
            user=user,
            content_type=content_type,
            object_id=record_id,
            object_repr=text,
            action_flag=ADDITION,
        )
    forget(tenant.scope, ForgetRequest(namespace="user:bob"))
    assert not LogEntry.objects.filter(object_id=result.id).exists()
    assert LogEntry.objects.filter(object_id=kept.id).exists()
    assert "Bob Martin" not in admin_client.get("/admin/").text


def _pg_stats_text() -> str:
    """What ``pg_stats`` holds of memoryhub's tables: on a Citus cluster, on every node
    (the shards' statistics are the workers')."""
    from django.db import connection

    from memoryhub.services.distribution import is_citus

    statement = (
        "SELECT coalesce(string_agg(concat_ws(' ', attname, most_common_vals::text,"
        " histogram_bounds::text, most_common_elems::text), ' | '), '')"
        " FROM pg_stats WHERE tablename LIKE 'memoryhub_%'"
    )
    with connection.cursor() as cursor:
        if is_citus(connection):
            cursor.execute(
                "SELECT string_agg(result, ' | ') FROM run_command_on_all_nodes(%s)", [statement]
            )
        else:
            cursor.execute(statement.replace("%", "%%"))
        return cursor.fetchone()[0] or ""


@pytest.mark.django_db(transaction=True)
def test_postgres_keeps_no_samples_of_personal_columns_and_forgets_the_erased(tenant):
    from django.db import connection

    write.write(
        tenant.scope,
        [
            {
                "content": f"ALICEPII-{n} Alice's IBAN DE89 {n}",
                "key": f"ALICEPII-key-{n}",
                "tags": ["ALICEPII-tag"],
                # The session is also a column of the turns index (its own statistics).
                "metadata": {"iban": "ALICEPII-meta", "session": f"ALICEPII-chat-{n % 3}"},
                "namespace": "user:alice",
            }
            for n in range(50)
        ]
        + [{"content": f"shared fact {n}", "tags": ["common"]} for n in range(50)],
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryhub_memoryrecord")
    sampled = _pg_stats_text()
    assert "user:alice" in sampled  # the namespace is sampled (it is needed for plans)...
    # ...content, key, tags, metadata and the search vector's lexemes never are
    assert "alicepii" not in sampled.lower()
    forget(tenant.scope, ForgetRequest(namespace="user:alice"))  # commits; eager vacuum
    assert "user:alice" not in _pg_stats_text()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT vacuum_count + autovacuum_count FROM pg_stat_user_tables"
            " WHERE relname = 'memoryhub_memoryrecord'"
        )
        assert cursor.fetchone()[0] >= 1


@pytest.mark.django_db(transaction=True)
def test_a_table_an_erasure_empties_keeps_no_statistics_of_it(tenant):
    """ANALYZE of an empty table leaves its old pg_stats: the vacuum step clears them
    (what made the 100-subject end-to-end test fail when autovacuum had analysed the
    import chunks while they existed)."""
    from django.db import connection

    from memoryhub.models import ImportChunk
    from memoryhub.services.forget import vacuum_erased_tables

    kb = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook")
    job = imports.create_job(
        tenant.scope,
        kb,
        format="jsonl",
        filename="bob.jsonl",
        text='{"content": "BOBPII secret"}\n',
        namespace="user:bob",
    )
    # The file's chunks as they are while a big import waits (eager mode ran this one).
    ImportChunk.objects.bulk_create(
        ImportChunk(job=job, org_id=job.org_id, seq=n, text='{"content": "BOBPII secret"}\n')
        for n in range(6)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryhub_importchunk")
    assert "BOBPII" in _pg_stats_text()  # the precondition: sampled while there
    forget(tenant.scope, ForgetRequest(namespace="user:bob"))
    assert "memoryhub_importchunk" in vacuum_erased_tables()
    assert "BOBPII" not in _pg_stats_text()


def test_eager_erasures_each_vacuum_and_queued_ones_share_one_run(tenant, committed, settings):
    from celery import current_app
    from celery.signals import before_task_publish, task_prerun

    settings.MEMORYHUB = {"VACUUM_AFTER_ERASURE": 30}
    for name in ("a", "b", "c", "d"):
        write.write(tenant.scope, [{"content": name, "namespace": f"user:{name}"}])
    ran: list[str] = []
    sent: list[str] = []

    def on_run(sender=None, **kwargs):
        ran.append(sender.name)

    def on_send(sender=None, **kwargs):
        sent.append(sender)

    task_prerun.connect(on_run, weak=False)
    before_task_publish.connect(on_send, weak=False)
    eager = current_app.conf.task_always_eager
    try:
        committed(forget, tenant.scope, ForgetRequest(namespace="user:a"))
        committed(forget, tenant.scope, ForgetRequest(namespace="user:b"))
        assert ran.count("memoryhub.tasks.vacuum_erased") == 2  # eager: each one, at once
        current_app.conf.task_always_eager = False  # a broker (in-memory): one run, later
        committed(forget, tenant.scope, ForgetRequest(namespace="user:c"))
        committed(forget, tenant.scope, ForgetRequest(namespace="user:d"))
    finally:
        current_app.conf.task_always_eager = eager
        task_prerun.disconnect(on_run)
        before_task_publish.disconnect(on_send)
    assert sent.count("memoryhub.tasks.vacuum_erased") == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "selector", [{"namespace": "user:eve"}, {"all": True}, {"sources": ["memory"]}]
)
def test_a_write_in_flight_is_erased_not_left_behind(tenant, selector):
    import threading

    from django.db import connection, transaction

    from tests.programs import wait_for

    knowledge_bases.ensure_knowledge_base(tenant.scope, "memory")
    writing, release = threading.Event(), threading.Event()
    erased: list[int] = []

    def slow_write() -> None:
        with transaction.atomic():
            write.write(tenant.scope, [{"content": "Eve's secret.", "namespace": "user:eve"}])
            writing.set()
            release.wait(timeout=30)
        connection.close()

    def erase() -> None:
        erased.append(forget(tenant.scope, ForgetRequest(**selector)).deleted)
        connection.close()

    writer = threading.Thread(target=slow_write)
    writer.start()
    assert writing.wait(timeout=30)
    eraser = threading.Thread(target=erase)
    eraser.start()

    def eraser_waits() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            return cursor.fetchone()[0] > 0

    wait_for(eraser_waits, timeout=10, what="the erasure to wait for the write's lock")
    release.set()
    writer.join(timeout=30)
    eraser.join(timeout=30)
    assert erased == [1]  # the write committed first, and was erased
    assert not MemoryRecord.unscoped.filter(namespace="user:eve").exists()
