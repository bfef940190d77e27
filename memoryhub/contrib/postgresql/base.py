"""Django's PostgreSQL backend, with a cheaper ``CONN_HEALTH_CHECKS``.

Django checks a persistent connection before a request's first query with ``SELECT 1``:
one round trip per request, a sizeable share of a short query request's time. A
connection the server has closed (a restart, ``idle_session_timeout``, ``pg_terminate_backend``)
has something to read: the server's FATAL message or the end of the stream. An idle,
healthy one has nothing. So: nothing to read, no round trip; something to read, Django's
``SELECT 1`` decides.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        if connection.pgconn.transaction_status != pq.TransactionStatus.IDLE:
            return bool(super().is_usable())
        try:
            poller = select.poll()  # not select(): that fails past descriptor 1023
            poller.register(connection.fileno(), select.POLLIN | select.POLLPRI)
            events = poller.poll(0)
        except (OSError, ValueError, AttributeError):  # AttributeError: no poll() here
            return bool(super().is_usable())
        return not events or bool(super().is_usable())
