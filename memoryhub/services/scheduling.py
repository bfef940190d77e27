"""Sending work to the workers: a task by name, or, when the broker refuses it, the work
left in a state the sweeper finds (``services/maintenance.py``).

Services decide *what* to send; this module only sends. It never imports
``memoryhub.tasks`` (the tasks import the services): a task is looked up by name in the
Celery app's registry, so the direction of calls is one way, front doors → services.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from celery import current_app

__all__ = ["TASKS_MODULE", "send"]

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
