"""Rerankers reorder a query's best candidates by a model's judgement of relevance to
the query (a cross-encoder), which first-stage search (cosine, full-text rank, their
fusion) cannot make. memoryhub ships one; any object with the :class:`DocumentReranker`
shape can be configured in ``MEMORYHUB["RERANKER"]``:

* ``memoryhub.rerankers.HttpReranker``: a ``/rerank`` endpoint of the Cohere shape
  (Cohere, Jina, vLLM, LiteLLM) or of Hugging Face's text-embeddings-inference.

A reranker sees the query and the candidates' content only, never ids, metadata or
tenants. ``memoryhub.sources.ItemReranker`` lets the same object rerank a
``CompositeMemory``.
"""

from .base import DocumentReranker, RerankerError, checked_ranking
from .http import HttpReranker

__all__ = ["DocumentReranker", "HttpReranker", "RerankerError", "checked_ranking"]
