"""Throttling that holds at every instant: a moving window of ``limits`` in the shared
cache's Redis (or in process memory beside a local-memory cache).

DRF's ``SimpleRateThrottle`` keeps a list of timestamps that each request reads,
extends and writes back; concurrent requests overwrite each other's entries, so
concurrent requests with one key can all get through a limit they exceed. A counter per
fixed window is exact inside a window but admits up to twice the rate across a window's
edge (a weighted previous window still let 1.7× through, measured). Here each request is
one atomic step of ``limits``' moving window (a Lua script on Redis, a lock in memory):
an event is admitted only if fewer than the limit were admitted in the ``seconds`` before
it, whichever instant the span starts at, and a refused event is not counted.

Two limits, both from ``MEMORYHUB`` and both answered with ``429`` and ``Retry-After``:

* ``THROTTLE_RATE`` per API key (or staff user, or client address without either);
* ``AUTH_FAILURE_RATE`` per client address for failed API-key authentications (401s):
  a failure past it is a 429, and once over it, that address is refused before its key
  is even looked up.

The limits live where ``CACHE_ALIAS``'s cache lives: its Redis server (the cache's
``LOCATION`` and ``OPTIONS``), so every web process shares them; with Django's
local-memory cache, in this process's memory (as the cache itself is). Another cache
backend has no moving window in ``limits``: the limits then hold per process.

When the cache does not answer (Redis down), the two limits decide differently. The rate
per key fails open: requests go on unlimited, so an outage of the cache is not an outage
of the API. The failed-authentication limit fails closed for failures only: a key that
was not found is answered ``503`` with ``Retry-After`` instead of ``401`` (a guess learns
nothing while it cannot be counted); valid keys are served.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from typing import Any

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from limits import RateLimitItemPerSecond
from limits.errors import StorageError
from limits.storage import MemoryStorage, Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter
from rest_framework import exceptions
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from tenants.models import ApiKey

from .. import cache
from ..cache import CACHE_ERRORS
from ..conf import memoryhub_settings, parse_rate

__all__ = [
    "ApiKeyRateThrottle",
    "FailuresNotCounted",
    "MovingWindow",
    "client_address",
    "count_failure",
    "refuse_if_failing",
    "reset_local_limits",
]

logger = logging.getLogger(__name__)

#: What a limit's storage raises when its server does not answer.
LIMIT_ERRORS: tuple[type[BaseException], ...] = (*CACHE_ERRORS, StorageError)

_storages: dict[tuple[str, str], Storage] = {}
_storages_lock = threading.Lock()


def _redis_uri(location: Any) -> str:
    """A Django Redis cache's (first) location as a ``limits`` storage URI."""
    uri = location[0] if isinstance(location, list | tuple) else str(location)
    if uri.startswith("unix://"):
        return "redis+unix://" + uri.removeprefix("unix://")
    return uri


def limit_storage() -> Storage:
    """The storage of the limits: beside ``CACHE_ALIAS``'s cache (see the module)."""
    backend: Any = caches[memoryhub_settings.CACHE_ALIAS]
    redis = isinstance(backend, RedisCache)
    # The cache's servers and client options are private attributes of Django's backend.
    place = ("redis", _redis_uri(backend._servers)) if redis else ("memory", "")
    with _storages_lock:
        storage = _storages.get(place)
        if storage is None:
            if redis:
                options = dict(getattr(backend, "_options", None) or {})
                timeouts = {k: v for k, v in options.items() if k.startswith("socket_")}
                found = storage_from_string(
                    place[1], key_prefix="memoryhub:limits", wrap_exceptions=True, **timeouts
                )
                assert isinstance(found, Storage)
                storage = found
            else:
                storage = MemoryStorage()
            _storages[place] = storage
    return storage


#: Serialises the in-memory storage's counting (see :class:`MovingWindow`).
_memory_lock = threading.Lock()


def reset_local_limits() -> None:
    """Forget every event the in-memory limits counted (what ``cache.clear()`` is to a
    local-memory cache: for tests)."""
    with _storages_lock:
        for (kind, _), storage in _storages.items():
            if kind == "memory":
                storage.reset()


