"""The sweeper sends again what a broker or a dead worker lost, and nothing that still
waits in the broker's queue: a backlog is not multiplied by every sweep.

A real Redis broker of the test's own, with no worker: the messages of a write stay
queued until the test takes them away (as a Redis restarted without persistence does).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import current_app

from memoryhub.models import MemoryRecord
from memoryhub.services import dispatch, indexing, maintenance, write
from tests.programs import RedisServer, celery_broker, start_private_redis, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    server = start_private_redis(tmp_path)
    try:
        with celery_broker(server.url()):
            yield server
    finally:
        server.stop()


def due(ids: list[str]) -> None:
    wait_for(
        lambda: set(indexing.pending_for_sweep()) >= set(ids),
        timeout=10,
        what="the records to be due for the sweeper",
    )


def test_records_whose_messages_still_wait_are_not_sent_again(
    tenant, other_tenant, broker, settings
):
    settings.MEMORYHUB = {"SWEEP_PENDING_AFTER": 1}
    ids = write.write(tenant.scope, [{"content": f"fact {n}"} for n in range(5)]).record_ids
    ids += write.write(other_tenant.scope, [{"content": "globex fact"}]).record_ids
    sent = dispatch.queued("index_records")
    assert sent == 2  # one message per write, waiting for a worker
    due(ids)

    swept = maintenance.sweep()

    assert swept["requeued"] == 0  # nothing added to the backlog
    assert swept["indexing_queued"] >= sent

    # The broker loses its messages (a restart without persistence): now they are sent.
    current_app.control.purge()
    assert dispatch.queued("index_records") == 0
    swept = maintenance.sweep()

    assert swept["requeued"] == 6
    assert (dispatch.queued("index_records") or 0) >= 1
    assert set(MemoryRecord.unscoped.filter(pk__in=ids).values_list("status", flat=True)) == {
        MemoryRecord.Status.PENDING
    }


def test_records_pending_longer_than_a_redelivery_are_sent_again_despite_a_backlog(
    tenant, broker, settings
):
    settings.MEMORYHUB = {"SWEEP_PENDING_AFTER": 1}
    saved = current_app.conf.broker_transport_options
    current_app.conf.broker_transport_options = {"visibility_timeout": 1}
    try:
        ids = write.write(tenant.scope, [{"content": "lost long ago"}]).record_ids
        due(ids)
        assert maintenance.sweep()["requeued"] == 1
    finally:
        current_app.conf.broker_transport_options = saved
