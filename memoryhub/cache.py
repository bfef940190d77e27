"""The query cache, invalidated by per-domain generation counters.

A cached query result is stored under a key made of the org, the domain, the domain's
current *generation* and a hash of the canonical JSON of the normalised request. Every
write, update, forget and expiry purge in a domain bumps its generation (after the
transaction commits), so later reads miss the old entries whichever path changed the
data, and one tenant's entry can never answer another tenant. An erasure also deletes
the domain's cached results at once (``purge_queries``): they hold the erased content.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from django.core.cache import BaseCache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache
from django.db import transaction

from .conf import memoryhub_settings
from .scope import Scope

_PREFIX = "memoryhub"
logger = logging.getLogger(__name__)


def _cache() -> BaseCache:
    return caches[memoryhub_settings.CACHE_ALIAS]


def _generation_key(scope: Scope) -> str:
    return f"{_PREFIX}:gen:{scope.key()}"


def generation(scope: Scope) -> int:
    """The current generation of ``scope``'s domain (created on first use)."""
    cache = _cache()
    key = _generation_key(scope)
    value = cache.get(key)
    if value is None:
        cache.add(key, 1, timeout=None)
        value = cache.get(key, 1)
    return int(value)


def bump_generation(scope: Scope) -> None:
    """Invalidate every cached query of ``scope``'s domain."""
    cache = _cache()
    key = _generation_key(scope)
    try:
        cache.incr(key)
    except ValueError:
        # Missing (never read, or evicted): any new value differs from what entries used.
        cache.set(key, 2, timeout=None)


def bump_generation_on_commit(scope: Scope) -> None:
    """Bump once the current transaction commits (immediately outside one)."""
    transaction.on_commit(lambda: bump_generation(scope))


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
        try:
            bump_generation(scope)
            purge_queries(scope)
        except Exception as exc:
            logger.warning("could not purge the query cache of %s: %s", scope, type(exc).__name__)

    transaction.on_commit(erase)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


#: The format of cached query values: ``(ranking, strategy, reranked)`` since q3 (the
#: reranker's scores by id, or None), ``(ranking, strategy)`` in q2 (q held results with
#: content). A new format gets a new name, so a rolling deploy never reads the other.
QUERY_NAMESPACE = "q3"


def query_key(scope: Scope, request: dict[str, Any], gen: int | None = None) -> str:
    """The cache key of ``request`` in ``scope`` at generation ``gen`` (default: the
    domain's current one)."""
    digest = hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()
    gen = generation(scope) if gen is None else gen
    return f"{_PREFIX}:{QUERY_NAMESPACE}:{scope.key()}:g{gen}:{digest}"


def get_query(key: str) -> Any:
    if memoryhub_settings.CACHE_TTL <= 0:
        return None
    return _cache().get(key)


def set_query(key: str, value: Any) -> None:
    ttl = memoryhub_settings.CACHE_TTL
    if ttl > 0:
        _cache().set(key, value, timeout=ttl)


#: Plan facts (how many rows a filter selects) live this long within a generation.
PLAN_TTL = 600


def plan_key(scope: Scope, description: str, gen: int | None = None) -> str:
    digest = hashlib.sha256(description.encode("utf-8")).hexdigest()
    gen = generation(scope) if gen is None else gen
    return f"{_PREFIX}:plan:{scope.key()}:g{gen}:{digest}"


def get_plan(key: str) -> Any:
    return _cache().get(key)


def set_plan(key: str, value: Any) -> None:
    _cache().set(key, value, timeout=PLAN_TTL)


def first_within(scope: Scope, name: str, seconds: int) -> bool:
    """True for the first call about ``name`` in ``scope``'s domain in ``seconds``
    (across processes sharing the cache), False for the others: for events worth telling
    an operator once, not at every occurrence."""
    return bool(_cache().add(f"{_PREFIX}:once:{scope.key()}:{name}", 1, timeout=seconds))
