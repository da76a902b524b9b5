"""The optional learned image embedder of the image route (``KAR_IMAGE_EMBEDDER=clip|siglip``).

A CLIP or SigLIP vision tower loaded with transformers from a local folder in the Hugging
Face format (``KAR_IMAGE_EMBEDDER_MODEL``: ``config.json``, the weights and
``preprocessor_config.json``).  Nothing is ever downloaded: a missing or incomplete folder
is an immediate :class:`ImageEmbedderError` that says where to put the model.  Each image
becomes one L2-normalised vector (``get_image_features``), so a dot product in the store is
the cosine similarity of two images.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from culturebase.store import EmbedderInfo
from retrieval.embedders import EmbedderUnavailableError

if TYPE_CHECKING:
    from PIL import Image

    from culturebase.settings import Settings

log = logging.getLogger(__name__)

ImageEmbedderKind = Literal["clip", "siglip"]
KINDS: tuple[str, ...] = ("clip", "siglip")


class ImageEmbedderError(EmbedderUnavailableError):
    """The configured image embedder cannot be loaded (missing folder, wrong format)."""


def _need_folder(kind: str, path: Path | None) -> Path:
    env = "KAR_IMAGE_EMBEDDER_MODEL"
    if path is None:
        raise ImageEmbedderError(
            f"KAR_IMAGE_EMBEDDER={kind} needs {env}: set it to a local folder holding a {kind} model in the "
            "Hugging Face format (config.json, model weights, preprocessor_config.json); models are never downloaded"
        )
    path = Path(path).expanduser()
    if not path.is_dir():
        raise ImageEmbedderError(
            f"{env}={path} is not a folder: put a {kind} model there in the Hugging Face format (config.json, "
            "model weights, preprocessor_config.json, e.g. saved with save_pretrained); models are never downloaded"
        )
    missing = [f for f in ("config.json", "preprocessor_config.json") if not (path / f).is_file()]
    if missing:
        raise ImageEmbedderError(
            f"{env}={path} lacks {', '.join(missing)}: it must hold a {kind} model in the Hugging Face format "
            "(config.json, model weights, preprocessor_config.json); models are never downloaded"
        )
    return path


class ImageEmbedder:
    """A CLIP/SigLIP image tower: images in, L2-normalised vectors out."""

    def __init__(self, kind: str, path: Path | None, device: str | None = None, batch_size: int = 16) -> None:
        if kind not in KINDS:
            raise ImageEmbedderError(f"KAR_IMAGE_EMBEDDER={kind!r} is not one of none, {', '.join(KINDS)}")
        self.kind = kind
        self.path = _need_folder(kind, path)
        self.batch_size = batch_size
        self._device = device
        self._model: Any = None
        self._processor: Any = None
        self._lock = threading.Lock()
        self._load()  # eager: a folder in the wrong format fails at start, not at the first query
        self.dim = int(self._dim)
        self.info = EmbedderInfo(f"{kind}:{self.path.name}", self.dim)

    def _load(self) -> None:
        try:
            import torch
            from transformers import AutoImageProcessor, CLIPModel, SiglipModel
        except ImportError as exc:  # pragma: no cover - torch/transformers are dependencies
            raise ImageEmbedderError(f"KAR_IMAGE_EMBEDDER={self.kind} needs torch and transformers: {exc}") from None
        cls = CLIPModel if self.kind == "clip" else SiglipModel
        try:
            model = cls.from_pretrained(str(self.path), local_files_only=True)
            processor = AutoImageProcessor.from_pretrained(str(self.path), local_files_only=True, use_fast=False)
        except Exception as exc:  # wrong format, wrong model type, missing weights
            raise ImageEmbedderError(
                f"KAR_IMAGE_EMBEDDER_MODEL={self.path} could not be loaded as a {self.kind} model "
                f"({type(exc).__name__}: {exc})"
            ) from None
        device = self._device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._model = model.to(device).eval()
        self._device = device
        self._processor = processor
        self._dim = model.config.projection_dim if self.kind == "clip" else model.config.vision_config.hidden_size

    def embed(self, images: Sequence["Image.Image"]) -> np.ndarray:
        """One L2-normalised float32 vector per image, shape ``(len(images), dim)``."""
        import torch

        if not images:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(images), self.batch_size):
                chunk = [im.convert("RGB") for im in images[start : start + self.batch_size]]
                pixels = self._processor(images=chunk, return_tensors="pt")["pixel_values"].to(self._device)
                feats = self._model.get_image_features(pixel_values=pixels)
                feats = torch.nn.functional.normalize(feats.float(), dim=-1)
                out.append(feats.cpu().numpy())
        return np.concatenate(out).astype(np.float32)


def build_image_embedder(settings: "Settings") -> ImageEmbedder | None:
    """The configured learned image embedder, or None for ``KAR_IMAGE_EMBEDDER=none``."""
    kind = settings.image_embedder
    if kind == "none":
        return None
    return ImageEmbedder(kind, settings.image_embedder_model, device=settings.embedder_device)
