"""The query cache, invalidated by per-domain generation counters.

A cached query result is stored under a key made of the org, the domain, the domain's
current *generation* and a hash of the canonical JSON of the normalised request. Every
write, update, forget and expiry purge in a domain bumps its generation (after the
transaction commits), so later reads miss the old entries whichever path changed the
data, and one tenant's entry can never answer another tenant. An erasure also deletes
the domain's cached results at once (``purge_queries``): they hold the erased content.

A cache that does not answer (Redis down or unreachable) never fails what uses it: a
query is ranked afresh and not stored, and a bump that could not be made is owed, paid
by this process before it next reads or writes the cache, so a cache that comes back
holding entries of before the outage does not serve them as current. The work that
bumps (a committed write or erasure) is never reported as failed because of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from functools import partial
from typing import Any

from django.core.cache import BaseCache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache
from django.db import transaction

from .conf import memoryhub_settings
from .scope import Scope

_PREFIX = "memoryhub"
logger = logging.getLogger(__name__)


#: What a cache backend raises when its server does not answer (Django's Redis backend
#: raises redis-py's errors; a socket's are ``OSError``).
CACHE_ERRORS: tuple[type[BaseException], ...] = (OSError,)
try:
    from redis.exceptions import RedisError
except ImportError:  # pragma: no cover - redis comes with celery[redis]
    pass
else:
    CACHE_ERRORS = (OSError, RedisError)

#: Domains whose generation could not be bumped in this process: bumped before the
#: cache is next used here.
_owed: set[Scope] = set()
_owed_lock = threading.Lock()

#: After the cache failed to answer, this process leaves it alone for these seconds (a
#: request then waits for no timeout of it at all), then tries again.
RETRY_AFTER_SECONDS = 5.0
_unanswered_until = 0.0


def _cache() -> BaseCache:
    return caches[memoryhub_settings.CACHE_ALIAS]


def answering() -> bool:
    """Whether this process may ask the cache (it has not just failed to answer)."""
    return time.monotonic() >= _unanswered_until


def require_answering() -> None:
    """Raise ``ConnectionError`` (one of :data:`CACHE_ERRORS`) when this process is
    leaving the cache alone after a failure: its callers then take their no-cache path
    without waiting for a timeout."""
    if not answering():
        raise ConnectionError("the cache did not answer a moment ago")


def _unanswered(what: str, exc: BaseException) -> None:
    global _unanswered_until
    if answering():
        logger.warning(
            "the cache did not answer (%s), left alone for %.0f s: %s",
            what,
            RETRY_AFTER_SECONDS,
            type(exc).__name__,
        )
    _unanswered_until = time.monotonic() + RETRY_AFTER_SECONDS


def unanswered(what: str, exc: BaseException) -> None:
    """Tell this module that the cache failed to answer a caller of its own (the
    throttles): everyone leaves it alone for a while."""
    _unanswered(what, exc)


def _generation_key(scope: Scope) -> str:
    return f"{_PREFIX}:gen:{scope.key()}"


def _incr_generation(cache: BaseCache, scope: Scope) -> None:
    key = _generation_key(scope)
    try:
        cache.incr(key)
    except ValueError:
        # Missing (never read, or evicted): any new value differs from what entries used.
        cache.set(key, 2, timeout=None)


def _pay_owed(cache: BaseCache) -> None:
    """Make the bumps that failed earlier in this process (raises if the cache still
    does not answer; what is left stays owed)."""
    if not _owed:
        return
    with _owed_lock:
        for scope in sorted(_owed, key=Scope.key):
            _incr_generation(cache, scope)
            _owed.discard(scope)


def generation(scope: Scope) -> int | None:
    """The current generation of ``scope``'s domain (created on first use); None when
    the cache does not answer (nothing may then be read from it or stored in it)."""
    if not answering():
        return None
    cache = _cache()
    key = _generation_key(scope)
    try:
        _pay_owed(cache)
        value = cache.get(key)
        if value is None:
            cache.add(key, 1, timeout=None)
            value = cache.get(key, 1)
    except CACHE_ERRORS as exc:
        _unanswered("generation", exc)
        return None
    return int(value)


def bump_generation(scope: Scope) -> None:
    """Invalidate every cached query of ``scope``'s domain (owed when the cache does not
    answer: see the module's docstring)."""
    cache = _cache()
    try:
        require_answering()
        _pay_owed(cache)
        _incr_generation(cache, scope)
    except CACHE_ERRORS as exc:
        _unanswered("bump, owed", exc)
        with _owed_lock:
            _owed.add(scope)


