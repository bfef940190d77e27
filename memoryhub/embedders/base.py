"""The Embedder protocol."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

#: The vector leg's share of a hybrid score for an embedder that does not say.
DEFAULT_HYBRID_VECTOR_WEIGHT = 0.4


logger = logging.getLogger(__name__)


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


def is_warm(embedder: object) -> bool:
    """Whether ``embedder`` answers without loading anything first: a model loaded (an
    embedder with ``warm_up``, such as ``SentenceTransformerEmbedder``, reports
    ``warm``), or one with nothing to load."""
    return bool(getattr(embedder, "warm", True))


#: The embedders whose model a thread is loading, by id.
_warming: dict[int, object] = {}
_warming_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A process forked while a model loaded (gunicorn's --preload, a Celery pool
    child) has no loading thread: its locks start free and it loads the model itself."""
    global _warming_lock
    _warming_lock = threading.Lock()
    loading = list(_warming.values())
    _warming.clear()
    for embedder in loading:
        after_fork = getattr(embedder, "after_fork", None)
        if after_fork is not None:
            after_fork()
        warm_in_background(embedder)


os.register_at_fork(after_in_child=_after_fork_in_child)


def warm_in_background(embedder: object) -> bool:
    """Load ``embedder``'s model in a daemon thread, once per embedder, so that the first
    query or batch does not wait for it (a local model takes seconds to load); returns
    whether a load was started. Embedders without ``warm_up`` have nothing to load."""
    warm_up = getattr(embedder, "warm_up", None)
    if warm_up is None or is_warm(embedder):
        return False
    with _warming_lock:
        if id(embedder) in _warming:
            return False
        _warming[id(embedder)] = embedder

    def load() -> None:
        try:
            warm_up()
        except Exception as exc:  # the first use raises it again, to its caller
            logger.warning("the embedder's model did not load: %s: %s", type(exc).__name__, exc)
        finally:
            with _warming_lock:
                _warming.pop(id(embedder), None)

    threading.Thread(target=load, name="memoryhub-warm-embedder", daemon=True).start()
    return True


def warm_configured_in_background() -> None:
    """:func:`warm_in_background` for the configured embedder (a process starting: a
    worker, a web server); an embedder that cannot be built is the system checks'."""
    from ..conf import memoryhub_settings

    try:
        warm_in_background(memoryhub_settings.embedder())
    except Exception as exc:
        logger.warning("the embedder cannot be built: %s: %s", type(exc).__name__, exc)
