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

The optional learned signal (``KAR_IMAGE_EMBEDDER=clip|siglip``, :mod:`retrieval.image_embedder`)
embeds every entity image into the ``image_embeddings`` collection and the query's crops
once per request; per entity the highest cosine similarity s over crops is kept, and it
has its own threshold τ_embed (``KAR_IMAGE_EMBED_TAU``)::

    hash evidence     e_hash    = 1 − d / (τ_image + 1)             for d ≤ τ_image
    learned evidence  e_learned = (s − τ_embed) / (1 − τ_embed)     for s ≥ τ_embed
    image evidence    e         = max(e_hash, e_learned)           (either signal alone suffices)

and ``e`` enters the image score above.  The trace's ``image`` names the winning signal
(``signal``: ``hash`` or ``learned``) with both measurements (``distance`` in bits, or None
when the hash search did not reach that entity; ``similarity``, or None without an embedder).
With ``KAR_IMAGE_EMBEDDER=none`` (the default) nothing of this runs and the route is hash only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from culturebase.entity import Entity
from culturebase.images import ImageStore
from culturebase.store import CultureBaseStore, EmbedderInfo
from culturebase.store.images import ImageIndex, LearnedImageIndex
from retrieval.image_hash import HASHER_NAME, VECTOR_DIM, QueryHashes, distance_from_score, hash_image, open_image, query_variants

if TYPE_CHECKING:
    import numpy as np

    from retrieval.grounding import GroundedEntity
    from retrieval.image_embedder import ImageEmbedder

log = logging.getLogger(__name__)

HASHER = EmbedderInfo(HASHER_NAME, VECTOR_DIM)
W_IMAGE = 0.15
DEFAULT_IMAGE_TAU = 32
DEFAULT_EMBED_TAU = 0.9


@dataclass(frozen=True)
class QueryImage(QueryHashes):
    """A query image prepared once per request: its crop hashes and (with an embedder) crop embeddings."""

    embeddings: tuple[tuple[str, "np.ndarray"], ...] = ()


@dataclass(frozen=True)
class ImageMatch:
    """The nearest image of one entity: its summed Hamming distance, the query crop and the stored image.

    With a learned embedder: ``similarity`` (best cosine over crops, ``learned_crop``) and the
    route's learned threshold ``embed_tau``; ``distance`` is None when only the learned search
    reached the entity.
    """

    entity_id: str
    distance: int | None
    crop: str
    image: dict[str, Any]
    similarity: float | None = None
    learned_crop: str | None = None
    embed_tau: float | None = None

    def hash_evidence(self, tau_image: int) -> float | None:
        if self.distance is None or self.distance > tau_image:
            return None
        return 1.0 - self.distance / (tau_image + 1)

    def learned_evidence(self) -> float | None:
        if self.similarity is None or self.embed_tau is None or self.similarity < self.embed_tau:
            return None
        return 1.0 if self.embed_tau >= 1.0 else (self.similarity - self.embed_tau) / (1.0 - self.embed_tau)

    def signal(self, tau_image: int) -> str | None:
        """Which accepted signal gives the larger evidence (``hash`` / ``learned``), None when neither."""
        h, le = self.hash_evidence(tau_image), self.learned_evidence()
        if h is None and le is None:
            return None
        return "hash" if le is None or (h is not None and h >= le) else "learned"

    def evidence(self, tau_image: int) -> float:
        return max((e for e in (self.hash_evidence(tau_image), self.learned_evidence()) if e is not None), default=0.0)

    def trace(self, tau_image: int) -> dict[str, Any]:
        """The stored image plus which signal matched and its measurements (the route ``image`` trace)."""
        return {
            **self.image,
            "signal": self.signal(tau_image),
            "distance": self.distance,
            "similarity": None if self.similarity is None else round(self.similarity, 4),
        }

    def cue(self, tau_image: int) -> str:
        if self.signal(tau_image) == "learned":
            return f"image ({self.learned_crop}, learned)"
        return f"image ({self.crop})"


