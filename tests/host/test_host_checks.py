"""What a host project is told at ``check``/``migrate`` time instead of a SQL syntax error
mid-migration or tasks silently published to amqp://localhost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, database_url: str, celery: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE"}}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.host_project.settings",
        HOST_PROJECT_DATABASE_URL=database_url,
        HOST_PROJECT_CELERY=celery,
    )
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_sqlite_host_is_told_at_migrate_that_memoryhub_needs_postgresql(tmp_path):
    url = f"sqlite:///{tmp_path / 'host.sqlite3'}"
    checked = manage("check", "--database", "default", database_url=url)
    assert checked.returncode != 0
    assert "memoryhub.E009" in checked.stderr and "needs PostgreSQL" in checked.stderr
    migrated = manage("migrate", database_url=url)
    assert migrated.returncode != 0 and "memoryhub.E009" in migrated.stderr
    assert "syntax error" not in migrated.stderr


def test_a_postgresql_without_pgvector_is_named(tmp_path):
    import psycopg

    url = "postgresql://postgres@localhost:5432/postgres"
    try:
        with psycopg.connect(url, connect_timeout=3) as connection:
            has_vector = connection.execute(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL without pgvector on localhost:5432 ({exc})")
    if has_vector:
        pytest.skip("the PostgreSQL on localhost:5432 has pgvector")
    checked = manage("check", "--database", "default", database_url=url)
    assert checked.returncode != 0
    assert "memoryhub.E010" in checked.stderr and "lacks the vector extension" in checked.stderr


def test_no_broker_and_no_eager_mode_is_a_warning(tmp_path):
    url = f"sqlite:///{tmp_path / 'host.sqlite3'}"
    assert "memoryhub.W003" not in manage("check", database_url=url).stderr  # eager
    checked = manage("check", database_url=url, celery="unconfigured")
    assert "memoryhub.W003" in checked.stderr and "amqp://localhost" in checked.stderr


def test_a_broker_without_the_sweep_on_beat_is_a_warning(tmp_path):
    url = f"sqlite:///{tmp_path / 'host.sqlite3'}"
    without = manage("check", "--tag", "memoryhub", database_url=url, celery="broker")
    assert "memoryhub.W004" in without.stderr and "beat_schedule(MEMORYHUB)" in without.stderr
    scheduled = manage("check", "--tag", "memoryhub", database_url=url, celery="broker+beat")
    assert "memoryhub.W004" not in scheduled.stderr, scheduled.stderr
    assert "memoryhub.W003" not in scheduled.stderr


def test_beat_schedule_follows_sweep_interval():
    from memoryhub.schedule import beat_schedule

    assert beat_schedule({"SWEEP_INTERVAL": 15}) == {
        "memoryhub-sweep": {"task": "memoryhub.tasks.sweep", "schedule": 15.0}
    }
    assert beat_schedule()["memoryhub-sweep"]["schedule"] == 30.0
    with pytest.raises(ValueError, match="SWEEP_INTERVAL"):
        beat_schedule({"SWEEP_INTERVAL": 0})
