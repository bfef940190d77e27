"""The Embedder protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


class EmbedderError(RuntimeError):
    """An embedder could not embed (a remote API failed, a model is missing)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns text into fixed-size vectors.

    ``name`` identifies the model: records store it beside their vector, and each name
    gets its own HNSW index, so two models can coexist during a change of model.
    """

    name: str
    dimensions: int

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """The vector of a search query."""
        ...
