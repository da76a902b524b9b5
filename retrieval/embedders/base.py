"""The embedder contract: dense L2-normalised float32 vectors, optional sparse lexical weights."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from culturebase.store.base import EmbedderInfo


class EmbedderUnavailableError(RuntimeError):
    """The embedder's model cannot be loaded; the message says how to fix it."""


@dataclass
class EmbeddingBatch:
    """Embeddings of n texts: ``dense`` is (n, dim) float32 with unit rows; ``sparse`` is n token-id → weight maps."""

    dense: np.ndarray
    sparse: list[dict[int, float]] | None = None

    def __len__(self) -> int:
        return int(self.dense.shape[0])


@runtime_checkable
class Embedder(Protocol):
    """Query and document encoders of one model."""

    name: str
    dim: int
    has_sparse: bool

    def encode_queries(self, texts: list[str]) -> EmbeddingBatch:
        """Embed search queries (adds the model's query convention)."""
        ...

    def encode_documents(self, texts: list[str]) -> EmbeddingBatch:
        """Embed documents/passages (adds the model's passage convention)."""
        ...


def embedder_info(embedder: Embedder) -> EmbedderInfo:
    """What the store records about an embedder."""
    return EmbedderInfo(name=embedder.name, dim=embedder.dim, sparse=embedder.has_sparse)


def l2_normalize(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)
