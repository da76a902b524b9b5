"""The ``images`` collection: one point per (entity, image) holding the image's hash vector.

Kept apart from the ``entities`` collection (whose vectors belong to the text embedder and
change with ``kar kb reindex``): image points carry their own hasher in the collection
metadata, the entity id and image sha256 in the payload, and are searched with the same
:class:`~culturebase.store.base.Collection` interface on either backend.
"""

from __future__ import annotations

import threading
import zipfile
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from culturebase.store.base import (
    Backend, Collection, CollectionSpec, EmbedderInfo, EmbedderMismatchError, PayloadFilter, PointRecord, ScoredRecord,
)

IMAGES = "images"


def images_spec() -> CollectionSpec:
    """One dense vector (the image hash as ±1 values), filterable by entity id and kind."""
    return CollectionSpec(IMAGES, dense=("hash",), keyword_indexes=("entity_id", "kind", "language"))


def image_point_id(entity_id: str, sha256: str, frame: int = 0, part: str = "") -> str:
    """``entity:sha256`` for an image's first frame, ``…:f<frame>`` for further frames of an animation,
    ``…:<part>`` for a part of the image hashed on its own (``trimmed``: without its flat borders)."""
    out = f"{entity_id}:{sha256}" if not frame else f"{entity_id}:{sha256}:f{frame}"
    return f"{out}:{part}" if part else out


#: an index row: (entity id, language, image, vector[, frame[, part]])
ImageRow = tuple[Any, ...]


def _frame(row: ImageRow) -> int:
    return int(row[4]) if len(row) > 4 else 0


def _part(row: ImageRow) -> str:
    return str(row[5]) if len(row) > 5 else ""


class ImageIndex:
    """Image hash points of entities in one backend."""

    name = IMAGES
    vector = "hash"

    def spec(self) -> CollectionSpec:
        return images_spec()

    def __init__(self, backend: Backend, hasher: EmbedderInfo, create: bool = True) -> None:
        self.backend = backend
        self.hasher = hasher
        self._coll: Collection | None = None
        self._create = create

    @property
    def exists(self) -> bool:
        return self._coll is not None or self.backend.collection_info(self.name) is not None

    @property
    def collection(self) -> Collection:
        if self._coll is None:
            self._coll = self.backend.open_collection(self.spec(), self.hasher, create=self._create)
        return self._coll

    def replace_for(
        self, rows: Sequence[ImageRow], entity_ids: Iterable[str] = ()
    ) -> int:
        """Make the index hold exactly ``rows`` (entity id, language, image, vector[, frame]) for the given entities."""
        ids = list(dict.fromkeys([*entity_ids, *(r[0] for r in rows)]))
        if not ids and not rows:
            return 0
        keep = {image_point_id(r[0], r[2].sha256, _frame(r), _part(r)) for r in rows}
        if self.exists:
            stale = [p["_id"] for p in self.collection.scroll(flt=PayloadFilter.of(entity_id=ids)) if p["_id"] not in keep]
            self.collection.delete(stale)
        points = [
            PointRecord(
                id=image_point_id(r[0], r[2].sha256, _frame(r), _part(r)),
                dense={self.vector: r[3]},
                payload={"entity_id": r[0], "language": r[1], **r[2].model_dump(mode="json"), "frame": _frame(r), "part": _part(r)},
            )
            for r in rows
        ]
        if points:
            self.collection.upsert(points)
        self.collection.flush()
        return len(points)

    def delete_entities(self, entity_ids: Sequence[str]) -> int:
        """Remove every image point of these entities."""
        if not entity_ids or not self.exists:
            return 0
        ids = [p["_id"] for p in self.collection.scroll(flt=PayloadFilter.of(entity_id=list(entity_ids)))]
        self.collection.delete(ids)
        self.collection.flush()
        return len(ids)

    def search(self, vector: np.ndarray, limit: int, language: str | None = None) -> list[ScoredRecord]:
        """Nearest image points (score = cosine of ±1 vectors = dot / dim)."""
        if not self.exists:
            return []
        return self.collection.search(self.vector, vector, limit, PayloadFilter.of(language=language))

    def count(self) -> int:
        """Points (an animated image has one per indexed frame; a blank-background one a ``trimmed`` point too)."""
        return self.collection.count() if self.exists else 0

    def image_count(self) -> int:
        """Distinct (entity, image) pairs indexed (a scroll over the payloads: for stats, not per query)."""
        return len({(p.get("entity_id"), p.get("sha256")) for p in self.payloads()})

    def payloads(self) -> list[dict[str, Any]]:
        return list(self.collection.scroll()) if self.exists else []


