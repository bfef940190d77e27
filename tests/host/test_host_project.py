"""memoryhub embeds in an existing Django project: tests/host_project/ (no config/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.db import connection
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]


def _server_params() -> dict[str, str]:
    connection.ensure_connection()
    params = connection.get_connection_params()
    return {
        "host": str(params.get("host") or "localhost"),
        "port": str(params.get("port") or 5432),
        "user": str(params.get("user") or "postgres"),
        "password": str(params.get("password") or ""),
    }


def _admin_execute(params: dict[str, str], statement: sql.Composable) -> None:
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute(statement)


@pytest.mark.django_db
def test_host_project_installs_both_apps_and_works():
    from tests.programs import scratch_database_name

    params = _server_params()
    database = scratch_database_name("host_project_smoke")
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
    _admin_execute(params, drop)
    _admin_execute(params, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        url = (
            f"postgresql://{quote(params['user'])}:{quote(params['password'])}@"
            f"/{database}?host={quote(params['host'])}&port={params['port']}"
        )
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
        }
        env["HOST_PROJECT_DATABASE_URL"] = url
        completed = subprocess.run(
            [sys.executable, "-m", "tests.host_project.smoke"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert completed.returncode == 0, completed.stdout + completed.stderr
        assert "host project OK" in completed.stdout
    finally:
        _admin_execute(params, drop)


def test_host_project_does_not_import_the_site():
    sources = (ROOT / "tests" / "host_project").rglob("*.py")
    for source in sources:
        text = source.read_text()
        assert "from config" not in text and "import config" not in text, source
    for package in ("memoryhub", "tenants"):
        for source in (ROOT / package).rglob("*.py"):
            text = source.read_text()
            assert "from config" not in text and "import config" not in text, source


def test_host_project_on_the_embedded_backend_in_one_databases_entry(tmp_path):
    """The development database of docs/how-to/embed.md: one DATABASES entry, nothing
    installed."""
    from memoryhub.contrib.embedded_postgres import server as embedded

    data = tmp_path / "postgres"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
    }
    env["HOST_PROJECT_EMBEDDED_DIR"] = str(data)
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "tests.host_project.smoke"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert completed.returncode == 0, completed.stdout + completed.stderr
        assert "host project OK" in completed.stdout
    finally:
        embedded.stop(data)
    assert not embedded.is_running(data)  # stopped when the smoke test's process exited
