"""Throttling that holds under concurrency: atomic counters in the cache.

DRF's ``SimpleRateThrottle`` keeps a list of timestamps that each request reads,
extends and writes back; concurrent requests overwrite each other's entries, so
concurrent requests with one key can all get through a limit they exceed. Here every
request is one atomic ``incr`` of a per-window counter (Redis ``INCR``, or the locmem
cache's lock), and a window's count is weighted with the previous window's (a sliding
window counter), so a burst at a window's edge cannot double the rate.

Two limits, both from ``MEMORYHUB`` and both answered with ``429`` and ``Retry-After``:

* ``THROTTLE_RATE`` per API key (or staff user, or client address without either);
* ``AUTH_FAILURE_RATE`` per client address for failed API-key authentications (401s):
  a failure past it is a 429, and once over it, that address is refused before its key
  is even looked up.

When the cache does not answer (Redis down), the two limits decide differently. The rate
per key fails open: requests go on unlimited, so an outage of the cache is not an outage
of the API. The failed-authentication limit fails closed for failures only: a key that
was not found is answered ``503`` with ``Retry-After`` instead of ``401`` (a guess learns
nothing while it cannot be counted); valid keys are served.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from typing import Any

from django.core.cache import caches
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
    "SlidingWindow",
    "client_address",
    "count_failure",
    "refuse_if_failing",
]

logger = logging.getLogger(__name__)


class SlidingWindow:
    """A sliding window counter of ``limit`` events per ``seconds`` in the cache.

    ``hit(ident)`` counts one event and says whether it is within the limit; a refused
    event is taken back, so a client that keeps hammering does not starve its next
    window. ``wait(ident)`` is the ``Retry-After`` of a refused event: the seconds until
    the weighted count falls below the limit. Idents are hashed into the cache key
    (bounded length, any characters).
    """

    def __init__(self, name: str, limit: int, seconds: int) -> None:
        self.name = name
        self.limit = limit
        self.seconds = seconds

    @property
    def cache(self) -> Any:
        return caches[memoryhub_settings.CACHE_ALIAS]

    def _key(self, ident: str, window: int) -> str:
        digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"memoryhub:throttle:{self.name}:{digest}:{window}"

    def _counts(self, ident: str, now: float) -> tuple[int, int]:
        """This window's and the previous window's counts, in one round trip."""
        window = int(now // self.seconds)
        keys = [self._key(ident, window - 1), self._key(ident, window)]
        counts = self.cache.get_many(keys)
        return counts.get(keys[0]) or 0, counts.get(keys[1]) or 0

    def _incr(self, key: str, delta: int = 1, *, exists: bool = False) -> int:
        """Add ``delta`` to the counter ``key``, creating it if needed. ``exists``: the
        counter was just read, so the increment is tried first (one call fewer)."""
        cache = self.cache
        if exists:
            try:
                return int(cache.incr(key, delta))
            except ValueError:  # expired since it was read
                pass
        # Two windows' worth: the next window weighs this one's count.
        if cache.add(key, delta, timeout=2 * self.seconds):
            return delta
        try:
            return int(cache.incr(key, delta))
        except ValueError:  # expired between add and incr
            cache.add(key, delta, timeout=2 * self.seconds)
            return delta

    def hit(self, ident: str, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        window = int(now // self.seconds)
        elapsed = (now % self.seconds) / self.seconds
        # Both windows in one read: in a window's steady state the counter exists, and
        # the increment is the only other call (Redis: MGET, then EXISTS and INCRBY).
        keys = [self._key(ident, window - 1), self._key(ident, window)]
        counts = self.cache.get_many(keys)
        previous = (counts.get(keys[0]) or 0) * (1 - elapsed)
        allowance = self.limit - math.ceil(previous)
        current = self._incr(keys[1], exists=keys[1] in counts)
        if current <= allowance:
            return True
        with contextlib.suppress(ValueError):  # the window's counter expired meanwhile
            self.cache.decr(keys[1])
        return False

    def exceeded(self, ident: str, now: float | None = None) -> bool:
        """Whether the events counted so far are at or over the limit (one round trip:
        every API request asks this before its key is looked up)."""
        now = time.time() if now is None else now
        previous, current = self._counts(ident, now)
        elapsed = (now % self.seconds) / self.seconds
        return math.ceil(previous * (1 - elapsed)) + current >= self.limit

    def wait(self, ident: str, now: float | None = None) -> int:
        """Seconds (at least 1) until one more event fits under the limit."""
        now = time.time() if now is None else now
        previous, current = self._counts(ident, now)
        into = now % self.seconds
        room = self.limit - 1 - current  # what the previous window's weight may be
        if room >= 0:
            if previous <= room:
                return 1
            # previous * (1 - x) <= room, x the fraction of this window gone by
            until = (1 - room / previous) * self.seconds - into
        else:
            # Not in this window: in the next, this window's count is the one weighed.
            weight = max(0.0, 1 - (self.limit - 1) / current) if current else 0.0
            until = self.seconds - into + weight * self.seconds
        return max(1, math.ceil(until))


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
        window = SlidingWindow("rate", *rate)
        ident = self._ident(request)
        try:
            if not cache.answering():
                raise ConnectionError("the cache did not answer a moment ago")
            if window.hit(ident):
                return True
            self._wait = window.wait(ident)
        except CACHE_ERRORS as exc:
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


def failed_authentications() -> SlidingWindow | None:
    rate = parse_rate(memoryhub_settings.AUTH_FAILURE_RATE)
    return SlidingWindow("auth-failures", *rate) if rate is not None else None


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
    except CACHE_ERRORS as exc:
        _unlimited(exc)


def count_failure(request: Any) -> None:
    """Count a guess: an unknown, revoked or malformed key (not an expired key or a key
    of a suspended org, which are real keys left in some configuration).

    Counted and checked in one atomic step (:meth:`SlidingWindow.hit`): a guess past
    the limit is answered ``Throttled``, not ``401``, so however many clients guess at
    once from one address, at most the limit of them learn that their key was wrong.
    (:func:`refuse_if_failing` keeps the others from being looked up at all; only the
    guesses already in flight when the limit is reached still are.)
    """
    window = failed_authentications()
    ident = f"ip:{client_address(request)}"
    try:
        if window is not None and not cache.answering():
            raise ConnectionError("the cache did not answer a moment ago")
        if window is not None and not window.hit(ident):
            raise _too_many_failures(window, ident)
    except CACHE_ERRORS as exc:
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


def _too_many_failures(window: SlidingWindow, ident: str) -> exceptions.Throttled:
    return exceptions.Throttled(
        wait=window.wait(ident), detail="Too many failed authentications from this address."
    )