class ImageRoute:
    """Hash entity images into the store and match query images against them."""

    def __init__(
        self, store: CultureBaseStore, images: ImageStore, tau: int = DEFAULT_IMAGE_TAU, crops: bool = True, candidates: int = 10,
        embedder: "ImageEmbedder | None" = None, embed_tau: float = DEFAULT_EMBED_TAU,
    ) -> None:
        self.store = store
        self.images = images
        self.tau = tau
        self.crops = crops
        self.candidates = candidates
        self.index = ImageIndex(store.backend, HASHER)
        self.embedder = embedder
        self.embed_tau = embed_tau
        self.learned = LearnedImageIndex(store.backend, embedder.info) if embedder is not None else None

    # -- index --------------------------------------------------------------------------
    def index_entities(self, entities: Sequence[Entity]) -> dict[str, int]:
        """(Re)hash the images of these entities; returns counts (``hashed``, ``missing`` files, ``unreadable``)."""
        rows = []
        pictures = []  # decoded images of ``rows``, for the learned embedder
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
                    picture = open_image(data)
                    vec = hash_image(picture).vector()
                except Exception as exc:  # a stored file that no longer decodes
                    counts["unreadable"] += 1
                    log.warning("entity %s: image %s cannot be decoded (%s); not indexed", entity.id, image.path, exc)
                    continue
                rows.append((entity.id, entity.language, image, vec))
                if self.learned is not None:
                    pictures.append(picture)
        has_any = any(e.images for e in entities)
        if rows or (has_any or self.index.exists):
            self.index.replace_for(rows, [e.id for e in entities])
        counts["hashed"] = len(rows)
        if self.learned is not None and self.embedder is not None and (rows or has_any or self.learned.exists):
            vectors = self.embedder.embed(pictures)
            learned_rows = [(eid, lang, img, vectors[i]) for i, (eid, lang, img, _) in enumerate(rows)]
            self.learned.replace_for(learned_rows, [e.id for e in entities])
            counts["embedded"] = len(learned_rows)
        return counts

    def rebuild(self, batch: int = 64) -> dict[str, int]:
        """Drop the image collections and hash (and embed) every entity image again, e.g. after
        switching ``KAR_IMAGE_EMBEDDER`` on or to another model; returns the summed counts."""
        for index in (self.index, self.learned):
            if index is not None and self.store.backend.collection_info(index.name) is not None:
                self.store.backend.drop_collection(index.name)
            if index is not None:
                index._coll = None
        totals: dict[str, int] = {"entities": 0}
        chunk: list[Entity] = []
        for entity in [*self.store.iter_entities(), None]:
            if entity is not None and entity.images:
                chunk.append(entity)
            if chunk and (entity is None or len(chunk) >= batch):
                for key, n in self.index_entities(chunk).items():
                    totals[key] = totals.get(key, 0) + n
                totals["entities"] += len(chunk)
                chunk = []
        return totals

    def delete_entities(self, entity_ids: Sequence[str]) -> int:
        if self.learned is not None:
            self.learned.delete_entities(entity_ids)
        return self.index.delete_entities(entity_ids)

    # -- query --------------------------------------------------------------------------
    def hash_query(self, data: bytes) -> QueryImage:
        """Hash (and with an embedder, embed) a query image once; raises the PIL error for bytes that are not an image."""
        img = open_image(data)
        variants = query_variants(img) if self.crops else [("full", img)]
        hashes = tuple((name, hash_image(v)) for name, v in variants)
        embeddings: tuple[tuple[str, Any], ...] = ()
        if self.embedder is not None:
            vectors = self.embedder.embed([v for _, v in variants])
            embeddings = tuple((name, vectors[i]) for i, (name, _) in enumerate(variants))
        return QueryImage(hashes, img.width, img.height, embeddings)

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
        learned: dict[str, tuple[float, str, dict[str, Any]]] = {}
        if self.learned is not None:
            for crop, vec in getattr(query, "embeddings", ()):
                for hit in self.learned.search(vec, limit or self.candidates, language=language):
                    eid = hit.payload["entity_id"]
                    if eid not in learned or hit.score > learned[eid][0]:
                        image = {k: hit.payload.get(k) for k in ("sha256", "path", "url", "kind", "width", "height")}
                        learned[eid] = (float(hit.score), crop, image)
        for eid, (sim, crop, image) in learned.items():
            m = best.get(eid)
            best[eid] = ImageMatch(
                eid, m.distance if m else None, m.crop if m else crop, m.image if m else image,
                similarity=sim, learned_crop=crop, embed_tau=self.embed_tau,
            )
        return sorted(best.values(), key=lambda m: (m.distance is None, m.distance or 0, -(m.similarity or 0.0), m.entity_id))


def fuse_image_matches(
    scored: list["GroundedEntity"], matches: Sequence[ImageMatch], store: CultureBaseStore, tau: float, tau_image: int
) -> list["GroundedEntity"]:
    """Fold image matches into the text-scored candidates (see module docstring); returns the new list."""
    from retrieval.grounding import GroundedEntity

    by_id = {g.entity.id: g for g in scored}
    accepted = [m for m in matches if m.signal(tau_image) is not None]
    missing = [m.entity_id for m in accepted if m.entity_id not in by_id]
    fetched = {e.id: e for e in store.get_many(missing)} if missing else {}
    for m in matches:
        g = by_id.get(m.entity_id)
        if g is not None:
            g.image_distance = m.distance
            g.image = m.trace(tau_image)
    for m in accepted:
        image_score = tau + W_IMAGE * m.evidence(tau_image)
        g = by_id.get(m.entity_id)
        if g is None:
            ent = fetched.get(m.entity_id)
            if ent is None:  # an image point whose entity was deleted
                continue
            g = GroundedEntity(
                entity=ent, score=image_score, route="image", dense=0.0, lexical=0.0, sparse=0.0, matched_alias=None,
                route_scores={}, cue=m.cue(tau_image),
            )
            g.image_distance, g.image = m.distance, m.trace(tau_image)
            by_id[m.entity_id] = g
            scored.append(g)
        elif image_score > g.score:
            g.score, g.route, g.cue = image_score, "image", m.cue(tau_image)
        g.route_scores["image"] = round(image_score, 4)
    return scored


def image_stats(store: CultureBaseStore, route: ImageRoute | None) -> dict[str, Any]:
    """Entity image counts for ``kar kb stats``: images listed on entities, by kind, and the indexed points."""
    listed = with_images = 0
    by_kind: dict[str, int] = {}
    for entity in store.iter_entities():
        if entity.images:
            with_images += 1
        for image in entity.images:
            listed += 1
            by_kind[image.kind] = by_kind.get(image.kind, 0) + 1
    out: dict[str, Any] = {
        "images": listed,
        "entities_with_images": with_images,
        "by_kind": dict(sorted(by_kind.items())),
        "hashed": route.index.count() if route is not None else None,
    }
    if route is not None and route.learned is not None and route.embedder is not None:
        out["embedded"] = route.learned.count()
        out["image_embedder"] = route.embedder.info.name
    return out
