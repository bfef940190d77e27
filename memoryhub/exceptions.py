"""Every domain error memoryhub raises, in one place; the API and the admin map them.

Defined here: :class:`MemoryhubError` and its subclasses. Three errors live where they
must, and are imported from there only: ``memoryhub.scope.ScopeRequired`` is a
``PermissionError`` (a tenant violation wants a different fix than a domain error),
``memoryhub.embedders.EmbedderError`` and ``memoryhub.consolidation.ExtractionError``
belong to their pluggable protocols.

Nothing here imports Django: :mod:`memoryhub.client` raises these errors (its ``Http*``
subclasses of them) in a process without Django.
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


class PolicyDenied(MemoryhubError):
    """The principal may not do ``action`` here (a :class:`memoryhub.policy.Action`
    value): the API answers 403 ``permission_denied``.

    Not a Django ``PermissionDenied``, so that a process without Django can raise and
    catch it; a host's own Django view that lets it escape maps it itself.
    """

    code = "permission_denied"

    def __init__(self, action: str, message: str = "") -> None:
        self.action = action
        super().__init__(message or f"This credential lacks the {action} permission.")


class RecordNotFound(MemoryhubError, LookupError):
    """No record with that id in this scope (it may exist in another: that is not said)."""

    code = "record_not_found"


class ReceiptNotFound(MemoryhubError, LookupError):
    """No erasure receipt with that id in this scope."""

    code = "receipt_not_found"
