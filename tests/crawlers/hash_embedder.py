"""A fast deterministic embedder for crawler tests (hashed character trigrams); the store under it is real."""

from __future__ import annotations

import hashlib

import numpy as np

from retrieval.embedders.base import EmbeddingBatch, l2_normalize


class HashEmbedder:
    name = "test-hash-trigrams"
    dim = 64
    has_sparse = False

    def _encode(self, texts: list[str]) -> EmbeddingBatch:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            t = f"  {text.casefold()} "
            for i in range(len(t) - 2):
                h = int.from_bytes(hashlib.blake2b(t[i : i + 3].encode(), digest_size=4).digest(), "little")
                out[row, h % self.dim] += 1.0
        return EmbeddingBatch(l2_normalize(out))

    def encode_queries(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(list(texts))

    def encode_documents(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(list(texts))


def build(settings: object) -> HashEmbedder:
    return HashEmbedder()
