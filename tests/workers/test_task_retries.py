"""A task whose database goes away (a restart, a failover, a deadlock with a shard move)
is retried with backoff instead of leaving its records to the sweeper minutes later.

The database itself raises the errors (``tests/cancels.py``); the task runs eagerly, as
Celery runs a retry inline then."""

from __future__ import annotations

import pytest

from memoryhub.models import MemoryRecord
from memoryhub.services import write
from memoryhub.services.store import persistence
from memoryhub.tasks import DATABASE_RETRIES, index_records
from tests import cluster
from tests.cancels import CONNECTION_LOST, DEADLOCK, trigger_calls

pytestmark = [
    pytest.mark.django_db(transaction=True),
    cluster.single_node("cancels with a trigger on a tenant table"),
]

RECORDS = MemoryRecord._meta.db_table


def pending(tenant, other_tenant) -> list[str]:
    """Records of two orgs written and then left pending, as a lost message leaves them."""
    ids = write.write(tenant.scope, [{"content": f"fact {n}"} for n in range(3)]).record_ids
    ids += write.write(other_tenant.scope, [{"content": "globex fact"}]).record_ids
    MemoryRecord.unscoped.filter(pk__in=ids).update(**persistence.UNEMBEDDED)
    return ids


@pytest.mark.parametrize("error", [CONNECTION_LOST, DEADLOCK], ids=["connection", "deadlock"])
def test_an_indexing_task_whose_database_went_away_is_retried_and_indexes(
    tenant, other_tenant, cancel, error
):
    ids = pending(tenant, other_tenant)
    cancel(RECORDS, 2, error, on="UPDATE")

    outcome = index_records.apply(args=[ids])

    assert outcome.successful(), outcome.traceback
    assert trigger_calls() > 2
    statuses = set(MemoryRecord.unscoped.filter(pk__in=ids).values_list("status", flat=True))
    assert statuses == {MemoryRecord.Status.INDEXED}


def test_a_database_that_stays_away_fails_the_task_and_leaves_the_records_pending(
    tenant, other_tenant, cancel
):
    ids = pending(tenant, other_tenant)
    cancel(RECORDS, 10_000, CONNECTION_LOST, on="UPDATE")

    outcome = index_records.apply(args=[ids])

    assert outcome.failed()
    statuses = set(MemoryRecord.unscoped.filter(pk__in=ids).values_list("status", flat=True))
    assert statuses == {MemoryRecord.Status.PENDING}  # the sweeper's, later
    assert trigger_calls() >= DATABASE_RETRIES
