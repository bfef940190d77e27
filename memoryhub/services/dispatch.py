"""Sending work to the workers: a task by name, or, when the broker refuses it, the work
left in a state the sweeper finds (``services/maintenance.py``).

Services decide *what* to send; this module only sends. It never imports
``memoryhub.tasks`` (the tasks import the services): a task is looked up by name in the
Celery app's registry, so the direction of calls is one way, front doors → services.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

from celery import current_app
from django.db import transaction

from ..conf import memoryhub_settings

__all__ = ["TASKS_MODULE", "queued", "redelivery_after", "schedule_indexing", "send"]

logger = logging.getLogger(__name__)

#: Where memoryhub's tasks are defined (registered with Celery when it is imported).
TASKS_MODULE = "memoryhub.tasks"


def _task(name: str) -> Any:
    full = f"{TASKS_MODULE}.{name}"
    if full not in current_app.tasks:
        # Not registered yet in this process (a host whose Celery app did not
        # autodiscover, a script): importing the module registers every task.
        importlib.import_module(TASKS_MODULE)
    return current_app.tasks[full]


def send(name: str, *args: Any, what: str, left: str, countdown: float = 0) -> bool:
    """Send the task ``name`` with ``args`` (eagerly run when tasks are eager); when the
    broker refuses it (down, unreachable), log why and leave the work to the sweeper,
    which finds it by its state (``left``: what that state is). Returns whether it went.

    The caller's data is committed: a refused send must not turn into an error.
    """
    try:
        _task(name).apply_async(args, countdown=countdown)
    except Exception as exc:  # kombu's OperationalError, or whatever the transport raises
        logger.warning(
            "could not enqueue %s, %s for the sweeper: %s: %s", what, left, type(exc).__name__, exc
        )
        return False
    return True


def queued(name: str) -> int | None:
    """How many messages wait in the queue the task ``name`` is sent to (0 when tasks
    run eagerly); None when the broker cannot tell (down, unreachable)."""
    if current_app.conf.task_always_eager:
        return 0
    full = f"{TASKS_MODULE}.{name}"
    queue = current_app.amqp.router.route({}, full, args=(), kwargs={})["queue"]
    try:
        with current_app.connection_for_read() as connection:
            channel = connection.default_channel
            try:
                return int(channel.queue_declare(queue=queue.name, passive=True).message_count)
            except connection.channel_errors:
                return 0  # no such queue yet: nothing was ever sent to it, or all taken
    except Exception as exc:  # the transport's connection errors
        logger.warning("could not count the messages queued for %s: %s", name, exc)
        return None


def redelivery_after() -> float:
    """Seconds after which the broker delivers again a message a dead worker took
    (Redis's and SQS's visibility timeout; Celery's default for them is an hour)."""
    options = current_app.conf.broker_transport_options or {}
    return float(options.get("visibility_timeout", 3600))


def schedule_indexing(
    record_ids: Sequence[str],
    *,
    force: bool = False,
    bulk: bool = False,
    org_id: int | None = None,
) -> None:
    """Enqueue indexing of ``record_ids`` in batches, once the transaction commits:
    of ``INDEX_BATCH_SIZE``, or of ``BULK_INDEX_BATCH_SIZE`` for a ``bulk`` write (the
    batches a worker then stores in bulk).

    The write is committed by then, so a broker that cannot be reached does not fail it
    (``delay_on_commit`` would raise out of the commit): the failure is logged, the
    records stay ``pending``, and the sweeper enqueues them once the broker is back.

    ``org_id`` names the org of every record (a write's): the worker then reads and locks
    them in its shard group alone. Without it the worker finds each record's org first.
    """
    if not record_ids:
        return
    size = memoryhub_settings.BULK_INDEX_BATCH_SIZE if bulk else memoryhub_settings.INDEX_BATCH_SIZE
    batches = [
        [str(pk) for pk in record_ids[start : start + size]]
        for start in range(0, len(record_ids), size)
    ]
    transaction.on_commit(partial(_enqueue_indexing, batches, force, org_id))


def _enqueue_indexing(
    batches: list[list[str]], force: bool = False, org_id: int | None = None
) -> None:
    # Only what differs from the task's defaults is sent: a batch with neither flag nor
    # org is the message an earlier release sent and takes.
    extra: tuple[object, ...] = (force, org_id) if org_id is not None else (True,) if force else ()
    for number, batch in enumerate(batches):
        waiting = sum(len(rest) for rest in batches[number:])
        if not send(
            "index_records",
            batch,
            *extra,
            what=f"indexing of {waiting} record(s)",
            left="left pending",
        ):
            # A broker that refused this batch refuses the next ones too, each after
            # Celery's publish retries: stop here, the sweeper has them all.
            return