class MovingWindow:
    """At most ``limit`` events per ``seconds`` for each ident, over any span of that
    length (``limits``' moving window). Idents are hashed into the storage key (bounded
    length, any characters)."""

    def __init__(self, name: str, limit: int, seconds: int) -> None:
        self.name = name
        self.item = RateLimitItemPerSecond(limit, seconds)
        storage = limit_storage()
        self.limiter = MovingWindowRateLimiter(storage)
        # limits' in-memory storage starts its expiry timer unguarded: two threads
        # counting at once may both start it, and the second raises (a 500).
        self._serial = _memory_lock if isinstance(storage, MemoryStorage) else None

    def _ident(self, ident: str) -> str:
        return hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def hit(self, ident: str) -> bool:
        """Count one event if it fits under the limit; whether it did."""
        if self._serial is None:
            return self.limiter.hit(self.item, self.name, self._ident(ident))
        with self._serial:
            return self.limiter.hit(self.item, self.name, self._ident(ident))

    def exceeded(self, ident: str) -> bool:
        """Whether the next event would be refused (nothing is counted)."""
        return not self.limiter.test(self.item, self.name, self._ident(ident))

    def wait(self, ident: str) -> int:
        """Seconds (at least 1) until one more event fits under the limit."""
        stats = self.limiter.get_window_stats(self.item, self.name, self._ident(ident))
        if stats.remaining > 0:
            return 1
        # The first whole second after the oldest event leaves the window.
        return max(1, math.floor(stats.reset_time - time.time()) + 1)


def client_address(request: Any) -> str:
    """The client's address: ``REMOTE_ADDR``, unless DRF's ``NUM_PROXIES`` says how many
    proxies in front append to ``X-Forwarded-For`` (then DRF's reading of it).

    DRF's own default trusts a client's ``X-Forwarded-For`` when ``NUM_PROXIES`` is
    unset; a limit on failed authentications must not be that easy to dodge (or to aim
    at someone else's address).
    """
    if api_settings.NUM_PROXIES is None:
        return str(request.META.get("REMOTE_ADDR") or "")
    return BaseThrottle().get_ident(request)


class ApiKeyRateThrottle(BaseThrottle):
    """``MEMORYHUB["THROTTLE_RATE"]`` per API key (``None`` disables throttling)."""

    def __init__(self) -> None:
        self._wait: int | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        rate = parse_rate(memoryhub_settings.THROTTLE_RATE)
        if rate is None:
            return True
        window = MovingWindow("rate", *rate)
        ident = self._ident(request)
        try:
            cache.require_answering()
            if window.hit(ident):
                return True
            self._wait = window.wait(ident)
        except LIMIT_ERRORS as exc:
            _unlimited(exc)
            return True
        return False

    def wait(self) -> float | None:
        return self._wait

    def _ident(self, request: Any) -> str:
        api_key = getattr(request, "auth", None)
        if isinstance(api_key, ApiKey):
            return f"key:{api_key.prefix}"
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return f"user:{user.pk}"
        return f"ip:{client_address(request)}"


def failed_authentications() -> MovingWindow | None:
    rate = parse_rate(memoryhub_settings.AUTH_FAILURE_RATE)
    return MovingWindow("auth-failures", *rate) if rate is not None else None


def refuse_if_failing(request: Any) -> None:
    """Raise ``Throttled`` when this address has failed to authenticate too often.

    Asked before the key is looked up: once over the limit, an address learns nothing
    more about which keys exist, not even from a valid one.
    """
    window = failed_authentications()
    ident = f"ip:{client_address(request)}"
    try:
        if window is not None and cache.answering() and window.exceeded(ident):
            raise _too_many_failures(window, ident)
    except LIMIT_ERRORS as exc:
        _unlimited(exc)


def count_failure(request: Any) -> None:
    """Count a guess: an unknown, revoked or malformed key (not an expired key or a key
    of a suspended org, which are real keys left in some configuration).

    Counted and checked in one atomic step (:meth:`MovingWindow.hit`): a guess past
    the limit is answered ``Throttled``, not ``401``, so however many clients guess at
    once from one address, at most the limit of them learn that their key was wrong.
    (:func:`refuse_if_failing` keeps the others from being looked up at all; only the
    guesses already in flight when the limit is reached still are.)
    """
    window = failed_authentications()
    ident = f"ip:{client_address(request)}"
    if window is None:
        return
    try:
        cache.require_answering()
        if not window.hit(ident):
            raise _too_many_failures(window, ident)
    except LIMIT_ERRORS as exc:
        cache.unanswered("failed authentications", exc)
        raise FailuresNotCounted() from exc


class FailuresNotCounted(exceptions.APIException):
    """A failed authentication that could not be counted (the cache does not answer)."""

    status_code = 503
    default_detail = "The service cannot check this key now; retry shortly."
    default_code = "service_unavailable"
    wait = 5


#: When the last "limits not enforced" warning was logged (at most one a minute).
_warned_at = 0.0


def _unlimited(exc: BaseException) -> None:
    global _warned_at
    cache.unanswered("rate limits", exc)
    now = time.monotonic()
    if now - _warned_at >= 60 or _warned_at == 0.0:
        _warned_at = now
        logger.warning(
            "the cache does not answer, rate limits not enforced: %s", type(exc).__name__
        )


def _too_many_failures(window: MovingWindow, ident: str) -> exceptions.Throttled:
    return exceptions.Throttled(
        wait=window.wait(ident), detail="Too many failed authentications from this address."
    )
