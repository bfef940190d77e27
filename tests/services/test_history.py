"""Record history: every change keeps the previous state, through every door, bounded,
tenant-scoped, and erased with the record."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

from memoryhub import policy
from memoryhub.client import HttpMemoryStore, StoredRecord, SyncHttpMemoryStore
from memoryhub.exceptions import RecordNotFound
from memoryhub.models import MemoryRecord, RecordVersion
from memoryhub.scope import Scope
from memoryhub.services import (
    forget,
    history,
    imports,
    knowledge_bases,
    maintenance,
    updates,
    write,
)
from memoryhub.sources import DjangoMemoryStore
from tests.factories import MembershipFactory, create_api_key, key_client


def versions_in_db() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {RecordVersion._meta.db_table}")
        return int(cursor.fetchone()[0])


def summary(found):
    return [(v["version"], v["content"], v["cause"]) for v in found["versions"]]


@pytest.fixture
def client(tenant):
    return key_client(tenant, can_read=True, can_write=True, can_forget=True)


@pytest.fixture
def viewer_client(client, tenant):
    from django.test import Client

    browser = Client()
    browser.force_login(MembershipFactory(org=tenant.org, role="viewer", user__is_staff=True).user)
    return browser


def test_every_api_change_keeps_the_previous_state(client, tenant):
    url = "/api/v1/domains/support/records"
    body = {"items": [{"content": "Alice prefers EUR.", "key": "currency"}]}
    created = client.post(url, body, format="json").json()["records"][0]["id"]
    assert versions_in_db() == 0  # the insert path writes no version
    # PUT replaces every updatable field (the key too): PATCH keeps the key.
    changed = client.patch(f"{url}/{created}", {"content": "Alice prefers GBP."}, format="json")
    assert changed.status_code == 200
    assert client.patch(f"{url}/{created}", {"tags": ["money"]}, format="json").status_code < 300
    body["items"][0]["content"] = "Alice prefers CHF."
    assert client.post(url, body, format="json").status_code < 300  # written again by key
    assert client.post(url, body, format="json").status_code < 300  # the same again: no new version
    answer = client.get(f"{url}/{created}/history")
    assert answer.status_code == 200
    found = answer.json()
    assert found["record"] == created
    assert summary(found) == [
        (4, "Alice prefers CHF.", "upsert"),
        (3, "Alice prefers GBP.", "update"),
        (2, "Alice prefers GBP.", "update"),
        (1, "Alice prefers EUR.", "create"),
    ]
    newest, *_, first = found["versions"]
    assert newest["tags"] == [] and found["versions"][1]["tags"] == ["money"]
    assert newest["actor"].startswith("api-key:") and first["actor"].startswith("api-key:")
    assert set(newest) == {
        "version", "content", "key", "kind", "tags", "metadata", "expires_at",
        "occurred_at", "valid_from", "valid_until", "changed_at", "actor", "cause",
    }  # fmt: skip
    times = [v["changed_at"] for v in found["versions"]]
    assert times == sorted(times, reverse=True)


def test_history_is_tenant_scoped_and_needs_read(client, tenant, other_tenant):
    created = client.post(
        "/api/v1/domains/support/records", {"items": [{"content": "x"}]}, format="json"
    ).json()["records"][0]["id"]
    url = f"/api/v1/domains/support/records/{created}/history"
    intruder = key_client(other_tenant, can_read=True)
    answer = intruder.get(url)
    assert answer.status_code == 404 and answer.json()["code"] == "record_not_found"
    assert key_client(tenant, can_read=False, can_write=True).get(url).status_code == 403
    assert client.get("/api/v1/domains/support/records/not-a-uuid/history").status_code == 404
    with pytest.raises(RecordNotFound):
        history.history(other_tenant.scope, created)


def test_history_is_bounded(tenant, settings):
    settings.MEMORYHUB = {**settings.MEMORYHUB, "HISTORY_VERSIONS": 3}
    [record] = write.write(tenant.scope, [{"content": "v1", "key": "k"}]).records
    for n in range(2, 8):
        write.write(tenant.scope, [{"content": f"v{n}", "key": "k"}])
    assert [v[:2] for v in summary(history.history(tenant.scope, record.id))] == [
        (7, "v7"),
        (6, "v6"),
        (5, "v5"),
        (4, "v4"),
    ]
    assert RecordVersion.unscoped.count() == 3
    settings.MEMORYHUB = {**settings.MEMORYHUB, "HISTORY_VERSIONS": 0}
    write.write(tenant.scope, [{"content": "v8", "key": "k"}])
    assert summary(history.history(tenant.scope, record.id)) == [(8, "v8", "upsert")]


def test_restore_makes_an_old_state_current_as_a_new_version(tenant):
    [record] = write.write(tenant.scope, [{"content": "first", "key": "k", "tags": ["a"]}]).records
    updates.update_record(
        tenant.scope,
        record.id,
        {"content": "second"},
        partial=True,
        principal=policy.AgentPrincipal(label="bob"),
    )
    updates.restore_version(
        tenant.scope, record.id, 1, principal=policy.AgentPrincipal(label="carol")
    )
    assert summary(history.history(tenant.scope, record.id)) == [
        (3, "first", "restore"),
        (2, "second", "update"),
        (1, "first", "create"),
    ]
    current = MemoryRecord.unscoped.get(pk=record.id)
    assert (current.tags, current.changed_by, current.status) == (["a"], "carol", "pending")
    with pytest.raises(RecordNotFound):
        updates.restore_version(tenant.scope, record.id, 99)


def test_imports_and_operator_edits_are_named_in_history(tenant, committed):
    kb = knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    job = imports.create_job(
        tenant.scope,
        kb,
        format="jsonl",
        filename="a.jsonl",
        text='{"content": "Refunds: 5 days.", "key": "refunds"}\n',
    )
    committed(imports.run_job, job.pk)
    record = MemoryRecord.unscoped.get(key="refunds")
    updates.update_record(
        tenant.scope,
        record.pk,
        {"content": "Refunds: 3 days."},
        partial=True,
        principal=policy.SYSTEM,
    )
    job = imports.create_job(
        tenant.scope,
        kb,
        format="jsonl",
        filename="b.jsonl",
        text='{"content": "Refunds: 7 days.", "key": "refunds"}\n',
    )
    committed(imports.run_job, job.pk)
    assert [v[2] for v in summary(history.history(tenant.scope, record.pk))] == [
        "import",
        "admin",
        "import",
    ]


def test_every_erasure_path_leaves_no_version(tenant, other_tenant, committed):
    def written(scope: Scope, namespace: str, key: str) -> str:
        [record] = write.write(
            scope, [{"content": "secret 1", "key": key, "namespace": namespace}]
        ).records
        write.write(scope, [{"content": "secret 2", "key": key, "namespace": namespace}])
        return record.id

    written(tenant.scope, "user:alice", "a")
    by_id = written(tenant.scope, "user:bob", "b")
    expiring = written(tenant.scope, "user:carol", "c")
    kept = written(other_tenant.scope, "user:alice", "a")
    assert versions_in_db() == 4
    forget.forget(tenant.scope, forget.ForgetRequest(namespace="user:alice"))
    forget.forget_record(tenant.scope, by_id)
    MemoryRecord.unscoped.filter(pk=expiring).update(expires_at="2000-01-01T00:00:00Z")
    maintenance.purge_expired()
    assert versions_in_db() == 1  # the other org's
    assert RecordVersion.unscoped.get().record_id == MemoryRecord.unscoped.get(pk=kept).pk
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM {RecordVersion._meta.db_table} WHERE org_id = %s",
            [tenant.org.pk],
        )
        assert cursor.fetchone()[0] == 0
    forget.forget_org(other_tenant.org.pk, principal=policy.SYSTEM)
    assert versions_in_db() == 0


def test_purge_counts_records_not_their_versions(tenant):
    [record] = write.write(tenant.scope, [{"content": "a", "key": "k"}]).records
    write.write(tenant.scope, [{"content": "b", "key": "k"}])
    MemoryRecord.unscoped.filter(pk=record.id).update(expires_at="2000-01-01T00:00:00Z")
    assert maintenance.purge_expired() == 1


def test_admin_record_page_shows_versions_with_a_diff_and_restores(admin_client, tenant):
    [record] = write.write(
        tenant.scope, [{"content": "Refunds take five days.", "key": "r"}]
    ).records
    write.write(tenant.scope, [{"content": "Refunds take three days.", "key": "r"}])
    page = admin_client.get(f"/admin/memoryhub/memoryrecord/{record.id}/change/")
    html = page.content.decode()
    assert html.count('class="mh-version"') == 2
    assert "<del>five</del>" in html and "<ins>three</ins>" in html
    restore = f"/admin/memoryhub/memoryrecord/{record.id}/restore/1/"
    assert restore in html
    assert admin_client.get(restore).status_code == 405
    answer = admin_client.post(restore)
    assert answer.status_code == 302
    assert MemoryRecord.unscoped.get(pk=record.id).content == "Refunds take five days."
    assert summary(history.history(tenant.scope, record.id))[0] == (
        3,
        "Refunds take five days.",
        "restore",
    )
    assert (
        admin_client.post(f"/admin/memoryhub/memoryrecord/{record.id}/restore/9/").status_code
        == 404
    )


def test_a_viewer_sees_history_but_cannot_restore(tenant, viewer_client):
    [record] = write.write(tenant.scope, [{"content": "one", "key": "r"}]).records
    write.write(tenant.scope, [{"content": "two", "key": "r"}])
    html = viewer_client.get(f"/admin/memoryhub/memoryrecord/{record.id}/change/").content.decode()
    assert html.count('class="mh-version"') == 2
    assert "Restore this version" not in html
    answer = viewer_client.post(f"/admin/memoryhub/memoryrecord/{record.id}/restore/1/")
    assert answer.status_code in (403, 404)
    assert MemoryRecord.unscoped.get(pk=record.id).content == "two"


@pytest.mark.django_db(transaction=True)
def test_django_store_history(tenant):
    store = DjangoMemoryStore(tenant.scope)

    async def main():
        await store.put(StoredRecord(scope="user:alice", key="tz", value="Europe/Paris"))
        await store.put(StoredRecord(scope="user:alice", key="tz", value="Europe/Berlin"))
        return await store.history(scope="user:alice", key="tz"), await store.history(
            scope="user:alice", key="nope"
        )

    async def closing():
        try:
            return await main()
        finally:
            await sync_to_async(connections.close_all)()

    versions, missing = asyncio.run(closing())
    assert [(v.version, v.value, v.cause) for v in versions] == [
        (2, "Europe/Berlin", "upsert"),
        (1, "Europe/Paris", "create"),
    ]
    assert missing == []


@pytest.mark.django_db(transaction=True)
def test_http_store_history(live_server, tenant):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True)
    remote = HttpMemoryStore(live_server.url, api_key=key, domain="support")
    blocking = SyncHttpMemoryStore(live_server.url, api_key=key, domain="support")
    blocking.put(StoredRecord(scope="user:alice", key="tz", value={"city": "Paris"}))
    asyncio.run(remote.put(StoredRecord(scope="user:alice", key="tz", value={"city": "Rome"})))
    versions = asyncio.run(remote.history(scope="user:alice", key="tz"))
    assert [(v.version, v.value, v.cause) for v in versions] == [
        (2, {"city": "Rome"}, "upsert"),
        (1, {"city": "Paris"}, "create"),
    ]
    assert blocking.history(scope="user:alice", key="tz") == versions
    assert blocking.history(scope="user:bob", key="tz") == []


def test_the_update_names_moved_to_updates_still_answer_from_write_with_a_warning():
    from memoryhub.services import write

    for name in ("update_record", "update_record_for", "restore_version", "Updated"):
        with pytest.warns(DeprecationWarning, match=f"memoryhub.services.updates.{name}"):
            assert getattr(write, name) is getattr(updates, name)
    with pytest.raises(AttributeError):
        write.no_such_name  # noqa: B018
