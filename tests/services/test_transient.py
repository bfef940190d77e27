"""Transactions the database cancels (a deadlock, a serialisation failure, a Citus shard
in transition) are run again whole by the use case that opened them: stored once,
erased once, one history version, one observation; past the retries, the doors answer
503 with Retry-After and nothing is stored.

The database itself cancels them here (``tests/cancels.py``).
"""

from __future__ import annotations

import pytest
from django.db import DatabaseError, transaction

from memoryhub.models import MemoryRecord, Observation, RecordVersion
from memoryhub.scope import tenant_scope
from memoryhub.services import updates, write
from memoryhub.services.forget import ForgetRequest, forget
from memoryhub.services.store import transient
from tests import cluster
from tests.cancels import DEADLOCK, SHARD_GONE, trigger_calls
from tests.factories import key_client

pytestmark = [
    pytest.mark.django_db(transaction=True),
    cluster.single_node(
        "cancels with a trigger on a tenant table; Citus refuses triggers on distributed"
        " tables (tests/citus runs a real isolation under writes instead)"
    ),
]

RECORDS = MemoryRecord._meta.db_table


def contents(tenant) -> list[str]:
    with tenant_scope(tenant.scope):
        return sorted(MemoryRecord.objects.values_list("content", flat=True))


def written_observations(tenant) -> int:
    return Observation.unscoped.filter(
        org_id=tenant.org.pk, kind=Observation.Kind.MEMORY_WRITTEN
    ).count()


@pytest.mark.parametrize("error", [DEADLOCK, SHARD_GONE], ids=["deadlock", "shard-in-transition"])
def test_a_write_the_database_cancels_is_run_again_and_stored_once(
    tenant, other_tenant, cancel, error
):
    write.write(other_tenant.scope, [{"content": "globex's note"}])
    cancel(RECORDS, 2, error)

    result = write.write(
        tenant.scope, [{"content": f"fact {n}", "namespace": "user:alice"} for n in range(3)]
    )

    assert trigger_calls() >= 3  # two attempts cancelled, the third stored
    assert contents(tenant) == ["fact 0", "fact 1", "fact 2"]
    assert sorted(result.record_ids) == sorted(
        str(pk)
        for pk in MemoryRecord.unscoped.filter(org_id=tenant.org.pk).values_list("pk", flat=True)
    )
    assert written_observations(tenant) == 1
    assert contents(other_tenant) == ["globex's note"]


def test_an_update_the_database_cancels_is_run_again_with_one_history_version(tenant, cancel):
    [record_id] = write.write(tenant.scope, [{"content": "Alice lives in Lyon."}]).record_ids
    cancel(RECORDS, 1, DEADLOCK)

    updates.update_record(
        tenant.scope, record_id, {"content": "Alice lives in Paris."}, partial=True
    )

    assert contents(tenant) == ["Alice lives in Paris."]
    assert RecordVersion.unscoped.filter(record_id=record_id).count() == 1


def test_a_forget_the_database_cancels_is_run_again_with_one_receipt(tenant, other_tenant, cancel):
    write.write(tenant.scope, [{"content": "Alice's secret", "namespace": "user:alice"}])
    write.write(other_tenant.scope, [{"content": "Alice at Globex", "namespace": "user:alice"}])
    cancel(RECORDS, 1, DEADLOCK)

    result = forget(tenant.scope, ForgetRequest(namespace="user:alice"))

    assert result.deleted == 1
    assert contents(tenant) == []
    assert contents(other_tenant) == ["Alice at Globex"]
    receipts = Observation.unscoped.filter(
        org_id=tenant.org.pk, kind=Observation.Kind.MEMORY_FORGOTTEN
    )
    assert receipts.count() == 1


def test_a_write_cancelled_at_every_attempt_is_a_503_with_retry_after_and_stores_nothing(
    tenant, cancel
):
    cancel(RECORDS, 1000, SHARD_GONE)
    api = key_client(tenant, can_read=True, can_write=True)

    response = api.post(
        "/api/v1/domains/support/records", {"items": [{"content": "never kept"}]}, format="json"
    )

    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "1"
    assert response.json()["code"] == "service_unavailable"
    assert trigger_calls() == transient.ATTEMPTS
    assert contents(tenant) == []


def test_another_internal_error_is_not_run_again(tenant, cancel):
    cancel(RECORDS, 1, ("XX000", "something else broke"))

    with pytest.raises(DatabaseError):
        write.write(tenant.scope, [{"content": "not kept"}])

    assert trigger_calls() == 1
    assert contents(tenant) == []


def test_inside_a_callers_transaction_only_the_caller_can_run_it_again(tenant, cancel):
    cancel(RECORDS, 1, DEADLOCK)

    with pytest.raises(DatabaseError), transaction.atomic():
        write.write(tenant.scope, [{"content": "the caller's to retry"}])

    assert trigger_calls() == 1
    assert contents(tenant) == []
