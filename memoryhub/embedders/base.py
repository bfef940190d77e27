"""The Embedder protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

#: The vector leg's share of a hybrid score for an embedder that does not say.
DEFAULT_HYBRID_VECTOR_WEIGHT = 0.4


class EmbedderError(RuntimeError):
    """An embedder could not embed (a remote API failed, a model is missing)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns text into fixed-size vectors.

    ``name`` identifies the model: records store it beside their vector, and each name
    gets its own HNSW index, so two models can coexist during a change of model.

    An embedder may also set ``hybrid_vector_weight`` (0 to 1): the share of hybrid
    search's fused score its vector leg gets by default (``DEFAULT_HYBRID_VECTOR_WEIGHT``
    when it does not say; the ``HYBRID_VECTOR_WEIGHT`` setting and a domain's own weight
    override it).

    An embedder whose vectors see words rather than meaning (the hashing stand-in) sets
    ``lexical = True``: health reports it and the admin says so where operators rank.
    """

    name: str
    dimensions: int

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """The vector of a search query."""
        ...


def is_lexical(embedder: object) -> bool:
    """Whether ``embedder`` is a lexical stand-in rather than a model of meaning."""
    return bool(getattr(embedder, "lexical", False))
