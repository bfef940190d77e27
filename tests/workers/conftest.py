"""What the worker tests share: a Redis of the test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.programs import RedisServer, redis_server


@pytest.fixture
def redis(tmp_path) -> Iterator[RedisServer]:
    """A ``redis-server`` this test starts on a free port, stopped after it."""
    with redis_server(tmp_path) as server:
        yield server
