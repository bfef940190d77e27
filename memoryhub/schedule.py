"""What Celery beat must run for memoryhub, for a project's ``CELERY_BEAT_SCHEDULE``::

    from memoryhub.schedule import beat_schedule

    MEMORYHUB = {"SWEEP_INTERVAL": 30}
    CELERY_BEAT_SCHEDULE = {**beat_schedule(MEMORYHUB)}

Settings modules cannot read ``memoryhub_settings`` (they are being loaded), so the
project's ``MEMORYHUB`` dict is passed in; the system checks memoryhub.W004 and W005 warn
when a broker is configured and the sweep is not scheduled every ``SWEEP_INTERVAL``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SWEEP_TASK", "beat_schedule"]

SWEEP_TASK = "memoryhub.tasks.sweep"


def beat_schedule(memoryhub: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The periodic tasks: the sweep every ``SWEEP_INTERVAL`` seconds (default 30)."""
    interval = float((memoryhub or {}).get("SWEEP_INTERVAL", 30))
    if interval <= 0:
        raise ValueError("MEMORYHUB['SWEEP_INTERVAL'] must be a positive number of seconds")
    return {"memoryhub-sweep": {"task": SWEEP_TASK, "schedule": interval}}
