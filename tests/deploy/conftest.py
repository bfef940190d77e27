from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from config import embedded_redis
from memoryhub.contrib.embedded_postgres import server as embedded
from tests.make_run_site import Site, require_redis_server
from tests.programs import free_port


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """A fresh ``make run`` on its own data directory and port, stopped with Ctrl-C."""
    require_redis_server()
    running = Site(tmp_path / "site", free_port())
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.process.send_signal(signal.SIGINT)
            try:
                running.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                running.process.kill()
        embedded_redis.EmbeddedRedis(running.data / "redis").stop()
        embedded.stop(running.data / "postgres")
