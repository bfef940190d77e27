"""A deterministic, dependency-light embedder: feature hashing of word and character n-grams.

It needs no model download and gives the same vector for the same text on every
machine, so it is the default and what the tests use. It captures shared words and
word pieces, not meaning: a paraphrase with no words in common scores low. Use a real
model (``SentenceTransformerEmbedder`` or ``OpenAICompatibleEmbedder``) for semantics.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)
_NAME = re.compile(r"hashing-(\d{1,5})-c(\d)(\d)")


class HashingEmbedder:
    """Signed feature hashing of words, word bigrams and character n-grams, L2-normalised."""

    #: Its vectors see shared words and word pieces, less than the keyword leg does:
    #: measured by ``python -m benchmarks.quality`` (benchmarks/REPORT.md, "Quality").
    hybrid_vector_weight = 0.3
    #: Its vectors match shared words and word pieces, not meaning.
    lexical = True

    def __init__(
        self,
        dimensions: int = 384,
        *,
        char_ngrams: tuple[int, int] = (3, 5),
        word_weight: float = 1.0,
        bigram_weight: float = 0.5,
        char_weight: float = 0.3,
    ) -> None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 2:
            raise ValueError("dimensions must be an integer >= 2")
        low, high = char_ngrams
        if not 1 <= low <= high:
            raise ValueError("char_ngrams must be (low, high) with 1 <= low <= high")
        self.dimensions = dimensions
        self.char_ngrams = (low, high)
        self.weights = (word_weight, bigram_weight, char_weight)
        self.name = f"hashing-{dimensions}-c{low}{high}"

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimensions={self.dimensions})"

    @classmethod
    def from_name(cls, name: str) -> HashingEmbedder | None:
        """The embedder a stored ``hashing-<dimensions>-c<low><high>`` name came from, with
        the default weights (other weights: list it in ``PREVIOUS_EMBEDDERS``)."""
        match = _NAME.fullmatch(name)
        if match is None:
            return None
        dimensions, low, high = (int(group) for group in match.groups())
        try:
            return cls(dimensions, char_ngrams=(low, high))
        except ValueError:
            return None

    def _features(self, text: str) -> list[tuple[str, float]]:
        word_weight, bigram_weight, char_weight = self.weights
        words = _WORD.findall(text.lower())
        features: list[tuple[str, float]] = [("w:" + word, word_weight) for word in words]
        features.extend(
            ("b:" + first + " " + second, bigram_weight)
            for first, second in itertools.pairwise(words)
        )
        low, high = self.char_ngrams
        for word in words:
            padded = f"<{word}>"
            for size in range(low, high + 1):
                features.extend(
                    ("c:" + padded[start : start + size], char_weight)
                    for start in range(len(padded) - size + 1)
                )
        return features

    def _embed(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimensions, dtype=np.float32)
        for feature, weight in self._features(text):
            digest = zlib.crc32(feature.encode("utf-8"))
            sign = 1.0 if digest & 0x80000000 else -1.0
            vector[digest % self.dimensions] += sign * weight
        norm = float(np.linalg.norm(vector))
        if norm > 0:
            vector /= norm
        return vector

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed(text).tolist() for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text).tolist()
