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
