"""Signals for host projects: what memoryhub did, sent once the transaction that did it
has committed (a rolled-back write or erasure sends nothing).

``record_written``
    ``scope`` (:class:`~memoryhub.scope.Scope`), ``source`` (knowledge base name),
    ``created`` and ``updated`` (lists of record ids), ``actor`` (who wrote: ``api-key:…``,
    ``admin:…``, an import's operator, or your own code's actor).
``records_forgotten``
    ``scope``, ``receipt`` (the erasure receipt's id), ``deleted`` (count), ``by_source``
    (count per knowledge base), ``selector`` (as the receipt keeps it: namespace and key
    as keyed hashes), ``actor``.
``subject_erased``
    An erasure of a data subject's namespace (``SUBJECT_NAMESPACE_PREFIXES``), also sent
    as ``records_forgotten``: ``scope``, ``namespace`` (in clear, in-process only; it is
    never stored), ``receipt``, ``deleted``, ``actor``. Use it to erase what your own
    project keeps about that person.

Receivers run in the process that committed (a web request or a worker); a receiver's
exception is logged and never undoes or fails the committed work.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.db import transaction
from django.dispatch import Signal

__all__ = ["record_written", "records_forgotten", "send_on_commit", "subject_erased"]

logger = logging.getLogger(__name__)

record_written = Signal()
records_forgotten = Signal()
subject_erased = Signal()


def send_on_commit(signal: Signal, **payload: Any) -> None:
    """Send ``signal`` with ``payload`` once the current transaction commits."""
    if not signal.has_listeners():
        return
    transaction.on_commit(partial(_send, signal, payload))


def _send(signal: Signal, payload: dict[str, Any]) -> None:
    for receiver, result in signal.send_robust(sender=None, **payload):
        if isinstance(result, Exception):
            logger.error(
                "memoryhub signal receiver %r failed: %s: %s",
                receiver,
                type(result).__name__,
                result,
            )
