"""Time-aware conversational memory: when a record's content occurred (``occurred_at``),
through every door that writes, in history and in exports."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from memoryhub.items import MemoryItem
from memoryhub.models import MemoryRecord, RecordVersion
from memoryhub.scope import tenant_scope
from memoryhub.services import history, imports, query, records, write
from memoryhub.services.errors import ValidationFailed
from memoryhub.sources import DjangoMemory, MemoryContext

from .factories import MembershipFactory, create_api_key
from .test_sources_seeds import run

pytestmark = pytest.mark.django_db

MARCH = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)


def client_for(tenant) -> APIClient:  # type: ignore[no-untyped-def]
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


def record(content: str) -> MemoryRecord:
    return MemoryRecord.unscoped.get(content=content)


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- occurred_at on write ------------------------------------------------------------------


def test_occurred_at_defaults_to_when_the_record_was_written(tenant, committed):
    committed(write.write, tenant.scope, [{"content": "Alice asked about refunds."}])
    written = record("Alice asked about refunds.")
    assert written.occurred_at is None  # nothing stored: NULL reads as created_at
    body = client_for(tenant).get(f"/api/v1/domains/support/records/{written.pk}").json()
    assert moment(body["occurred_at"]) == written.created_at
    [item] = query.query(tenant.scope, query="refunds").items
    assert item.occurred_at == written.created_at
    with tenant_scope(tenant.scope):
        assert MemoryRecord.objects.occurred_between(before=written.created_at).count() == 0
        assert MemoryRecord.objects.occurred_between(after=written.created_at).count() == 1


def test_occurred_at_is_kept_through_the_rest_api(tenant):
    api = client_for(tenant)
    response = api.post(
        "/api/v1/domains/support/records",
        {"items": [{"content": "turn one", "occurred_at": "2025-03-01T10:30:00+01:00"}]},
        format="json",
    )
    assert response.status_code == 202, response.json()
    record_id = response.json()["records"][0]["id"]
    assert record("turn one").occurred_at == MARCH
    path = f"/api/v1/domains/support/records/{record_id}"
    patched = api.patch(path, {"occurred_at": "2025-03-02"}, format="json")
    assert patched.status_code == 200, patched.json()
    assert moment(patched.json()["occurred_at"]) == datetime(2025, 3, 2, tzinfo=UTC)
    replaced = api.put(path, {"content": "turn one"}, format="json")  # PUT leaves it unset
    assert replaced.status_code == 200
    assert record("turn one").occurred_at is None
    assert moment(replaced.json()["occurred_at"]) == record("turn one").created_at


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2025-03-01T09:30:00", "must include a time zone."),
        ("yesterday", "must be an ISO 8601 date-time with a time zone, or a date"),
        ("0999-12-31", "must be between 1000-01-01 and 9000-01-01 (UTC)."),
        (20250301, "must be an ISO 8601"),
    ],
)
def test_a_bad_occurred_at_is_a_400_naming_the_item_and_field(tenant, value, message):
    response = client_for(tenant).post(
        "/api/v1/domains/support/records",
        {"items": [{"content": "ok"}, {"content": "bad", "occurred_at": value}]},
        format="json",
    )
    assert response.status_code == 400
    [error] = response.json()["errors"]["items[1].occurred_at"]
    assert error.startswith(message)
    assert not MemoryRecord.unscoped.exists()


@pytest.mark.parametrize(
    ("session", "fine"),
    [
        ("chat-7f3a", True),
        (42, True),
        ("", False),
        (["a"], False),
        (True, False),
        ("x" * 201, False),
    ],
)
def test_a_session_names_a_conversation_with_a_short_string_or_an_integer(tenant, session, fine):
    item = {"content": "turn", "metadata": {"session": session}}
    if fine:
        write.write(tenant.scope, [item])
        return
    with pytest.raises(ValidationFailed) as raised:
        write.write(tenant.scope, [item])
    assert list(raised.value.errors) == ["items[0].metadata.session"]


def test_imports_take_occurred_at_from_jsonl_and_csv(tenant):
    kb = write.ensure_knowledge_base(tenant.scope, "chats")
    for name, format_, text in [
        ("a.jsonl", "jsonl", '{"content": "from jsonl", "occurred_at": "2025-03-01T09:30:00Z"}\n'),
        ("b.csv", "csv", "content,occurred_at,team\nfrom csv,2025-03-01,ops\n"),
    ]:
        job = imports.create_job(tenant.scope, kb, format=format_, filename=name, text=text)
        imports.run_job(job.pk)  # what the worker does
        job.refresh_from_db()
        assert job.status == "done", job.errors
    assert record("from jsonl").occurred_at == MARCH
    assert record("from csv").occurred_at == datetime(2025, 3, 1, tzinfo=UTC)
    assert record("from csv").metadata == {"team": "ops"}
    with pytest.raises(imports.ImportFailed) as raised:
        imports.parse('{"content": "x", "occurred_at": "soon"}\n', "jsonl")
    assert "occurred_at" in raised.value.errors["line 1"][0]


def test_an_export_keeps_when_each_record_occurred(tenant):
    kb = write.ensure_knowledge_base(tenant.scope, "chats")
    write.write(
        tenant.scope,
        [{"content": "said in March", "occurred_at": MARCH}, {"content": "said now"}],
        sources=["chats"],
    )
    lines = [json.loads(line) for line in records.export_lines(kb)]
    assert moment(lines[0]["occurred_at"]) == MARCH
    # Unset, it exports as the creation time: a re-import keeps when it was said.
    assert moment(lines[1]["occurred_at"]) == record("said now").created_at


def test_the_admin_record_form_sets_occurred_at(client, tenant):
    user = MembershipFactory(org=tenant.org, user__is_staff=True, role="operator").user
    client.force_login(user)
    kb = write.ensure_knowledge_base(tenant.scope, "handbook")
    assert "occurred_at" in client.get("/admin/memoryhub/memoryrecord/add/").content.decode()
    response = client.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": kb.pk,
            "namespace": "",
            "kind": "episodic",
            "content": "curated turn",
            "tags": "",
            "metadata": "{}",
            "occurred_at_0": "2025-03-01",
            "occurred_at_1": "09:30:00",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert record("curated turn").occurred_at == MARCH  # the site's TIME_ZONE is UTC


@pytest.mark.django_db(transaction=True)
def test_django_memory_writes_an_items_occurred_at(tenant):
    memory = DjangoMemory(tenant.scope)
    told = MemoryItem("told in March", "memory", occurred_at=MARCH)
    run(memory.write([told], ctx=MemoryContext()))
    assert record("told in March").occurred_at == MARCH
    [item] = run(memory.query("told in March", k=1, ctx=MemoryContext()))
    assert item.occurred_at == MARCH


# --- history ------------------------------------------------------------------------------


def test_history_keeps_occurred_at_and_a_restore_brings_it_back(tenant):
    [result] = write.write(tenant.scope, [{"content": "turn", "key": "t"}]).records
    created = record("turn").created_at
    write.update_record(tenant.scope, result.id, {"occurred_at": MARCH}, partial=True)
    write.update_record(tenant.scope, result.id, {"occurred_at": MARCH}, partial=True)
    states = history.history(tenant.scope, result.id)["versions"]
    assert [(s["version"], s["occurred_at"]) for s in states] == [(2, MARCH), (1, created)]
    assert RecordVersion.unscoped.get(version=1).occurred_at is None  # kept as it was
    write.restore_version(tenant.scope, result.id, 1)
    assert record("turn").occurred_at is None
    body = client_for(tenant).get(f"/api/v1/domains/support/records/{result.id}/history").json()
    assert [moment(s["occurred_at"]) for s in body["versions"]] == [created, MARCH, created]
