"""Real external programs for tests: a Redis server and Celery workers.

A test that needs a program uses the one answering on its default port or starts its
own; when the program is missing it skips with the reason, except under ``CI=true``,
where a missing program is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The Redis database the tests own (flushed before use); never the default 0.
TEST_REDIS_DB = 13


def require_program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} (CI=true: .ci/run must install it)")
        pytest.skip(message)
    return path


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def _port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = TEST_REDIS_DB) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self, db: int = TEST_REDIS_DB):  # type: ignore[no-untyped-def]
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=db)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)


def start_redis(port: int, workdir: Path) -> RedisServer:
    binary = require_program("redis-server")
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        + ["--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: _port_answers(port), timeout=10, what=f"redis-server on {port}")
    return RedisServer(port=port, process=process)


@contextmanager
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    """The Redis answering on 6379, or a private one when none does."""
    if _port_answers(6379):
        server = RedisServer(port=6379)
        yield server
        return
    server = start_redis(free_port(), workdir)
    try:
        yield server
    finally:
        server.stop()


def database_url() -> str:
    """A URL of the test database for worker subprocesses."""
    from django.db import connection

    connection.ensure_connection()
    params = connection.get_connection_params()
    host = str(params.get("host") or "localhost")
    user = quote(str(params.get("user") or "postgres"))
    password = quote(str(params.get("password") or ""))
    port = params.get("port") or 5432
    name = connection.settings_dict["NAME"]
    return f"postgresql://{user}:{password}@/{name}?host={quote(host)}&port={port}"


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """SIGKILL the worker and all its children (no graceful shutdown)."""
        import psutil

        try:
            parent = psutil.Process(self.process.pid)
        except psutil.NoSuchProcess:
            return
        for child in parent.children(recursive=True):
            child.kill()
        parent.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def start_worker(
    broker_url: str,
    log: Path,
    *,
    pool: str = "solo",
    concurrency: int = 1,
    memoryhub: dict | None = None,
    env: dict[str, str] | None = None,
) -> Worker:
    """Start ``celery -A config worker`` against ``broker_url`` and the test database."""
    import json

    environment = dict(os.environ)
    environment.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": broker_url,
            "MEMORYHUB_TEST_SETTINGS": json.dumps(memoryhub or {}),
            "PYTHONUNBUFFERED": "1",
        }
    )
    environment.update(env or {})
    handle = log.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--loglevel=INFO"]
        + [f"--pool={pool}", f"--concurrency={concurrency}", "--without-gossip"]
        + ["--without-mingle", "--without-heartbeat", "-n", f"test-{os.getpid()}@%h"],
        cwd=ROOT,
        env=environment,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )
    worker = Worker(process=process, log=log)
    wait_for(
        lambda: b"ready." in log.read_bytes() or process.poll() is not None,
        timeout=60,
        what="the Celery worker to be ready",
    )
    if process.poll() is not None:
        raise AssertionError("worker exited:\n" + log.read_text(errors="replace"))
    return worker
