"""The DocumentReranker protocol, its error, and the check every ranking passes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

__all__ = ["DocumentReranker", "Outcome", "RerankerError", "checked_ranking"]

#: How a reranker failed, in the consolidation extractor's words: ``malformed`` (an
#: answer that is not a ranking), ``rate_limited`` (429), ``unavailable`` (408, 5xx, a
#: connection error), ``timeout``, ``refused`` (any other HTTP status, not retried), or
#: ``error`` (a reranker raised something other than :class:`RerankerError`).
Outcome = Literal["malformed", "rate_limited", "unavailable", "timeout", "refused", "error"]


class RerankerError(RuntimeError):
    """A reranker gave no usable ranking; ``outcome`` says how, ``attempts`` how many
    requests it made, ``status`` the last HTTP status (when there was one)."""

    def __init__(
        self,
        reason: str,
        *,
        outcome: Outcome = "malformed",
        status: int | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.outcome: Outcome = outcome
        self.status = status
        self.attempts = attempts


@runtime_checkable
class DocumentReranker(Protocol):
    """Scores documents against a query.

    ``name`` identifies the reranker (its model) in cache keys and observations.
    ``rerank`` is synchronous, since the query service calls it inside a request, and
    returns the best ``top_n`` documents as ``(index into documents, score)``, best
    first; a higher score is more relevant. It raises :class:`RerankerError` when it
    cannot answer; whatever it returns is checked with :func:`checked_ranking`.
    """

    name: str

    def rerank(
        self, query: str, documents: Sequence[str], *, top_n: int
    ) -> list[tuple[int, float]]: ...


def checked_ranking(ranking: object, documents: int, top_n: int) -> list[tuple[int, float]]:
    """``ranking``'s best ``top_n`` pairs, best first (ties keep their order), if it is
    what :meth:`DocumentReranker.rerank` promises; else :class:`RerankerError`
    (``malformed``).

    A ranking is a sequence of ``(index, score)`` pairs: every index an ``int`` naming
    one of ``documents``, none named twice, every score a finite number, and at least
    ``min(top_n, documents)`` of them. A ranking that leaves a document out that it
    should have scored is refused whole rather than used in part: either the order is
    the reranker's, or (the caller falls back) none of it is.
    """
    if isinstance(ranking, str | bytes) or not isinstance(ranking, Sequence):
        raise RerankerError("the ranking is not a list")
    pairs: list[tuple[int, float]] = []
    seen: set[int] = set()
    for position, pair in enumerate(ranking):
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise RerankerError(f"entry {position} is not an (index, score) pair")
        index, score = pair
        if isinstance(index, bool) or not isinstance(index, int):
            raise RerankerError(f"entry {position}: the index is not an integer")
        if not 0 <= index < documents:
            raise RerankerError(f"entry {position}: index {index} is out of range")
        if index in seen:
            raise RerankerError(f"entry {position}: index {index} is named twice")
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise RerankerError(f"entry {position}: the score is not a number")
        if not math.isfinite(score):
            raise RerankerError(f"entry {position}: the score is not finite")
        seen.add(index)
        pairs.append((index, float(score)))
    wanted = min(top_n, documents)
    if len(pairs) < wanted:
        raise RerankerError(f"{len(pairs)} documents scored, {wanted} asked for")
    pairs.sort(key=lambda pair: -pair[1])
    return pairs[:top_n]
