"""Embedders used by worker subprocesses in tests (configured by import path)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from memoryhub.embedders import HashingEmbedder


class SlowEmbedder(HashingEmbedder):
    """The default embedder, but it announces each batch in a file and then takes its time.

    A test waits for the announcement and kills the worker while it sleeps: mid-batch.
    """

    def __init__(self, marker: str, delay: float = 0.0, **options: object) -> None:
        super().__init__(**options)
        self.marker = Path(marker)
        self.delay = delay

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        with self.marker.open("a") as handle:
            handle.write(f"{os.getpid()} {len(texts)}\n")
        time.sleep(self.delay)
        return super().embed_documents(texts)
