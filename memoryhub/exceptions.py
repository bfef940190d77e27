"""Every domain error memoryhub raises, in one place; the API and the admin map them.

Defined here: :class:`MemoryhubError` and its subclasses. Four errors live where they
must, and are imported from there only: ``memoryhub.policy.PolicyDenied`` is Django's
``PermissionDenied`` (so every door, including Django's own views, answers 403),
``memoryhub.scope.ScopeRequired`` is a ``PermissionError`` (a tenant violation wants a
different fix than a domain error), ``memoryhub.embedders.EmbedderError`` and
``memoryhub.consolidation.ExtractionError`` belong to their pluggable protocols.
"""

from __future__ import annotations

from collections.abc import Mapping


class MemoryhubError(Exception):
    """Base of memoryhub's domain errors (a tenant violation is ``ScopeRequired``, a
    ``PermissionError``, on purpose: "wrong tenant" and "right tenant, read-only
    source" want different fixes where they are caught)."""


class ValidationFailed(MemoryhubError, ValueError):
    """Input was rejected as a whole; nothing was written.

    ``errors`` maps a path (``items[2].tags``, ``where.$and[1].price``) to messages.
    """

    code = "invalid"

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        self.errors = {path: list(messages) for path, messages in errors.items()}
        first_path, messages = next(iter(self.errors.items()))
        super().__init__(f"{first_path}: {messages[0]}")


class UnknownSource(MemoryhubError, LookupError):
    """A request named a knowledge base the domain does not have."""

    code = "unknown_source"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"Unknown knowledge base {name!r}.")


class WriteRefused(MemoryhubError):
    """A read-only knowledge base refused a write: ``source`` and ``n`` (items refused).

    Raised even for an empty write: the policy is about the attempt, not bytes moved.
    """

    code = "write_refused"

    def __init__(self, source: str, n: int) -> None:
        self.source = source
        self.n = n
        super().__init__(f"Knowledge base {source!r} is read-only; {n} item(s) refused.")


class RecordNotFound(MemoryhubError, LookupError):
    """No record with that id in this scope (it may exist in another: that is not said)."""

    code = "record_not_found"


class ReceiptNotFound(MemoryhubError, LookupError):
    """No erasure receipt with that id in this scope."""

    code = "receipt_not_found"
