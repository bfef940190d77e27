"""Embedders turn text into vectors. memoryhub ships three; any object with the
:class:`Embedder` shape can be configured in ``MEMORYHUB["EMBEDDER"]``.
"""

from .base import Embedder, EmbedderError
from .hashing import HashingEmbedder

__all__ = ["Embedder", "EmbedderError", "HashingEmbedder"]
