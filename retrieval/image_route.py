"""The image route of grounding: find the entity whose image (a meme template) the query image shows.

Two stages.  **Index side**, once per entity image (``Entity.images``, files in
``KAR_DATA_DIR/images``): up to :data:`~retrieval.image_hash.MAX_FRAMES` frames (an animated
template is indexed by frames spread over its first ones; a still image by its one frame) are
hashed (:mod:`retrieval.image_hash`: dHash ‖ pHash as a 128-d ±1 vector) into the ``images``
collection, one point per (entity, image, frame), and described by local features
(:mod:`retrieval.image_features`: ORB keypoints) stored once in the feature folder
(:class:`~culturebase.store.images.ImageFeatureStore`).  An image that is missing or no longer
decodes is skipped with its reason (logged, counted, listed in :attr:`ImageRoute.skipped`);
the rest are indexed.

**Query side**, once per request (:meth:`ImageRoute.prepare`): the image is hashed with its
crops (caption bands removed, borders trimmed, the picture inside a screenshot) and described
by local features.  Stage 1: each crop is one nearest-neighbour search in the store; per
entity the smallest Hamming distance wins.  Stage 2: the :attr:`ImageRoute.verify` nearest
entities are verified geometrically against their stored features (ratio-tested matches,
RANSAC homography, :func:`retrieval.image_features.verify`).  The accept rule::

    verified   inliers ≥ MIN_INLIERS and a sane outline        evidence = 0.5 … 1.0 with the inliers
    hash       d ≤ τ_image when the template (or the query) has too few keypoints to be verified
               (a flat-colour template), or d ≤ NEAR_DUPLICATE (a near copy whose caption hides the
               keypoints): evidence = 1 − d / (τ_image + 1)
    learned    s ≥ τ_embed (optional CLIP/SigLIP, ``KAR_IMAGE_EMBEDDER``)

A hash neighbour that has keypoints but fails verification is *not* accepted: that is what
keeps a look-alike of the same show or an unindexed template from being claimed.  The
matches go back to the grounder, and :func:`retrieval.grounding.fuse_image_matches` folds them
into the fused score (the one place routes are combined).

The optional learned signal (``KAR_IMAGE_EMBEDDER=clip|siglip``, :mod:`retrieval.image_embedder`)
embeds every entity image into the ``image_embeddings`` collection and the query's crops once
per request; per entity the highest cosine similarity over crops is kept, with its own
threshold τ_embed (``KAR_IMAGE_EMBED_TAU``).  The trace's ``image`` names the winning signal
(``verified``, ``hash`` or ``learned``) with the measurements (``distance`` in bits,
``inliers``, ``similarity``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from culturebase.entity import Entity
from culturebase.images import ImageStore
from culturebase.store import CultureBaseStore, EmbedderInfo
from culturebase.store.images import ImageFeatureStore, ImageIndex, LearnedImageIndex
from retrieval import image_features as feats
from retrieval.image_hash import (
    HASHER_NAME, VECTOR_DIM, QueryHashes, distance_from_score, hash_image, open_image, query_variants, sample_frames, trim_borders,
)

import numpy as np

if TYPE_CHECKING:
    from retrieval.image_embedder import ImageEmbedder

log = logging.getLogger(__name__)

HASHER = EmbedderInfo(HASHER_NAME, VECTOR_DIM)
DEFAULT_IMAGE_TAU = 32
DEFAULT_EMBED_TAU = 0.9
#: hash neighbours verified geometrically per query
DEFAULT_VERIFY = 6
#: a hash distance this small (of 128 bits) is a near-duplicate: accepted without verification
NEAR_DUPLICATE = 16
_IMAGE_FIELDS = ("sha256", "path", "url", "kind", "width", "height", "frame", "part")


@dataclass(frozen=True)
class QueryImage(QueryHashes):
    """A query image prepared once per request: crop hashes, local features and (with an embedder) crop embeddings."""

    embeddings: tuple[tuple[str, "np.ndarray"], ...] = ()
    #: local features, tried in this order: the picture inside a screenshot (when found), the whole image
    features: tuple[tuple[str, feats.Features], ...] = ()


@dataclass(frozen=True)
class ImageMatch:
    """One entity's image evidence: nearest hash, geometric verification, learned similarity.

    ``distance`` is the summed Hamming distance of its nearest image (None when only the learned
    search reached it); ``inliers`` the RANSAC inliers of the verification (None when not
    verified: beyond the verified candidates or no stored features); ``keypoints`` the stored
    image's keypoint count (below :data:`~retrieval.image_features.MIN_KEYPOINTS` it cannot be
    verified and hashes alone decide).
    """

    entity_id: str
    distance: int | None
    crop: str
    image: dict[str, Any]
    similarity: float | None = None
    learned_crop: str | None = None
    embed_tau: float | None = None
    inliers: int | None = None
    keypoints: int | None = None
    query_keypoints: int | None = None
    coverage: float | None = None

    @property
    def verified(self) -> bool:
        """Geometric verification passed (the inliers the stored image needs, a sane outline)."""
        return self.coverage is not None and self.inliers is not None and self.inliers >= feats.required_inliers(self.keypoints or 0)

    @property
    def verifiable(self) -> bool:
        """Both sides have enough keypoints for the geometric check to mean something."""
        return (self.keypoints or 0) >= feats.MIN_KEYPOINTS and (self.query_keypoints or 0) >= feats.MIN_KEYPOINTS

    def hash_evidence(self, tau_image: int) -> float | None:
        """Hash-only evidence: within τ_image, for a checked candidate that cannot be verified."""
        if self.distance is None or self.distance > tau_image or self.keypoints is None:
            return None
        if self.verifiable and self.distance > NEAR_DUPLICATE:  # a textured template must pass verification
            return None
        return 1.0 - self.distance / (tau_image + 1)

    def verified_evidence(self) -> float | None:
        return feats.evidence(self.inliers or 0, feats.required_inliers(self.keypoints or 0)) if self.verified else None

    def learned_evidence(self) -> float | None:
        if self.similarity is None or self.embed_tau is None or self.similarity < self.embed_tau:
            return None
        return 1.0 if self.embed_tau >= 1.0 else (self.similarity - self.embed_tau) / (1.0 - self.embed_tau)

    def _signals(self, tau_image: int) -> dict[str, float]:
        found = {"verified": self.verified_evidence(), "hash": self.hash_evidence(tau_image), "learned": self.learned_evidence()}
        return {k: v for k, v in found.items() if v is not None}

    def signal(self, tau_image: int) -> str | None:
        """Which accepted signal gives the largest evidence (``verified`` / ``hash`` / ``learned``), None when none."""
        found = self._signals(tau_image)
        return max(found, key=lambda k: found[k]) if found else None

    def evidence(self, tau_image: int) -> float:
        return max(self._signals(tau_image).values(), default=0.0)

    def trace(self, tau_image: int) -> dict[str, Any]:
        """The stored image plus which signal matched and its measurements (the route ``image`` trace)."""
        return {
            **self.image,
            "signal": self.signal(tau_image),
            "distance": self.distance,
            "inliers": self.inliers,
            "coverage": self.coverage,
            "similarity": None if self.similarity is None else round(self.similarity, 4),
        }

    def cue(self, tau_image: int) -> str:
        signal = self.signal(tau_image)
        if signal == "learned":
            return f"image ({self.learned_crop}, learned)"
        if signal == "verified":
            return f"image ({self.crop}, {self.inliers} inliers)"
        return f"image ({self.crop})"


@dataclass(frozen=True)
class SkippedImage:
    """An entity image left out of the index, and why."""

    entity_id: str
    image: str
    reason: str


class ImageRoute:
    """Hash and describe entity images into the store; match query images against them (two stages)."""

    def __init__(
        self, store: CultureBaseStore, images: ImageStore, tau: int = DEFAULT_IMAGE_TAU, crops: bool = True, candidates: int = 10,
        embedder: "ImageEmbedder | None" = None, embed_tau: float = DEFAULT_EMBED_TAU,
        features: ImageFeatureStore | None = None, verify: int = DEFAULT_VERIFY,
    ) -> None:
        self.store = store
        self.images = images
        self.tau = tau
        self.crops = crops
        self.candidates = candidates
        self.verify = verify
        self.index = ImageIndex(store.backend, HASHER)
        self.features = features if features is not None else ImageFeatureStore(images.root.parent / "image_features")
        self.embedder = embedder
        self.embed_tau = embed_tau
        self.learned = LearnedImageIndex(store.backend, embedder.info) if embedder is not None else None
        self.skipped: list[SkippedImage] = []
        self._matcher: Any = None

    # -- index --------------------------------------------------------------------------
    def _skip(self, entity: Entity, image: str, reason: str) -> None:
        self.skipped.append(SkippedImage(entity.id, image, reason))
        log.warning("entity %s: image %s not indexed: %s", entity.id, image, reason)

    def index_entities(self, entities: Sequence[Entity]) -> dict[str, int]:
        """(Re)hash and describe the images of these entities; returns counts (``hashed`` images,
        ``frames``, ``missing`` files, ``unreadable``); skipped images are listed in :attr:`skipped`."""
        rows = []
        pictures = []  # decoded first frames of the images in ``rows``, for the learned embedder
        learned_rows = []
        counts = {"hashed": 0, "frames": 0, "missing": 0, "unreadable": 0}
        for entity in entities:
            for image in entity.images:
                try:
                    data = self.images.read(image)
                except FileNotFoundError:
                    counts["missing"] += 1
                    self._skip(entity, image.path, f"missing_file: no file {self.images.path_of(image)}")
                    continue
                try:
                    frames = sample_frames(data)
                    described = [(n, frame, hash_image(frame).vector()) for n, frame in frames]
                    first = frames[0][1]
                    trimmed = trim_borders(first)  # a blank-background template: its picture alone too
                    blank = trimmed is not None and trimmed.width * trimmed.height <= 0.8 * first.width * first.height
                    trimmed_vec = hash_image(trimmed).vector() if blank else None
                except Exception as exc:  # a stored file that no longer decodes: this image only
                    counts["unreadable"] += 1
                    self._skip(entity, image.path, f"corrupt: {type(exc).__name__}: {exc}")
                    continue
                for n, frame, vec in described:
                    if not self.features.has(image.sha256, n, feats.METHOD):
                        f = feats.describe(frame)
                        self.features.put(image.sha256, n, feats.METHOD, {
                            "points": f.points, "descriptors": f.descriptors, "size": np.array([f.width, f.height]),
                        })
                    rows.append((entity.id, entity.language, image, vec, n))
                if trimmed_vec is not None:
                    rows.append((entity.id, entity.language, image, trimmed_vec, 0, "trimmed"))
                counts["hashed"] += 1
                counts["frames"] += len(described)
                if self.learned is not None:
                    pictures.append(described[0][1])
                    learned_rows.append((entity.id, entity.language, image))
        has_any = any(e.images for e in entities)
        if rows or (has_any or self.index.exists):
            self.index.replace_for(rows, [e.id for e in entities])
        if self.learned is not None and self.embedder is not None and (learned_rows or has_any or self.learned.exists):
            vectors = self.embedder.embed(pictures) if pictures else []
            self.learned.replace_for(
                [(eid, lang, img, vectors[i]) for i, (eid, lang, img) in enumerate(learned_rows)], [e.id for e in entities]
            )
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
    def prepare(self, data: bytes) -> QueryImage:
        """Hash, describe (and with an embedder, embed) a query image once; raises the PIL error for
        bytes that are not an image."""
        img = open_image(data)
        variants = query_variants(img) if self.crops else [("full", img)]
        hashes = tuple((name, hash_image(v)) for name, v in variants)
        embeddings: tuple[tuple[str, Any], ...] = ()
        if self.embedder is not None:
            vectors = self.embedder.embed([v for _, v in variants])
            embeddings = tuple((name, vectors[i]) for i, (name, _) in enumerate(variants))
        described = []
        region = next((v for name, v in variants if name == "picture_region"), None)
        if region is not None:
            described.append(("picture_region", feats.describe(region, feats.INDEX_SIDE, feats.QUERY_FEATURES)))
        described.append(("full", feats.describe_query(img)))
        return QueryImage(hashes, img.width, img.height, embeddings, tuple(described))

    hash_query = prepare  # the earlier name

    def _stored_features(self, image: dict[str, Any]) -> feats.Features | None:
        arrays = self.features.get(str(image.get("sha256")), int(image.get("frame") or 0), feats.METHOD)
        if arrays is None:
            return None
        w, h = (int(v) for v in arrays["size"])
        return feats.Features(arrays["points"], arrays["descriptors"], w, h)

    def _verify(self, queries: Sequence[tuple[str, feats.Features]], hits: list[dict[str, Any]]) -> dict[str, Any]:
        """Verify an entity's candidate images (frames) with the query's feature sets (in order; the
        first that verifies wins): most inliers, most stored keypoints, outline coverage, image, query part."""
        import cv2

        if self._matcher is None:
            self._matcher = cv2.BFMatcher(cv2.NORM_HAMMING)
        out: dict[str, Any] = {"inliers": None, "keypoints": None, "coverage": None, "image": None, "part": None}
        for image in hits:
            stored = self._stored_features(image)
            if stored is None:
                continue
            out["keypoints"] = max(out["keypoints"] or 0, stored.count)
            if stored.count < feats.MIN_KEYPOINTS:
                continue
            for part, query in queries:
                if query.count < feats.MIN_KEYPOINTS:
                    continue
                v = feats.verify(query, stored, self._matcher)
                if v.verified:
                    if out["coverage"] is None or v.inliers > out["inliers"]:
                        out.update(inliers=v.inliers, keypoints=stored.count, coverage=v.coverage, image=image, part=part)
                    break
                if out["coverage"] is None:
                    out["inliers"] = max(out["inliers"] or 0, v.inliers)
            if out["coverage"] is not None and feats.evidence(out["inliers"], feats.required_inliers(out["keypoints"])) >= 1.0:
                break  # a strongly verified frame: the entity's other frames cannot do better
        return out

    def match(self, query: QueryHashes, language: str | None = None, limit: int | None = None) -> list[ImageMatch]:
        """Image evidence per entity, nearest hash first: stage 1 over every crop, stage 2 on the
        :attr:`verify` nearest entities (callers apply the accept rule: :meth:`ImageMatch.signal`)."""
        best: dict[str, ImageMatch] = {}
        frames: dict[str, list[dict[str, Any]]] = {}
        for crop, h in query.variants:
            for hit in self.index.search(h.vector(), limit or self.candidates, language=language):
                eid = hit.payload["entity_id"]
                dist = distance_from_score(hit.score)
                image = {k: hit.payload.get(k) for k in _IMAGE_FIELDS}
                seen = frames.setdefault(eid, [])
                if all((i["sha256"], i.get("frame")) != (image["sha256"], image.get("frame")) for i in seen):
                    seen.append(image)
                if eid not in best or dist < (best[eid].distance or 0):
                    best[eid] = ImageMatch(eid, dist, crop, image)
        features = tuple(getattr(query, "features", ()) or ())
        if features:
            query_keypoints = max(f.count for _, f in features)
            nearest = sorted(best.values(), key=lambda m: (m.distance or 0, m.entity_id))[: self.verify]
            for m in nearest:
                v = self._verify(features, frames[m.entity_id])
                best[m.entity_id] = ImageMatch(
                    m.entity_id, m.distance, v["part"] or m.crop, v["image"] or m.image, inliers=v["inliers"],
                    keypoints=v["keypoints"], query_keypoints=query_keypoints, coverage=v["coverage"],
                )
                if v["coverage"] is not None and feats.evidence(v["inliers"], feats.required_inliers(v["keypoints"])) >= 1.0:
                    break  # strongly verified: the farther hash neighbours are not checked (latency)
        learned: dict[str, tuple[float, str, dict[str, Any]]] = {}
        if self.learned is not None:
            for crop, vec in getattr(query, "embeddings", ()):
                for hit in self.learned.search(vec, limit or self.candidates, language=language):
                    eid = hit.payload["entity_id"]
                    if eid not in learned or hit.score > learned[eid][0]:
                        image = {k: hit.payload.get(k) for k in _IMAGE_FIELDS}
                        learned[eid] = (float(hit.score), crop, image)
        for eid, (sim, crop, image) in learned.items():
            m = best.get(eid)
            if m is None:
                best[eid] = ImageMatch(eid, None, crop, image, similarity=sim, learned_crop=crop, embed_tau=self.embed_tau)
            else:
                best[eid] = ImageMatch(
                    eid, m.distance, m.crop, m.image, similarity=sim, learned_crop=crop, embed_tau=self.embed_tau,
                    inliers=m.inliers, keypoints=m.keypoints, query_keypoints=m.query_keypoints, coverage=m.coverage,
                )
        return sorted(best.values(), key=lambda m: (m.distance is None, m.distance or 0, -(m.similarity or 0.0), m.entity_id))


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
        "hashed": route.index.image_count() if route is not None else None,
    }
    if route is not None and route.learned is not None and route.embedder is not None:
        out["embedded"] = route.learned.count()
        out["image_embedder"] = route.embedder.info.name
    return out
