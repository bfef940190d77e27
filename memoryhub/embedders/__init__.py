"""Embedders turn text into vectors. memoryhub ships three; any object with the
:class:`Embedder` shape can be configured in ``MEMORYHUB["EMBEDDER"]``:

* ``memoryhub.embedders.HashingEmbedder`` (default): deterministic, no model, no network;
* ``memoryhub.embedders.SentenceTransformerEmbedder``: a local model (extra
  ``local-embeddings``);
* ``memoryhub.embedders.OpenAICompatibleEmbedder``: any ``/v1/embeddings`` endpoint.
"""

from .base import Embedder, EmbedderError
from .hashing import HashingEmbedder
from .openai import OpenAICompatibleEmbedder
from .sentence_transformers import SentenceTransformerEmbedder

__all__ = [
    "Embedder",
    "EmbedderError",
    "HashingEmbedder",
    "OpenAICompatibleEmbedder",
    "SentenceTransformerEmbedder",
]
