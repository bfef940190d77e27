"""The site's PostgreSQL backend: a health check with no round trip that still notices a
connection the server closed."""

from __future__ import annotations

import select

import psycopg
import pytest
from django.db import connection, connections
from django.db.backends.postgresql import base as django_postgresql

from memoryhub.contrib.postgresql.base import DatabaseWrapper
from tests.programs import wait_for


def test_the_site_uses_the_backend_for_database_urls(monkeypatch):
    import importlib

    import config.settings

    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@db.example:5432/memoryhub")
    monkeypatch.setenv("REPLICA_DATABASE_URL", "postgres://u:p@replica.example:5432/memoryhub")
    try:
        reloaded = importlib.reload(config.settings)
        assert reloaded.DATABASES["default"]["ENGINE"] == "memoryhub.contrib.postgresql"
        assert reloaded.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True
        assert reloaded.DATABASES["replica"]["ENGINE"] == "memoryhub.contrib.postgresql"
    finally:
        monkeypatch.undo()
        importlib.reload(config.settings)


@pytest.mark.django_db(transaction=True)
def test_a_healthy_idle_connection_is_usable_without_a_query(monkeypatch):
    assert isinstance(connections["default"], DatabaseWrapper)  # the embedded one builds on it
    connection.ensure_connection()
    asked = []
    monkeypatch.setattr(
        django_postgresql.DatabaseWrapper, "is_usable", lambda self: asked.append(1) or True
    )
    assert connection.is_usable() is True
    assert asked == []  # no SELECT 1
    with connection.cursor() as cursor:  # inside a transaction: Django's check decides
        cursor.execute("BEGIN")
        assert connection.is_usable() is True
        cursor.execute("ROLLBACK")
    assert asked == [1]


@pytest.mark.django_db(transaction=True)
def test_a_connection_the_server_closed_is_not_usable():
    connection.ensure_connection()
    raw = connection.connection
    pid = raw.info.backend_pid
    assert connection.is_usable() is True
    params = {k: v for k, v in connection.get_connection_params().items() if k != "context"}
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)
    wait_for(
        lambda: bool(select.select([raw.fileno()], [], [], 0)[0]),
        timeout=10,
        what="the server's goodbye on the socket",
    )
    assert connection.is_usable() is False
    connection.close()
    connection.ensure_connection()
    assert connection.is_usable() is True
    assert connection.connection.info.backend_pid != pid
