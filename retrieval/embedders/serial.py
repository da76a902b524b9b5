"""One lock around an embedder: the only serialised part of concurrent grounding.

Model runtimes (onnxruntime sessions, torch modules) are not safe to call from several
threads at once, so :class:`SerialEmbedder` lets one encode call run at a time.  Everything
after the embedding (dense/sparse search in the store, payload reads, fusion) runs
concurrently: the store is one open engine that serves parallel searches (Qdrant's segments
take read locks internally), so request workers no longer queue behind a global lock.
"""

from __future__ import annotations

import threading
from typing import Any

from retrieval.embedders.base import EmbeddingBatch


class SerialEmbedder:
    """Wraps an embedder so that its encode calls run one at a time (other attributes pass through)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.lock = threading.Lock()

    @classmethod
    def wrap(cls, embedder: Any) -> Any:
        """``embedder`` behind a lock (an already wrapped one, or one marked ``thread_safe`` such as the
        remote embedder, is returned as is)."""
        if isinstance(embedder, SerialEmbedder) or getattr(embedder, "thread_safe", False):
            return embedder
        return cls(embedder)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def has_sparse(self) -> bool:
        return self.inner.has_sparse

    def encode_queries(self, texts: list[str]) -> EmbeddingBatch:
        with self.lock:
            return self.inner.encode_queries(texts)

    def encode_documents(self, texts: list[str]) -> EmbeddingBatch:
        with self.lock:
            return self.inner.encode_documents(texts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