def bump_generation_on_commit(scope: Scope) -> None:
    """Bump once the current transaction commits (immediately outside one)."""
    transaction.on_commit(partial(bump_generation, scope), robust=True)


def domain_saved(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``post_save`` of a domain: its settings (the hybrid weight) shape its queries."""
    bump_generation_on_commit(Scope(instance.org_id, instance.pk))


def _glob_escape(text: str) -> str:
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)


def purge_queries(scope: Scope) -> int:
    """Delete the cached query results of ``scope``'s domain; return how many.

    A bump makes old entries unreachable, but they hold content until their TTL: after
    an erasure they must go at once. Django's cache API cannot list keys, so this uses
    the two backends the site configures (local memory, Redis); with another backend
    the entries expire after ``CACHE_TTL``.
    """
    cache = _cache()
    prefix = cache.make_key(f"{_PREFIX}:{QUERY_NAMESPACE}:{scope.key()}:")
    # Both through private attributes: the entries dict and its lock; the redis client.
    backend: Any = cache
    if isinstance(cache, LocMemCache):
        with backend._lock:
            doomed = [key for key in backend._cache if key.startswith(prefix)]
            for key in doomed:
                backend._delete(key)
        return len(doomed)
    if isinstance(cache, RedisCache):
        client = backend._cache.get_client(None, write=True)
        doomed = list(client.scan_iter(match=_glob_escape(prefix) + "*", count=1000))
        if doomed:
            client.delete(*doomed)
        return len(doomed)
    return 0


def erase_on_commit(scope: Scope) -> None:
    """After an erasure commits: bump the generation and delete the cached results."""

    def erase() -> None:
        # The erasure is committed: a cache that cannot be reached must not turn it into
        # an error (it then holds nothing to serve either).
        bump_generation(scope)
        try:
            purge_queries(scope)
        except Exception as exc:
            logger.warning("could not purge the query cache of %s: %s", scope, type(exc).__name__)

    transaction.on_commit(erase, robust=True)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


#: The format of cached query values: ``(ranking, strategy, reranked)`` since q3 (the
#: reranker's scores by id, or None), ``(ranking, strategy)`` in q2 (q held results with
#: content). A new format gets a new name, so a rolling deploy never reads the other.
QUERY_NAMESPACE = "q3"


def query_key(scope: Scope, request: dict[str, Any], gen: int | None = None) -> str | None:
    """The cache key of ``request`` in ``scope`` at generation ``gen`` (default: the
    domain's current one); None when the generation is not known (the cache does not
    answer): such a query is neither read from the cache nor stored in it."""
    digest = hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()
    gen = generation(scope) if gen is None else gen
    if gen is None:
        return None
    return f"{_PREFIX}:{QUERY_NAMESPACE}:{scope.key()}:g{gen}:{digest}"


def _get(key: str | None) -> Any:
    if key is None or not answering():
        return None
    try:
        return _cache().get(key)
    except CACHE_ERRORS as exc:
        _unanswered("read", exc)
        return None


def _set(key: str | None, value: Any, timeout: int) -> None:
    if key is None or not answering():
        return
    try:
        _cache().set(key, value, timeout=timeout)
    except CACHE_ERRORS as exc:
        _unanswered("write", exc)


def get_query(key: str | None) -> Any:
    if memoryhub_settings.CACHE_TTL <= 0:
        return None
    return _get(key)


def set_query(key: str | None, value: Any) -> None:
    ttl = memoryhub_settings.CACHE_TTL
    if ttl > 0:
        _set(key, value, ttl)


#: Plan facts (how many rows a filter selects) live this long within a generation.
PLAN_TTL = 600


def plan_key(scope: Scope, description: str, gen: int | None = None) -> str | None:
    """The cache key of a plan fact (None when the generation is not known)."""
    digest = hashlib.sha256(description.encode("utf-8")).hexdigest()
    gen = generation(scope) if gen is None else gen
    if gen is None:
        return None
    return f"{_PREFIX}:plan:{scope.key()}:g{gen}:{digest}"


def get_plan(key: str | None) -> Any:
    return _get(key)


def set_plan(key: str | None, value: Any) -> None:
    _set(key, value, PLAN_TTL)


def first_within(scope: Scope, name: str, seconds: int) -> bool:
    """True for the first call about ``name`` in ``scope``'s domain in ``seconds``
    (across processes sharing the cache), False for the others: for events worth telling
    an operator once, not at every occurrence. A cache that does not answer cannot
    tell: True (told too often rather than never)."""
    if not answering():
        return True
    try:
        return bool(_cache().add(f"{_PREFIX}:once:{scope.key()}:{name}", 1, timeout=seconds))
    except CACHE_ERRORS as exc:
        _unanswered("once", exc)
        return True
