"""Transactions the database cancels and that are safe to run again whole.

PostgreSQL cancels a transaction that deadlocked (SQLSTATE ``40P01``) or could not be
serialised (``40001``). On a Citus cluster a tenant's shard group being moved or split
cancels writes in the same ways: the distributed deadlock detector answers ``40P01``,
a statement routed to a shard that has just gone ``40001`` ("shard for the given value
does not exist"), and a statement planned against metadata that changed under it an
internal error naming a shard ("could not find valid entry for shard"). Nothing of
such a transaction was committed, so a use case that opened it runs it again from the
start (:func:`run_again_when_cancelled`), a few times with jittered backoff. Past those,
the error stands; the doors answer it ``503`` with ``Retry-After``
(:func:`is_transient`), never ``500``.

A function called inside its caller's transaction is not retried here: only whoever
opened the outermost transaction can run it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connections
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

__all__ = ["ATTEMPTS", "TRANSIENT_SQLSTATES", "is_transient", "run_again_when_cancelled"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Deadlock detected, serialization failure (Citus's "shard … does not exist" too).
TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})

#: Internal errors (``XX000``) Citus raises when a shard's metadata changed under a
#: statement (a move or split finished while it was planned): transient too.
SHARD_IN_TRANSITION = ("could not find valid entry for shard",)

#: How many times a cancelled transaction runs in all before its error stands.
ATTEMPTS = 5


def _sqlstate(exc: BaseException) -> tuple[str | None, str]:
    """The SQLSTATE and message of the driver error behind ``exc`` (Django wraps it)."""
    seen: BaseException | None = exc
    while seen is not None:
        sqlstate = getattr(seen, "sqlstate", None) or getattr(seen, "pgcode", None)
        if sqlstate:
            return str(sqlstate), str(seen)
        seen = seen.__cause__
    return None, str(exc)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a database's cancellation of a transaction that may simply be
    run again (a deadlock, a serialisation failure, a shard in transition)."""
    if not isinstance(exc, DatabaseError):
        return False
    sqlstate, message = _sqlstate(exc)
    if sqlstate in TRANSIENT_SQLSTATES:
        return True
    return sqlstate == "XX000" and any(text in message for text in SHARD_IN_TRANSITION)


def _log_retry(state: RetryCallState) -> None:
    failure = state.outcome.exception() if state.outcome is not None else None
    sqlstate, _ = _sqlstate(failure) if failure is not None else (None, "")
    logger.warning(
        "transaction cancelled by the database (%s), run again (attempt %d of %d)",
        sqlstate,
        state.attempt_number + 1,
        ATTEMPTS,
    )


def run_again_when_cancelled(function: Callable[[], T], *, using: str = "default") -> T:
    """``function()`` (which opens its own transaction), run again from the start when
    the database cancels it transiently (:func:`is_transient`), up to :data:`ATTEMPTS`
    times in all; then the last error is raised."""
    if connections[using].in_atomic_block:
        return function()
    retrying = Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.05, max=1.0),
        before_sleep=_log_retry,
        reraise=True,
    )
    return retrying(function)
