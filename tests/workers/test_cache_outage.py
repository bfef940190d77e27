"""The shared cache (Redis) stops answering under a running API: nothing committed is
answered as failed, nothing answers 500, and when the cache comes back holding what it
held before, no ranking of before the outage is served as current.

The cache is a private ``redis-server`` the test pauses (``SIGSTOP``: its port accepts,
nothing answers, its data stays) and resumes; the broker is not involved (tasks run
eagerly), so every effect seen is the cache's.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from memoryhub import cache
from memoryhub.models import MemoryRecord
from tests.factories import key_client
from tests.programs import RedisServer, start_private_redis

pytestmark = pytest.mark.django_db(transaction=True)

RECORDS = "/api/v1/domains/support/records"
QUERY = "/api/v1/domains/support/query"


@pytest.fixture
def redis_cache(tmp_path: Path, settings, monkeypatch) -> Iterator[RedisServer]:
    """The site's cache on a private Redis with short timeouts (as config/ sets them),
    asked again at every call after a failure (the site leaves it alone for a while)."""
    monkeypatch.setattr(cache, "RETRY_AFTER_SECONDS", 0.0)
    server = start_private_redis(tmp_path)
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": server.url(),
            "OPTIONS": {"socket_connect_timeout": 0.3, "socket_timeout": 0.3},
        }
    }
    settings.MEMORYHUB = {"CACHE_TTL": 300, "THROTTLE_RATE": "1000/min"}
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGCONT)
        server.stop()


def contents(response) -> list[str]:
    assert response.status_code == 200, response.content
    return sorted(item["content"] for item in response.json()["items"])


def ask(api: APIClient, text: str):
    return api.post(QUERY, {"query": text, "mode": "keyword", "k": 10}, format="json")


def test_a_cache_that_stops_answering_never_fails_a_committed_write_nor_serves_a_stale_ranking(
    tenant, other_tenant, redis_cache
):
    api = key_client(tenant, can_read=True, can_write=True)
    globex = key_client(other_tenant, can_read=True, can_write=True)
    assert api.post(
        RECORDS, {"items": [{"content": "Alice drinks tea"}]}, format="json"
    ).status_code in (200, 202)
    assert globex.post(
        RECORDS, {"items": [{"content": "Globex drinks water"}]}, format="json"
    ).status_code in (200, 202)
    assert contents(ask(api, "drinks")) == ["Alice drinks tea"]  # ranked, and cached

    redis_cache.process.send_signal(signal.SIGSTOP)
    try:
        written = api.post(RECORDS, {"items": [{"content": "Alice drinks coffee"}]}, format="json")
        assert written.status_code in (200, 202), written.content  # committed: never a 500
        assert MemoryRecord.unscoped.filter(content="Alice drinks coffee").count() == 1
        # Queries are ranked afresh (nothing read from or stored in the cache).
        assert contents(ask(api, "drinks")) == ["Alice drinks coffee", "Alice drinks tea"]
        assert contents(ask(globex, "drinks")) == ["Globex drinks water"]
        # A key that was not found cannot be counted against its address: 503, not 401.
        guess = APIClient()
        guess.credentials(HTTP_AUTHORIZATION="Api-Key nope.nope")
        refused = guess.post(QUERY, {"query": "drinks"}, format="json")
        assert refused.status_code == 503, refused.content
        assert refused["Retry-After"]
        assert refused.json()["code"] == "service_unavailable"
    finally:
        redis_cache.process.send_signal(signal.SIGCONT)

    # The cache is back with what it held: the ranking of before the write is not served.
    assert contents(ask(api, "drinks")) == ["Alice drinks coffee", "Alice drinks tea"]
    assert contents(ask(globex, "drinks")) == ["Globex drinks water"]
    guess = APIClient()
    guess.credentials(HTTP_AUTHORIZATION="Api-Key nope.nope")
    assert guess.post(QUERY, {"query": "drinks"}, format="json").status_code == 401
