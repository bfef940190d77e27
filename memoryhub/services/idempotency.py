"""Safe retries: the first answer to a request sent with an ``Idempotency-Key``, kept and
given again to every retry of it, so a client that did not hear the answer (a timeout,
a dropped connection, a 503 from a proxy) can send the same write, update or forget
again without acting twice.

:func:`answer_once` runs the action and stores its answer in **one transaction**: the
answer exists exactly when the action committed. Two requests with the same key meet at
the unique index: the second waits for the first to commit and then gets its answer
(or, if the first rolled back, acts itself). An answer is stored only when it is a
success (2xx): a refusal or a validation error acts again on retry and says the same, and
a database that cancelled the transaction left nothing behind to replay.

Keys belong to their sender (an API key, or a staff user) inside their org, live
``IDEMPOTENCY_TTL`` seconds (:func:`purge_expired`), and are refused when reused with
another request (:class:`IdempotencyKeyReused`, the fingerprint of the method, path and
body differs). Every erasure in a domain deletes its kept answers (:func:`forget_domain`):
an update's answer holds the record's content.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ..conf import memoryhub_settings
from ..exceptions import MemoryhubError, ValidationFailed
from ..models import IdempotentRequest
from ..scope import Scope
from .store.transient import run_again_when_cancelled

__all__ = [
    "HEADER",
    "Answer",
    "IdempotencyKeyReused",
    "answer_once",
    "check_key",
    "fingerprint",
    "forget_domain",
    "purge_expired",
    "replace_answer",
]

#: The request header that names a request's idempotency key.
HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255


class IdempotencyKeyReused(MemoryhubError):
    """The key was sent before with another request (method, path or body)."""

    code = "idempotency_key_reused"

    def __init__(self) -> None:
        super().__init__(
            f"This {HEADER} was sent before with another request; use a new key for a new request."
        )


@dataclass(frozen=True, slots=True)
class Answer:
    """What a door answers: a status and a JSON body. ``replayed``: the first answer to
    an earlier request with the same key."""

    status: int
    body: Any
    replayed: bool = False


def check_key(key: str) -> str:
    """``key`` if it is a usable idempotency key (1 to 255 printable ASCII characters),
    else :class:`ValidationFailed` naming the header."""
    if not key or len(key) > MAX_KEY_LENGTH or not (key.isascii() and key.isprintable()):
        raise ValidationFailed(
            {HEADER: [f"must be 1 to {MAX_KEY_LENGTH} printable ASCII characters."]}
        )
    return key


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What makes two requests the same request."""
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode("utf-8", "surrogatepass"), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


_CLAIM = """
INSERT INTO memoryhub_idempotentrequest
    (org_id, domain_id, sender, idempotency_key, fingerprint, status, answer, created_at)
VALUES (%s, %s, %s, %s, %s, 0, 'null'::jsonb, %s)
ON CONFLICT (sender, idempotency_key, org_id) DO NOTHING
RETURNING id
"""


def answer_once(
    scope: Scope,
    sender: str,
    key: str,
    request_fingerprint: str,
    act: Callable[[], Answer],
) -> Answer:
    """``act()``'s answer, or the answer kept for an earlier request of ``sender`` with
    ``key`` (``replayed``). ``act`` runs inside this function's transaction; it answers
    failures it can put into words (a refusal, a validation error) instead of raising
    them, so what they record (a refusal's count) commits with them."""
    check_key(key)

    def once() -> Answer:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    _CLAIM,
                    [
                        scope.org_id,
                        scope.domain_id,
                        sender,
                        key,
                        request_fingerprint,
                        timezone.now(),
                    ],
                )
                claimed = cursor.fetchone()
            if claimed is None:
                return _kept(scope, sender, key, request_fingerprint)
            answer = act()
            kept = IdempotentRequest.unscoped.filter(pk=claimed[0], org_id=scope.org_id)
            if not 200 <= answer.status < 300:
                kept.delete()
            elif not kept.update(status=answer.status, answer=answer.body):
                # An erasure deletes its domain's answers, this request's claim too: its
                # own answer (counts and a receipt's id) is kept anew.
                IdempotentRequest.unscoped.create(
                    org_id=scope.org_id,
                    domain_id=scope.domain_id,
                    sender=sender,
                    idempotency_key=key,
                    fingerprint=request_fingerprint,
                    status=answer.status,
                    answer=answer.body,
                )
            return answer

    return run_again_when_cancelled(once)


def _kept(scope: Scope, sender: str, key: str, request_fingerprint: str) -> Answer:
    row = (
        IdempotentRequest.unscoped.filter(org_id=scope.org_id, sender=sender, idempotency_key=key)
        .values_list("fingerprint", "status", "answer")
        .first()
    )
    if row is None:  # purged between the claim and this read: a retry acts again
        raise ValidationFailed({HEADER: ["expired while it was read; send the request again."]})
    kept_fingerprint, status, body = row
    if kept_fingerprint != request_fingerprint:
        raise IdempotencyKeyReused()
    return Answer(status, body, replayed=True)


def replace_answer(scope: Scope, sender: str, key: str, answer: Answer) -> None:
    """Keep ``answer`` instead of the first one (a write's answer once ``?wait`` saw its
    records indexed: a retry then hears what the first request finally heard)."""
    IdempotentRequest.unscoped.filter(
        org_id=scope.org_id, sender=sender, idempotency_key=key
    ).update(status=answer.status, answer=answer.body)


def forget_domain(scope: Scope) -> int:
    """Delete the answers kept in ``scope``'s domain (an erasure's part); how many."""
    deleted, _ = IdempotentRequest.unscoped.filter(
        org_id=scope.org_id, domain_id=scope.domain_id
    ).delete()
    return deleted


def purge_expired(now: Any = None) -> int:
    """Delete the answers older than ``IDEMPOTENCY_TTL``; how many."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=memoryhub_settings.IDEMPOTENCY_TTL)
    deleted, _ = IdempotentRequest.unscoped.filter(created_at__lt=cutoff).delete()
    return deleted
