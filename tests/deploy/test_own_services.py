"""Tests own their services: the Redis a test uses is one it started, and nothing the test
session does reaches a Redis it did not start, even one the environment names.

``.ci/run`` checks the same from outside: sentinel keys in every database of the Redis on
6379 survive ``make test`` unchanged.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.programs import ROOT, RedisServer, redis_server, start_private_redis


def test_a_tests_redis_is_a_fresh_child_of_its_own_on_a_free_port(tmp_path: Path) -> None:
    with redis_server(tmp_path) as server:
        assert server.port != 6379
        children = {child.pid for child in psutil.Process().children()}
        assert server.process.pid in children
        # The server answering on the port is that child, and it starts empty.
        client = server.client(0)
        assert int(client.info("server")["process_id"]) == server.process.pid
        assert all(server.client(db).dbsize() == 0 for db in range(16))
    assert server.process.poll() is not None


def test_no_test_flushes_a_redis_or_names_the_default_port() -> None:
    """A test that flushes only ever needed to because its Redis was not its own."""
    flush = re.compile(r"\.flush(db|all)\(")
    default_port = "6379"
    found = []
    sources = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
    for source in sources:
        text = source.read_text()
        if flush.search(text):
            found.append(f"{source.relative_to(ROOT)} flushes")
        # test_compose checks the compose file's own Redis service, which is on 6379;
        # this file asserts that a test's Redis is elsewhere.
        if default_port in text and source.name not in {"test_compose.py", Path(__file__).name}:
            found.append(f"{source.relative_to(ROOT)} names {default_port}")
    assert found == []


SENTINEL = "memoryhub-test-sentinel"


@pytest.fixture
def decoy(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis standing for another application's, with a key in each of its databases."""
    server = start_private_redis(tmp_path)
    for db in range(16):
        server.client(db).set(SENTINEL, f"db{db}")
    try:
        yield server
    finally:
        server.stop()


def test_a_session_leaves_the_redis_the_environment_names_alone(decoy: RedisServer) -> None:
    """A developer's REDIS_URL and CELERY_BROKER_URL (for their site) are not the tests':
    a test session run with them set neither flushes nor writes to that Redis."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env.update(REDIS_URL=decoy.url(3), CELERY_BROKER_URL=decoy.url(4))
    before = {db: decoy.client(db).dbsize() for db in range(16)}
    # Tests that need no database: each clears the cache (conftest) and one sends a task.
    session = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        + ["tests/deploy/test_own_services.py::test_an_unconfigured_task_runs_eagerly"]
        + ["tests/host/test_host_checks.py::test_beat_schedule_follows_sweep_interval"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    for db in range(16):
        assert decoy.client(db).get(SENTINEL) == f"db{db}".encode(), db
    assert {db: decoy.client(db).dbsize() for db in range(16)} == before
    assert session.returncode == 0, session.stdout[-3000:] + session.stderr[-3000:]
    assert "2 passed" in session.stdout


def test_an_unconfigured_task_runs_eagerly() -> None:
    """Without a test's own broker, a task runs in this process, whatever the
    environment of the session said."""
    from celery import current_app

    @current_app.task(name="tests.deploy.test_own_services.add")
    def add(a: int, b: int) -> int:
        return a + b

    assert "REDIS_URL" not in os.environ and "CELERY_BROKER_URL" not in os.environ
    result = add.delay(2, 3)
    # Eager: done when delay() returns, in this process (no get(): whether a join would
    # block is Celery's process-wide flag, which is not what this test is about).
    assert result.successful() and result.result == 5