IMAGE_EMBEDDINGS = "image_embeddings"


def image_embeddings_spec() -> CollectionSpec:
    """One dense vector per (entity, image): the learned embedder's L2-normalised image vector."""
    return CollectionSpec(IMAGE_EMBEDDINGS, dense=("learned",), keyword_indexes=("entity_id", "kind", "language"))


class LearnedImageIndex(ImageIndex):
    """Learned image-embedder points of entities (``KAR_IMAGE_EMBEDDER``), beside the hash points.

    A collection of its own (same point ids and payloads as :class:`ImageIndex`) because its
    vectors have the embedder's size and identity: the collection records the embedder
    (``clip:<folder>``) and refuses to open under another one, like the ``entities`` collection.
    """

    name = IMAGE_EMBEDDINGS
    vector = "learned"

    def spec(self) -> CollectionSpec:
        return image_embeddings_spec()

    @property
    def collection(self) -> Collection:
        if self._coll is None:
            try:
                self._coll = self.backend.open_collection(self.spec(), self.hasher, create=self._create)
            except EmbedderMismatchError as exc:
                raise EmbedderMismatchError(
                    f"the {IMAGE_EMBEDDINGS!r} collection was built by another image embedder than the configured "
                    f"{self.hasher.describe()}: run `kar kb reindex-images` to embed the entity images with it, "
                    f"or point KAR_IMAGE_EMBEDDER_MODEL at the model that built it ({exc})"
                ) from None
        return self._coll


class ImageFeatureStore:
    """Local features of entity images, computed once at indexing and read at query time.

    One ``.npz`` file per (image, frame, method) under ``KAR_DATA_DIR/image_features/ab/``,
    beside the image folder (both backends keep their images there): arrays named by the
    method (keypoint positions, descriptors, described size).  Files are written atomically; a
    bounded in-memory cache keeps the most recently verified candidates (``cache`` files).
    """

    def __init__(self, root: Path | str, cache: int = 4096) -> None:
        self.root = Path(root)
        self.cache_size = cache
        self._cache: OrderedDict[str, dict[str, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def path_of(self, sha256: str, frame: int, method: str) -> Path:
        return self.root / sha256[:2] / f"{sha256}.f{frame}.{method}.npz"

    def has(self, sha256: str, frame: int, method: str) -> bool:
        return self.path_of(sha256, frame, method).is_file()

    def put(self, sha256: str, frame: int, method: str, arrays: dict[str, np.ndarray]) -> None:
        target = self.path_of(sha256, frame, method)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.tmp{threading.get_ident()}")
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        tmp.replace(target)
        self._remember(str(target), arrays)

    def get(self, sha256: str, frame: int, method: str) -> dict[str, np.ndarray] | None:
        """The stored arrays, or None when this image frame was never described with ``method``."""
        target = self.path_of(sha256, frame, method)
        key = str(target)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        try:
            with np.load(target) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except FileNotFoundError:
            return None
        except (OSError, ValueError, zipfile.BadZipFile):  # a torn or foreign file: described again on reindex
            return None
        self._remember(key, arrays)
        return arrays

    def _remember(self, key: str, arrays: dict[str, np.ndarray]) -> None:
        with self._lock:
            self._cache[key] = arrays
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
