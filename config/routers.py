"""Database routing for an optional read replica (``REPLICA_DATABASE_URL``).

Only reads of memoryhub's models on explicitly read-only paths (``memoryhub.routing``:
the API's GET endpoints) go to the ``replica`` alias. Everything else uses ``default``:
every write; reads outside those paths (the write path with its ``?wait=`` poll, forget,
the query service, whose results are cached per write generation and must not cache a
lagging replica's answer, the admin, Celery tasks); reads inside a transaction (it may
hold its own writes, or ``SET LOCAL`` settings such as the HNSW search's); and reads
after the request wrote anything. Tenancy and auth (API keys, revocation) always read
the primary.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model

from memoryhub.routing import note_write, replica_allowed

REPLICA = "replica"
ROUTED_APPS = frozenset({"memoryhub"})


class ReplicaRouter:
    """Send replica-safe reads of memoryhub's models to ``replica``; all else to ``default``."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        if model._meta.app_label not in ROUTED_APPS or not replica_allowed():
            return None
        if REPLICA not in connections.settings:
            return None
        if connections[DEFAULT_DB_ALIAS].in_atomic_block:
            return None
        return REPLICA

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        note_write()
        return None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        # The replica is a copy of the primary: rows of both are the same rows.
        aliases = {DEFAULT_DB_ALIAS, REPLICA}
        if obj1._state.db in aliases and obj2._state.db in aliases:
            return True
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if db == REPLICA else None
