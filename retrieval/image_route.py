"""The image route of grounding: find the entity whose image (a meme template) the query image shows.

Index side: every image of every entity (``Entity.images``, files in ``KAR_DATA_DIR/images``)
is hashed (:mod:`retrieval.image_hash`: dHash ‖ pHash as a 128-d ±1 vector) into the
``images`` collection, one point per (entity, image).  Query side: the image is hashed once
per request (:func:`hash_query`, with its caption-band and border crops); each crop is one
nearest-neighbour search in the store; per entity the smallest summed Hamming distance wins.

Fusion with the text routes (hooked into :meth:`EntityGrounder.ground`)::

    image evidence  e = 1 − d / (τ_image + 1)              for d ≤ τ_image (else no image hit)
    image score       = τ + W_IMAGE · e                      (always above the text τ)
    entity score      = max(text score, image score)          route "image" when the image score wins

so an image match within its own calibrated threshold τ_image (``KAR_IMAGE_TAU``, default 32
of 128 bits: ``bench/templates.py``) grounds the entity even with no text cue, closer
images rank higher, and strong text evidence still ranks above a weak image match.  The
distance is kept in the trace (``image_distance``) with the matched image (``image``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from culturebase.entity import Entity
from culturebase.images import ImageStore
from culturebase.store import CultureBaseStore, EmbedderInfo
from culturebase.store.images import ImageIndex
from retrieval.image_hash import HASHER_NAME, VECTOR_DIM, QueryHashes, distance_from_score, hash_image, hash_query, open_image

if TYPE_CHECKING:
    from retrieval.grounding import GroundedEntity

log = logging.getLogger(__name__)

HASHER = EmbedderInfo(HASHER_NAME, VECTOR_DIM)
W_IMAGE = 0.15
DEFAULT_IMAGE_TAU = 32


@dataclass(frozen=True)
class ImageMatch:
    """The nearest image of one entity: its summed Hamming distance, the query crop and the stored image."""

    entity_id: str
    distance: int
    crop: str
    image: dict[str, Any]

    def evidence(self, tau_image: int) -> float:
        return 1.0 - self.distance / (tau_image + 1)


class ImageRoute:
    """Hash entity images into the store and match query images against them."""

    def __init__(
        self, store: CultureBaseStore, images: ImageStore, tau: int = DEFAULT_IMAGE_TAU, crops: bool = True, candidates: int = 10
    ) -> None:
        self.store = store
        self.images = images
        self.tau = tau
        self.crops = crops
        self.candidates = candidates
        self.index = ImageIndex(store.backend, HASHER)

    # -- index --------------------------------------------------------------------------
    def index_entities(self, entities: Sequence[Entity]) -> dict[str, int]:
        """(Re)hash the images of these entities; returns counts (``hashed``, ``missing`` files, ``unreadable``)."""
        rows = []
        counts = {"hashed": 0, "missing": 0, "unreadable": 0}
        for entity in entities:
            for image in entity.images:
                try:
                    data = self.images.read(image)
                except FileNotFoundError:
                    counts["missing"] += 1
                    log.warning("entity %s: image file %s is missing; not indexed", entity.id, self.images.path_of(image))
                    continue
                try:
                    vec = hash_image(open_image(data)).vector()
                except Exception as exc:  # a stored file that no longer decodes
                    counts["unreadable"] += 1
                    log.warning("entity %s: image %s cannot be decoded (%s); not indexed", entity.id, image.path, exc)
                    continue
                rows.append((entity.id, entity.language, image, vec))
        has_any = any(e.images for e in entities)
        if rows or (has_any or self.index.exists):
            self.index.replace_for(rows, [e.id for e in entities])
        counts["hashed"] = len(rows)
        return counts

    def delete_entities(self, entity_ids: Sequence[str]) -> int:
        return self.index.delete_entities(entity_ids)

    # -- query --------------------------------------------------------------------------
    def hash_query(self, data: bytes) -> QueryHashes:
        """Hash a query image once (raises the PIL error for bytes that are not an image)."""
        return hash_query(open_image(data), crops=self.crops)

    def match(self, query: QueryHashes, language: str | None = None, limit: int | None = None) -> list[ImageMatch]:
        """Nearest entities by image, best first (all candidates; callers apply ``tau``)."""
        best: dict[str, ImageMatch] = {}
        for crop, h in query.variants:
            for hit in self.index.search(h.vector(), limit or self.candidates, language=language):
                eid = hit.payload["entity_id"]
                dist = distance_from_score(hit.score)
                if eid not in best or dist < best[eid].distance:
                    image = {k: hit.payload.get(k) for k in ("sha256", "path", "url", "kind", "width", "height")}
                    best[eid] = ImageMatch(eid, dist, crop, image)
        return sorted(best.values(), key=lambda m: (m.distance, m.entity_id))


def fuse_image_matches(
    scored: list["GroundedEntity"], matches: Sequence[ImageMatch], store: CultureBaseStore, tau: float, tau_image: int
) -> list["GroundedEntity"]:
    """Fold image matches into the text-scored candidates (see module docstring); returns the new list."""
    from retrieval.grounding import GroundedEntity

    by_id = {g.entity.id: g for g in scored}
    accepted = [m for m in matches if m.distance <= tau_image]
    missing = [m.entity_id for m in accepted if m.entity_id not in by_id]
    fetched = {e.id: e for e in store.get_many(missing)} if missing else {}
    for m in matches:
        g = by_id.get(m.entity_id)
        if g is not None:
            g.image_distance = m.distance
            g.image = m.image
    for m in accepted:
        image_score = tau + W_IMAGE * m.evidence(tau_image)
        g = by_id.get(m.entity_id)
        if g is None:
            ent = fetched.get(m.entity_id)
            if ent is None:  # an image point whose entity was deleted
                continue
            g = GroundedEntity(
                entity=ent, score=image_score, route="image", dense=0.0, lexical=0.0, sparse=0.0, matched_alias=None,
                route_scores={}, cue=f"image ({m.crop})",
            )
            g.image_distance, g.image = m.distance, m.image
            by_id[m.entity_id] = g
            scored.append(g)
        elif image_score > g.score:
            g.score, g.route, g.cue = image_score, "image", f"image ({m.crop})"
        g.route_scores["image"] = round(image_score, 4)
    return scored
