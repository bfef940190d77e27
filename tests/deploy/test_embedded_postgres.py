"""The embedded PostgreSQL default: pgvector available, data survives a restart, clean stop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import psycopg
import pytest

from memoryhub.contrib.embedded_postgres import server as embedded

ROOT = Path(__file__).resolve().parents[2]


def _postgres_processes(data_dir: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(attrs=("name", "cmdline")):
        cmdline = process.info["cmdline"] or []
        if process.info["name"] == "postgres" and str(data_dir) in " ".join(cmdline):
            found.append(process)
    return found


def _run(data_dir: Path, code: str) -> str:
    """Run ``code`` in a fresh interpreter that uses the server on ``data_dir``."""
    prelude = (
        "from pathlib import Path\n"
        "import psycopg\n"
        "from memoryhub.contrib.embedded_postgres import server as embedded\n"
        f"data_dir = Path({str(data_dir)!r})\n"
        "srv = embedded.get_server(data_dir)\n"
        "embedded.ensure_database(srv, 'memoryhub')\n"
        "conn = psycopg.connect(host=embedded.socket_dir(srv), user='postgres', "
        "dbname='memoryhub', autocommit=True)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", prelude + code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_data_survives_restart_and_server_stops_cleanly(tmp_path):
    data_dir = tmp_path / "pg"
    _run(
        data_dir,
        "conn.execute('CREATE EXTENSION IF NOT EXISTS vector')\n"
        "conn.execute('CREATE TABLE kept (v vector(3))')\n"
        "conn.execute(\"INSERT INTO kept VALUES ('[1,2,3]')\")\n",
    )
    # The last process using it has exited: the server was stopped, not left behind.
    assert not embedded.is_running(data_dir)
    assert _postgres_processes(data_dir) == []

    out = _run(data_dir, "print(conn.execute('SELECT v::text FROM kept').fetchone()[0])\n")
    assert out.strip() == "[1,2,3]"
    assert not embedded.is_running(data_dir)


def test_keep_running_server_is_stopped_by_stop(tmp_path):
    data_dir = tmp_path / "pg"
    server = embedded.get_server(data_dir, keep_running=True)
    try:
        with psycopg.connect(host=embedded.socket_dir(server), user="postgres") as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert embedded.is_running(data_dir)
    finally:
        assert embedded.stop(data_dir) is True
    assert not embedded.is_running(data_dir)
    assert embedded.stop(data_dir) is False


def test_the_first_start_already_has_memoryhubs_memory_settings(tmp_path):
    data_dir = tmp_path / "pg"
    expected = embedded.memory_settings()
    out = _run(
        data_dir,
        "for name in ('shared_buffers', 'effective_cache_size', 'maintenance_work_mem'):\n"
        "    print(name, conn.execute(f'SHOW {name}').fetchone()[0])\n",
    )
    shown = dict(line.split() for line in out.splitlines())
    # PostgreSQL shows 1024MB as 1GB.
    as_mb = {k: int(v[:-2]) * (1024 if v.endswith("GB") else 1) for k, v in shown.items()}
    assert as_mb == {k: int(v.removesuffix("MB")) for k, v in expected.items()}
    if embedded._memory_bytes() >= 1024**3:
        assert as_mb["shared_buffers"] > 128  # more than PostgreSQL's default

    # The file is the operator's once written: an edit survives the next start.
    settings = data_dir / embedded.SETTINGS_FILE
    settings.write_text("shared_buffers = '256MB'\n")
    out = _run(data_dir, "print(conn.execute('SHOW shared_buffers').fetchone()[0])\n")
    assert out.strip() == "256MB"
    conf = (data_dir / "postgresql.conf").read_text()
    assert conf.count(f"include_if_exists = '{embedded.SETTINGS_FILE}'") == 1


@pytest.mark.parametrize(
    ("ram_gb", "shared_buffers", "effective_cache_size"),
    [(0.25, "128MB", "256MB"), (2, "512MB", "1024MB"), (24, "4096MB", "12288MB")],
)
def test_memory_settings_follow_the_machines_ram(ram_gb, shared_buffers, effective_cache_size):
    settings = embedded.memory_settings(int(ram_gb * 1024**3))
    assert settings["shared_buffers"] == shared_buffers
    assert settings["effective_cache_size"] == effective_cache_size


@pytest.mark.parametrize(
    ("value", "shared_buffers"), [("4GB", "1024MB"), ("2048mb", "512MB"), (str(2**30), "256MB")]
)
def test_memory_settings_follow_the_memory_they_are_given(monkeypatch, value, shared_buffers):
    """Several embedded servers on one machine (a test suite's beside a benchmark's)
    each sized themselves for all of its RAM: ``MEMORYHUB_EMBEDDED_MEMORY`` gives each
    its share."""
    monkeypatch.setenv("MEMORYHUB_EMBEDDED_MEMORY", value)
    assert embedded.memory_settings()["shared_buffers"] == shared_buffers


@pytest.mark.parametrize("value", ["lots", "4TB", "0", "-1GB"])
def test_a_memory_size_it_cannot_read_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("MEMORYHUB_EMBEDDED_MEMORY", value)
    with pytest.raises(ValueError, match="MEMORYHUB_EMBEDDED_MEMORY"):
        embedded.memory_settings()


@pytest.mark.django_db
def test_site_database_has_pgvector():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        version = cursor.fetchone()[0]
    major, minor = (int(part) for part in version.split(".")[:2])
    assert (major, minor) >= (0, 8), version


def test_sigterm_stops_the_embedded_server(tmp_path):
    """kill/pkill/a supervisor's stop must not leave the embedded PostgreSQL running."""
    import os

    data = tmp_path / "site"
    code = (
        "import os, signal, time, django\n"
        "django.setup()\n"
        "from django.db import connection\n"
        "connection.ensure_connection()\n"
        "print('connected', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(30)\n"
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings", "MEMORYHUB_DATA_DIR": str(data)})
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert "connected" in completed.stdout, completed.stderr
    assert completed.returncode == 128 + 15
    assert not embedded.is_running(data / "postgres")
    assert _postgres_processes(data / "postgres") == []


def test_a_killed_holder_does_not_keep_the_server_running(tmp_path):
    """A process SIGKILLed while holding the server (it cannot clean up) is forgotten:
    the next process to exit still stops the server."""
    import json
    import os
    import signal

    data = tmp_path / "site"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from memoryhub.contrib.embedded_postgres import server as embedded\n"
            f"embedded.get_server(Path({str(data)!r}))\n"
            "print('holding', flush=True)\n"
            "time.sleep(60)\n",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    assert embedded.is_running(data)  # nobody stopped it
    assert holder.pid in json.loads((data / embedded.HOLDERS_FILE).read_text())
    _run(data, "print(conn.execute('SELECT 1').fetchone()[0])")  # uses it, then exits
    assert not embedded.is_running(data)
    assert _postgres_processes(data) == []


def test_a_clusters_nodes_share_the_machine_and_build_indexes_serially(tmp_path):
    """Every node's shared buffers together fit the one server's share, and no node
    builds an index in parallel: Citus builds a distributed index on every shard at
    once, and each parallel HNSW build reserves maintenance_work_mem of shared memory
    (the 1M-record cluster run was stopped by the OOM killer that way)."""
    from memoryhub.contrib.citus_cluster import Cluster, Node

    cluster = Cluster(tmp_path, tmp_path / "bin", workers=2)
    one_server = int(embedded.memory_settings()["shared_buffers"].removesuffix("MB"))
    nodes = [cluster._settings(Node(name, 5432 + n)) for n, name in enumerate("abc")]
    assert sum(int(node["shared_buffers"].removesuffix("MB")) for node in nodes) <= one_server
    assert {node["max_parallel_maintenance_workers"] for node in nodes} == {"0"}
