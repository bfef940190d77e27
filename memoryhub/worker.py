"""What runs inside a Celery worker beside its tasks: the heartbeat health reads.

When a worker is ready, a daemon thread in its main process writes
``WorkerHeartbeat(hostname, seen_at)`` every ``WORKER_HEARTBEAT_INTERVAL`` seconds until
the worker shuts down. The health endpoint reads the newest row instead of broadcasting
an ``inspect ping`` and blocking on the replies.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import close_old_connections, connection
from django.utils import timezone

from .conf import memoryhub_settings
from .models import WorkerHeartbeat

logger = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None


def beat(hostname: str) -> None:
    """Record that worker ``hostname`` is alive now."""
    WorkerHeartbeat.objects.update_or_create(
        hostname=hostname[:255], defaults={"seen_at": timezone.now()}
    )


def _run(hostname: str) -> None:
    while True:
        try:
            close_old_connections()
            beat(hostname)
        except Exception as exc:  # a database blip: try again at the next beat
            logger.warning("worker heartbeat failed: %s: %s", type(exc).__name__, exc)
        if _stop.wait(memoryhub_settings.WORKER_HEARTBEAT_INTERVAL):
            break
    connection.close()


def start_heartbeat(sender: Any = None, **kwargs: Any) -> None:
    """``worker_ready`` receiver: start the heartbeat thread (once per process)."""
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    hostname = getattr(sender, "hostname", None) or "celery"
    try:  # the first beat before the worker says it is ready (requests may wait on it)
        beat(hostname)
    except Exception as exc:
        logger.warning("worker heartbeat failed: %s: %s", type(exc).__name__, exc)
    _stop.clear()
    _thread = threading.Thread(
        target=_run, args=(hostname,), name="memoryhub-heartbeat", daemon=True
    )
    _thread.start()


def stop_heartbeat(**kwargs: Any) -> None:
    """``worker_shutdown`` receiver: stop the heartbeat thread."""
    _stop.set()


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
