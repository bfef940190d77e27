"""Safe retries with ``Idempotency-Key``: a retried write, update or forget acts once and
is answered as the first time (status and body), a key reused with another request is
refused, keys belong to their sender, and an erasure leaves no kept answer behind."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connections

from memoryhub.models import IdempotentRequest, MemoryRecord, Observation, RecordVersion
from memoryhub.services import idempotency, knowledge_bases, maintenance, updates, write
from tests import cluster
from tests.cancels import DEADLOCK
from tests.factories import key_client

pytestmark = pytest.mark.django_db

RECORDS = "/api/v1/domains/support/records"
FORGET = "/api/v1/domains/support/forget"


def post(api, url, body, key, **extra):
    return api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key, **extra)


def stored(tenant) -> list[str]:
    return sorted(
        MemoryRecord.unscoped.filter(org_id=tenant.org.pk).values_list("content", flat=True)
    )


def test_a_retried_write_is_stored_once_and_answered_as_the_first_time(tenant, other_tenant):
    api = key_client(tenant, can_read=True, can_write=True)
    body = {"items": [{"content": "Alice likes tea", "namespace": "user:alice"}]}

    first = post(api, RECORDS, body, "write-1")
    again = post(api, RECORDS, body, "write-1")

    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert not first.has_header("Idempotent-Replayed")
    assert stored(tenant) == ["Alice likes tea"]
    # Another org's sender with the same key writes its own record.
    globex = key_client(other_tenant, can_read=True, can_write=True)
    assert post(globex, RECORDS, body, "write-1").status_code == 202
    assert stored(other_tenant) == ["Alice likes tea"]
    # Another key of the same org is another sender.
    other_key = key_client(tenant, can_read=True, can_write=True)
    assert not post(other_key, RECORDS, body, "write-1").has_header("Idempotent-Replayed")


def test_a_key_sent_again_with_another_request_is_refused_and_writes_nothing(tenant):
    api = key_client(tenant, can_write=True)
    post(api, RECORDS, {"items": [{"content": "first"}]}, "k")

    reused = post(api, RECORDS, {"items": [{"content": "second"}]}, "k")

    assert reused.status_code == 422
    assert reused.json()["code"] == "idempotency_key_reused"
    assert list(reused.json()["errors"]) == ["Idempotency-Key"]
    assert stored(tenant) == ["first"]


@pytest.mark.parametrize("key", ["", "x" * 256, "clé", "tab\there"])
def test_an_unusable_key_is_a_400_naming_the_header(tenant, key):
    api = key_client(tenant, can_write=True)

    response = post(api, RECORDS, {"items": [{"content": "never kept"}]}, key)

    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["Idempotency-Key"]
    assert stored(tenant) == []


def test_a_retried_update_makes_one_version_and_answers_the_same_record(tenant):
    api = key_client(tenant, can_read=True, can_write=True)
    [record_id] = write.write(tenant.scope, [{"content": "Alice lives in Lyon"}]).record_ids
    url = f"{RECORDS}/{record_id}"

    first = api.patch(
        url, {"content": "Alice lives in Paris"}, format="json", HTTP_IDEMPOTENCY_KEY="u"
    )
    updates.update_record(tenant.scope, record_id, {"content": "Alice lives in Rome"}, partial=True)
    again = api.patch(
        url, {"content": "Alice lives in Paris"}, format="json", HTTP_IDEMPOTENCY_KEY="u"
    )

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.json()["content"] == "Alice lives in Paris"
    assert stored(tenant) == ["Alice lives in Rome"]  # the retry did not act
    assert RecordVersion.unscoped.filter(record_id=record_id).count() == 2


def test_a_retried_forget_erases_once_with_one_receipt(tenant, other_tenant):
    api = key_client(tenant, can_read=True, can_write=True, can_forget=True)
    write.write(tenant.scope, [{"content": "Bob's note", "namespace": "team:bob"}])

    first = post(api, FORGET, {"namespace": "team:bob"}, "f")
    write.write(tenant.scope, [{"content": "Bob's new note", "namespace": "team:bob"}])
    again = post(api, FORGET, {"namespace": "team:bob"}, "f")

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert first.json()["deleted"] == 1
    assert stored(tenant) == ["Bob's new note"]
    receipts = Observation.unscoped.filter(
        org_id=tenant.org.pk, kind=Observation.Kind.MEMORY_FORGOTTEN
    )
    assert receipts.count() == 1


def test_a_refusal_is_not_kept_and_a_retry_is_refused_again(tenant):
    knowledge_bases.ensure_knowledge_base(
        tenant.scope, "handbook", read_only=True, on_write="refuse"
    )
    api = key_client(tenant, can_write=True)
    body = {"source": "handbook", "items": [{"content": "not allowed"}]}

    first = post(api, RECORDS, body, "r")
    again = post(api, RECORDS, body, "r")

    assert first.status_code == again.status_code == 403
    assert not again.has_header("Idempotent-Replayed")
    assert IdempotentRequest.unscoped.count() == 0
    refused = Observation.unscoped.filter(
        org_id=tenant.org.pk, kind=Observation.Kind.MEMORY_WRITE_REFUSED
    )
    assert sum(refused.values_list("count", flat=True)) == 2  # each refusal counted


def test_an_erasure_leaves_no_kept_answer_and_a_retry_after_it_does_not_replay_content(tenant):
    api = key_client(tenant, can_read=True, can_write=True, can_forget=True)
    [record_id] = write.write(
        tenant.scope, [{"content": "Alice's secret plan", "namespace": "user:alice"}]
    ).record_ids
    url = f"{RECORDS}/{record_id}"
    body = {"content": "Alice's secret plan, revised"}
    assert api.patch(url, body, format="json", HTTP_IDEMPOTENCY_KEY="p").status_code == 200
    assert IdempotentRequest.unscoped.filter(org_id=tenant.org.pk).count() == 1

    assert api.post(FORGET, {"namespace": "user:alice"}, format="json").status_code == 200

    assert IdempotentRequest.unscoped.filter(org_id=tenant.org.pk).count() == 0
    retried = api.patch(url, body, format="json", HTTP_IDEMPOTENCY_KEY="p")
    assert retried.status_code == 404
    assert "secret" not in retried.content.decode()


def test_kept_answers_expire(tenant, settings):
    api = key_client(tenant, can_write=True)
    post(api, RECORDS, {"items": [{"content": "kept a while"}]}, "e")
    settings.MEMORYHUB = {"IDEMPOTENCY_TTL": 1}
    IdempotentRequest.unscoped.update(created_at="2020-01-01T00:00:00Z")

    maintenance.purge_expired()

    assert IdempotentRequest.unscoped.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_write_waited_for_keeps_its_final_answer(tenant):
    api = key_client(tenant, can_read=True, can_write=True)
    body = {"items": [{"content": "indexed before the answer"}]}

    first = post(api, RECORDS + "?wait=5", body, "w")
    again = post(api, RECORDS + "?wait=5", body, "w")

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert first.json()["records"][0]["status"] == "indexed"


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_act_once(tenant):
    api_key_client = key_client(tenant, can_write=True)
    body = {"items": [{"content": "sent twice at once"}]}
    answers: list[tuple[int, object]] = []
    start = threading.Barrier(4)

    def send() -> None:
        try:
            start.wait()
            response = post(api_key_client, RECORDS, body, "c")
            answers.append((response.status_code, response.json()))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert stored(tenant) == ["sent twice at once"]
    assert len(answers) == 4
    assert {status for status, _ in answers} == {202}
    assert len({json.dumps(body, sort_keys=True) for _, body in answers}) == 1


@pytest.mark.django_db(transaction=True)
@cluster.single_node("cancels with a trigger on a tenant table")
def test_a_keyed_write_the_database_cancels_once_is_stored_once_and_replayed(tenant, cancel):
    api = key_client(tenant, can_write=True)
    cancel(MemoryRecord._meta.db_table, 1, DEADLOCK)
    body = {"items": [{"content": "cancelled once"}]}

    first = post(api, RECORDS, body, "d")
    again = post(api, RECORDS, body, "d")

    assert first.status_code == 202, first.content
    assert again.json() == first.json()
    assert stored(tenant) == ["cancelled once"]


def test_the_fingerprint_tells_requests_apart():
    same = idempotency.fingerprint("POST", "/a", b"{}")
    assert same == idempotency.fingerprint("post", "/a", b"{}")
    assert same != idempotency.fingerprint("PATCH", "/a", b"{}")
    assert same != idempotency.fingerprint("POST", "/a/", b"{}")
    assert idempotency.fingerprint("POST", "/ab", b"c") != idempotency.fingerprint(
        "POST", "/a", b"bc"
    )
