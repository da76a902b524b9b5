"""The ``images`` collection: one point per (entity, image) holding the image's hash vector.

Kept apart from the ``entities`` collection (whose vectors belong to the text embedder and
change with ``kar kb reindex``): image points carry their own hasher in the collection
metadata, the entity id and image sha256 in the payload, and are searched with the same
:class:`~culturebase.store.base.Collection` interface on either backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from culturebase.entity import EntityImage
from culturebase.store.base import (
    Backend, Collection, CollectionSpec, EmbedderInfo, EmbedderMismatchError, PayloadFilter, PointRecord, ScoredRecord,
)

IMAGES = "images"


def images_spec() -> CollectionSpec:
    """One dense vector (the image hash as ±1 values), filterable by entity id and kind."""
    return CollectionSpec(IMAGES, dense=("hash",), keyword_indexes=("entity_id", "kind", "language"))


def image_point_id(entity_id: str, sha256: str) -> str:
    return f"{entity_id}:{sha256}"


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
        self, rows: Sequence[tuple[str, str, EntityImage, np.ndarray]], entity_ids: Iterable[str] = ()
    ) -> int:
        """Make the index hold exactly ``rows`` (entity id, language, image, vector) for the given entities."""
        ids = list(dict.fromkeys([*entity_ids, *(r[0] for r in rows)]))
        if not ids and not rows:
            return 0
        keep = {image_point_id(eid, img.sha256) for eid, _, img, _ in rows}
        if self.exists:
            stale = [p["_id"] for p in self.collection.scroll(flt=PayloadFilter.of(entity_id=ids)) if p["_id"] not in keep]
            self.collection.delete(stale)
        points = [
            PointRecord(
                id=image_point_id(eid, img.sha256),
                dense={self.vector: vec},
                payload={"entity_id": eid, "language": lang, **img.model_dump(mode="json")},
            )
            for eid, lang, img, vec in rows
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
        return self.collection.count() if self.exists else 0

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
