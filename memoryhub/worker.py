"""What runs inside a Celery worker beside its tasks: the heartbeat health reads.

When a worker is ready, a daemon thread in its main process writes
``WorkerHeartbeat(hostname, seen_at, holding)`` every ``WORKER_HEARTBEAT_INTERVAL``
seconds, and as soon as the worker receives a task, until the worker shuts down. The
health endpoint reads the newest row instead of broadcasting an ``inspect ping`` and
blocking on the replies; the sweeper reads ``holding``, the records in the indexing tasks
the worker holds, to tell a record a live worker has from one a dead worker lost.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import close_old_connections, connection
from django.utils import timezone

from .conf import memoryhub_settings
from .embedders.base import warm_configured_in_background
from .models import WorkerHeartbeat

logger = logging.getLogger(__name__)

#: The task whose records ``holding`` lists.
INDEXING_TASK = "memoryhub.tasks.index_records"
#: Past this many record ids a worker's ``holding`` says it cannot tell (null): the
#: sweeper then waits ``SWEEP_PENDING_AFTER`` as if no worker said anything.
HOLDING_CAP = 20_000

_stop = threading.Event()
_wake = threading.Event()
_thread: threading.Thread | None = None


def held_record_ids() -> list[str] | None:
    """Ids of the records in the indexing tasks this worker process holds: running,
    prefetched, or waiting for the moment of a retry. None when it cannot tell."""
    from celery.worker import state

    scheduled = getattr(state, "scheduled_requests", None)  # Celery 5.7 and later
    if scheduled is None:
        return None
    for _attempt in range(3):
        try:  # the consumer's thread adds and discards requests meanwhile; a request
            # whose moment comes moves from scheduled to reserved: scheduled read first
            requests = [*scheduled, *state.reserved_requests]
            break
        except RuntimeError:
            continue
    else:
        return None
    held: list[str] = []
    for request in requests:
        if request.name != INDEXING_TASK or not request.args:
            continue
        held.extend(str(pk) for pk in request.args[0])
        if len(held) > HOLDING_CAP:
            return None
    return held


def beat(hostname: str, *, holding: list[str] | None = None) -> None:
    """Record that worker ``hostname`` is alive now, holding the records ``holding``."""
    WorkerHeartbeat.objects.update_or_create(
        hostname=hostname[:255], defaults={"seen_at": timezone.now(), "holding": holding}
    )


def _run(hostname: str) -> None:
    while True:
        _wake.clear()
        try:
            holding = held_record_ids()
        except Exception as exc:  # never at the cost of the beat itself
            logger.warning("the records held could not be told: %s: %s", type(exc).__name__, exc)
            holding = None
        try:
            close_old_connections()
            beat(hostname, holding=holding)
        except Exception as exc:  # a database blip: try again at the next beat
            logger.warning("worker heartbeat failed: %s: %s", type(exc).__name__, exc)
        _wake.wait(memoryhub_settings.WORKER_HEARTBEAT_INTERVAL)
        if _stop.is_set():
            break
    connection.close()


def task_received(**kwargs: Any) -> None:
    """``task_received`` receiver: beat now, so ``holding`` names the new task's records
    before the sweeper can take them as lost (the consumer's thread only sets a flag)."""
    _wake.set()


def start_heartbeat(sender: Any = None, **kwargs: Any) -> None:
    """``worker_ready`` receiver: start the heartbeat thread (once per process)."""
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    # The first batch does not wait for a local model to load: here when the worker
    # embeds in this process; a prefork pool's children load it as they start.
    pool = getattr(sender, "pool", None)
    if pool is None or "prefork" not in type(pool).__module__:
        warm_configured_in_background()
    hostname = getattr(sender, "hostname", None) or "celery"
    try:  # the first beat before the worker says it is ready (requests may wait on it);
        # it also says that a worker of this name killed before holds nothing any more
        beat(hostname, holding=[])
    except Exception as exc:
        logger.warning("worker heartbeat failed: %s: %s", type(exc).__name__, exc)
    _stop.clear()
    _wake.clear()
    _thread = threading.Thread(
        target=_run, args=(hostname,), name="memoryhub-heartbeat", daemon=True
    )
    _thread.start()


def stop_heartbeat(**kwargs: Any) -> None:
    """``worker_shutdown`` receiver: stop the heartbeat thread, and wait (a few seconds
    at most) until it has: no beat is written after this returns."""
    _stop.set()
    _wake.set()
    if _thread is not None and _thread is not threading.current_thread():
        _thread.join(timeout=5)


def keep_reconnecting(**kwargs: Any) -> None:
    """``worker_init`` receiver: when the broker (Redis) goes away, the worker reconnects
    instead of stopping.

    Releasing the dead connection, kombu's Redis transport (5.7) closes its channel, whose
    close restores unacknowledged messages through a new client built from a transport
    that no longer has its connection: ``'NoneType' object has no attribute 'hostname'``.
    Celery's consumer takes that ``AttributeError`` as unrecoverable and the worker stops
    (seen in ``tests/workers/test_faults.py``, a Redis killed mid-run). Raised as the
    connection error it is, kombu ignores it while releasing the connection, and the
    consumer reconnects; the messages come back after the visibility timeout.
    """
    from kombu.transport import redis as transport

    original = transport.Channel._connparams
    if getattr(original, "memoryhub_guard", False):
        return

    def _connparams(self: Any, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise transport.redis.exceptions.ConnectionError("the broker connection is gone")
        return original(self, asynchronous)

    _connparams.memoryhub_guard = True  # type: ignore[attr-defined]
    transport.Channel._connparams = _connparams  # type: ignore[method-assign]


def warm_in_pool_child(**kwargs: Any) -> None:
    """``worker_process_init`` receiver: a prefork pool child loads the local model as
    it starts, not at its first batch."""
    warm_configured_in_background()


def configure_tracing_in_child(**_: Any) -> None:
    """``worker_process_init`` receiver: a prefork pool child exports its own spans (the
    parent's exporter thread does not survive the fork)."""
    from . import tracing

    tracing.configure()
