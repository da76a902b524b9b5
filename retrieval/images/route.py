"""The image route of grounding: find the entity whose image (a meme template) the query image shows.

Two stages.  **Index side**, once per entity image (``Entity.images``, files in
``KAR_DATA_DIR/images``): up to :attr:`~retrieval.images.hashes.HashParams.max_frames` frames (an animated
template is indexed by frames spread over its first ones; a still image by its one frame) are
hashed (:mod:`retrieval.images.hashes`: dHash ‖ pHash as a 128-d ±1 vector) into the ``images``
collection, one point per (entity, image, frame), and described by local features
(:mod:`retrieval.images.features`: ORB keypoints) stored once in the feature folder
(:class:`~culturebase.store.images.ImageFeatureStore`).  An image that is missing or no longer
decodes is skipped with its reason (logged, counted, listed in :attr:`ImageRoute.skipped`);
the rest are indexed.

**Query side**, once per request (:meth:`ImageRoute.prepare`): the image is hashed with its
crops (caption bands removed, borders trimmed, the picture inside a screenshot) and described
by local features, the whole picture and each picture region it shows (a post's meme, each
cell of an image grid: :func:`retrieval.images.features.picture_regions`) apart, a small region
enlarged; the whole picture's and every region's descriptors vote in one faiss search, for each frame's
own codes and, apart, for its mirrored codes (what a mirrored repost shows: checked in the flipped picture
when nothing verifies as it is).  Stage 1: each crop is one nearest-neighbour search in the store; per
entity the smallest Hamming distance wins.  Stage 2: the :attr:`ImageRoute.verify` nearest
entities are verified geometrically against their stored features (ratio-tested matches,
RANSAC homography, :func:`retrieval.images.features.verify`).  The accept rule::

    verified   inliers ≥ min_inliers and a sane outline        evidence = 0.5 … 1.0 with the inliers
    hash       d ≤ τ_image when the template (or the query) has too few keypoints to be verified
               (a flat-colour template), or d ≤ near_duplicate (a near copy whose caption hides the
               keypoints): evidence = 1 − d / (τ_image + 1)

(``min_inliers``: :class:`~retrieval.images.features.VerificationParams`; ``near_duplicate`` and the
other tuned values of this module: :class:`ImageRouteParams`.)
    learned    s ≥ τ_embed (optional CLIP/SigLIP, ``KAR_IMAGE_EMBEDDER``)

A hash neighbour that has keypoints but fails verification is *not* accepted: that is what
keeps a look-alike of the same show or an unindexed template from being claimed.  The
matches go back to the grounder's image route, which folds them into the fused score.

The optional learned signal (``KAR_IMAGE_EMBEDDER=clip|siglip``, :mod:`retrieval.images.embedder`)
embeds every entity image into the ``image_embeddings`` collection and the query's crops once
per request; per entity the highest cosine similarity over crops is kept, with its own
threshold τ_embed (``KAR_IMAGE_EMBED_TAU``).  The trace's ``image`` names the winning signal
(``verified``, ``hash`` or ``learned``) with the measurements (``distance`` in bits,
``inliers``, ``similarity``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from culturebase.entity import Entity
from culturebase.images import ImageStore
from culturebase.settings import setting_default
from culturebase.store import CultureBaseStore, EmbedderInfo
from culturebase.store.images import ImageFeatureStore, ImageIndex, LearnedImageIndex
from retrieval.images import features as feats
from retrieval.images.descriptor_index import DescriptorIndex, ImageKey, Vote
from retrieval.images.descriptor_support import spread
from retrieval.images.hashes import (
    HASHER_NAME, VECTOR_DIM, QueryHashes, distance_from_score, flatten_grey, hash_image, open_image, query_variants, sample_frames,
    trim_borders,
)
from retrieval.images.query_threads import Ahead, QueryThreads

import numpy as np

if TYPE_CHECKING:
    from retrieval.images.embedder import ImageEmbedder

log = logging.getLogger(__name__)

HASHER = EmbedderInfo(HASHER_NAME, VECTOR_DIM)
#: the route's thresholds when none is given: the settings' defaults (``KAR_IMAGE_TAU``, ``KAR_IMAGE_EMBED_TAU``)
DEFAULT_IMAGE_TAU: int = setting_default("image_tau")
DEFAULT_EMBED_TAU: float = setting_default("image_embed_tau")


@dataclass(frozen=True)
class ImageRouteParams:
    """The image route's tuned values: which candidates are verified and how look-alikes are told apart.
    Provenance: *tuning* is :data:`~retrieval.images.provenance.TUNING_RUN` (top-1, false claims and CPU per query
    style on the tuning seed; ``BENCH_VARIANTS`` compares the alternatives named), *report* is
    :data:`~retrieval.images.provenance.REPORT_RUN` (used only where a field says so)."""

    #: hash neighbours verified geometrically per query: 6 found nothing 3 did not, on every seed; verifying none
    #: lost a plain meme that only the hash finds (chosen by: tuning and report, ``--baseline``)
    verify: int = 3
    #: a hash distance this small (of 128 bits) is a near-duplicate: accepted without verification (chosen by: tuning)
    near_duplicate: int = 16
    #: entities shortlisted by descriptor votes (beside the hash neighbours) for the geometric check (chosen by: tuning)
    vote: int = 6
    #: a hash neighbour farther than this (of 128 bits; unrelated pictures sit near 64) is checked only when votes
    #: shortlist it too: 48 found nothing 32 did not, on every seed, and cost time (chosen by: tuning and report)
    hash_verify_max: int = 32
    #: the mirrored pass verifies only templates the flipped picture gives at least this many votes ...
    #: (chosen by: tuning, the mirrored layouts)
    mirror_min_votes: int = 6
    #: ... and those a flipped picture region votes for from this many (a region's few hundred descriptors)
    #: (chosen by: tuning)
    mirror_min_votes_region: int = 4
    #: a template shortlisted by votes alone is verified from this many votes (its verification needs ≥ 10 inliers)
    #: (chosen by: tuning)
    min_votes: int = 3
    #: a template verified over the same part of the query as another one is claimed only when its strength
    #: (inliers × share of its own area) is this many times the runner-up's (chosen by: tuning, the lookalike style;
    #: ``--margin`` tries another)
    lookalike_margin: float = 1.3
    #: ... and by more than this many standard deviations of its strength, taking inlier counts as Poisson
    #: (strength × 2/√inliers): 20 against 15 inliers over the same share is a tie, 60 against 30 is not
    #: (chosen by: tuning, the lookalike style)
    contest_noise: float = 2.0
    #: two verified outlines compete for the query when this share of the smaller one overlaps the other
    #: (chosen by: tuning, grid: two cells of a grid do not compete)
    competing_overlap: float = 0.5
    #: entities shortlisted by each picture region's own descriptor votes (chosen by: tuning, grid)
    region_vote: int = 3
    #: a template verified in a picture region covers at least this share of it: right templates cover 0.80-3.95 of
    #: their region (cropped by the cell), a chance match of a synthetic template 0.04 (chosen by: tuning, grid)
    region_min_coverage: float = 0.5
    #: a region's best-voted template is verified from this many votes (the others from ``min_votes``)
    #: (chosen by: tuning, grid_narrow)
    region_top_votes: int = 2
    #: each picture region votes with this many of its descriptors (spread over it); all of them verify
    #: (chosen by: tuning)
    region_voters: int = 300
    #: when the query has picture regions, the whole picture votes with this many of its descriptors (spread over
    #: it; the regions vote for what it shows): 150 and 300 give the same top-1 and misses at 5,000 images, 150 at
    #: 6 % less CPU at p95 (chosen by: tuning)
    full_voters_with_regions: int = 150
    #: the flipped picture is hashed on the query's other threads while the first pass verifies, unless a candidate
    #: has this many votes: every query that verified nothing in the first pass had at most 5 (chosen by: tuning,
    #: ``--query-threads 2``)
    speculate_below_votes: int = 8


PARAMS = ImageRouteParams()
_IMAGE_FIELDS = ("sha256", "path", "url", "kind", "width", "height", "frame", "part")


@dataclass(frozen=True)
class HashedFrames:
    """An entity image's sampled frames, each ``(index, picture, grey upright copy, hash vector)``, and the hash
    vector of its first frame without uniform borders (a blank-background template's picture alone; None when
    the borders are under a fifth of it)."""

    frames: list[tuple[int, Any, Any, np.ndarray]]
    trimmed: np.ndarray | None


def hash_frames(data: bytes) -> HashedFrames:
    """Decode an entity image's frames and hash them, each frame made grey once (the hash, the border trim and
    the description all read it); raises the PIL error for bytes that are not an image."""
    frames = []
    for n, frame in sample_frames(data):
        grey = flatten_grey(frame)
        frames.append((n, frame, grey, hash_image(grey).vector()))
    first = frames[0][2]
    trimmed = trim_borders(first)
    blank = trimmed is not None and trimmed.width * trimmed.height <= 0.8 * first.width * first.height
    return HashedFrames(frames, hash_image(trimmed).vector() if blank else None)


@dataclass(frozen=True)
class QueryImage(QueryHashes):
    """A query image prepared once per request: crop hashes, local features and (with an embedder) crop embeddings."""

    embeddings: tuple[tuple[str, "np.ndarray"], ...] = ()
    #: local features, tried in this order: the picture inside a screenshot (when found), the whole image
    features: tuple[tuple[str, feats.Features], ...] = ()
    #: the decoded picture, grey and upright (for the mirrored pass and the focus crops)
    picture: Any = None
    #: the pictures a screenshot shows (a post's meme, each cell of a grid), each described apart and enlarged
    #: when small: (box in the picture's fractions, features) (:func:`retrieval.images.features.picture_regions`)
    regions: tuple[tuple[tuple[float, float, float, float], feats.Features], ...] = ()
    #: sha256 of the query's bytes: a stored image with the same bytes (its first frame) is at distance 0 (a KB
    #: indexed before stored hashes were two-step, :attr:`~retrieval.images.hashes.HashParams.reducing_gap`, holds one-step ones)
    sha256: str = ""


@dataclass(frozen=True)
class ImageMatch:
    """One entity's image evidence: nearest hash, geometric verification, learned similarity.

    ``distance`` is the summed Hamming distance of its nearest image (None when only the learned
    search reached it); ``inliers`` the RANSAC inliers of the verification (None when not
    verified: beyond the verified candidates or no stored features); ``keypoints`` the stored
    image's keypoint count (below :attr:`~retrieval.images.features.VerificationParams.min_keypoints` it cannot be
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
    #: share of the template's own area its inliers span (convex hull), when verified
    share: float | None = None
    #: query descriptors that voted for this entity's best frame (None: not shortlisted by votes)
    votes: int | None = None
    #: ``won`` (another template verified over the same part and lost by the margin), ``outranked`` (this
    #: one lost), ``ambiguous`` (no margin: neither is claimed); None when nothing competed
    contest: str | None = None
    #: the other templates verified over the same part of the query: entity id, inliers, share, strength
    rivals: tuple[dict[str, Any], ...] = ()
    #: the outline in the query part (4×2, fractions of the part's width and height) and that part
    quad: Any = None
    mirrored: bool = False

    @property
    def strength(self) -> float:
        """Inliers × share of the template's own area (0 when not verified): the look-alike tie-break."""
        return float(self.inliers or 0) * float(self.share or 0.0) if self.verified else 0.0

    @property
    def verified(self) -> bool:
        """Geometric verification passed (the inliers the stored image needs, a sane outline)."""
        return self.coverage is not None and self.inliers is not None and self.inliers >= feats.required_inliers(self.keypoints or 0)

    @property
    def verifiable(self) -> bool:
        """Both sides have enough keypoints for the geometric check to mean something."""
        least = feats.VERIFICATION_PARAMS.min_keypoints
        return (self.keypoints or 0) >= least and (self.query_keypoints or 0) >= least

    def hash_evidence(self, tau_image: int) -> float | None:
        """Hash-only evidence: within τ_image, for a checked candidate that cannot be verified."""
        if self.distance is None or self.distance > tau_image or self.keypoints is None:
            return None
        if self.verifiable and self.distance > PARAMS.near_duplicate:  # a textured template must pass verification
            return None
        return 1.0 - self.distance / (tau_image + 1)

    def verified_evidence(self) -> float | None:
        return feats.evidence(self.inliers or 0, feats.required_inliers(self.keypoints or 0)) if self.verified else None

    def learned_evidence(self) -> float | None:
        if self.similarity is None or self.embed_tau is None or self.similarity < self.embed_tau:
            return None
        return 1.0 if self.embed_tau >= 1.0 else (self.similarity - self.embed_tau) / (1.0 - self.embed_tau)

    def _signals(self, tau_image: int) -> dict[str, float]:
        if self.contest in ("outranked", "ambiguous"):  # a look-alike verified better (or as well) over the same part
            return {}
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
            "share": self.share,
            "votes": self.votes,
            "mirrored": self.mirrored or None,
            "contest": self.contest,
            "runner_up": list(self.rivals) or None,
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
        features: ImageFeatureStore | None = None, verify: int = PARAMS.verify, vote: int = PARAMS.vote,
        descriptors: DescriptorIndex | None = None, threads: int = 1,
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
        self.vote = vote
        #: a query whose candidates do not verify is tried mirrored (a flipped repost)
        self.mirror = True
        #: every entity image frame's local descriptors in one faiss index (candidates by votes)
        self.descriptors = descriptors if descriptors is not None else DescriptorIndex(self.features.root / "descriptor_index")
        self._descriptors_ready = False
        #: a query's independent work (regions and the whole picture described, descriptor lookups) side by side
        self.threads = QueryThreads(threads)

    def close(self) -> None:
        """Stop the query threads' pool (a later query starts it again)."""
        self.threads.close()

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
        voters: list[tuple[ImageKey, feats.Features, feats.MirroredCodes, int]] = []
        self._ensure_descriptors()
        for entity in entities:
            for image in entity.images:
                try:
                    data = self.images.read(image)
                except FileNotFoundError:
                    counts["missing"] += 1
                    self._skip(entity, image.path, f"missing_file: no file {self.images.path_of(image)}")
                    continue
                try:
                    hashed = hash_frames(data)
                except Exception as exc:  # a stored file that no longer decodes: this image only
                    counts["unreadable"] += 1
                    self._skip(entity, image.path, f"corrupt: {type(exc).__name__}: {exc}")
                    continue
                described, trimmed_vec = hashed.frames, hashed.trimmed
                for n, frame, grey, vec in described:
                    f = self._stored_features({"sha256": image.sha256, "frame": n}, previous=False)
                    mirrored = self._stored_mirrored(image.sha256, n, f)
                    if f is None or mirrored is None:  # (one detection gives both: described before mirrored codes were kept)
                        f, mirrored = feats.describe_entity_mirrored(grey)
                        self.features.put(image.sha256, n, feats.METHOD, {
                            "points": f.points, "descriptors": f.descriptors, "size": np.array([f.width, f.height]),
                            "coarse": np.array([f.coarse]),
                        })
                        self.features.put(image.sha256, n, feats.MIRRORED_METHOD, {"descriptors": mirrored.descriptors, "ok": mirrored.ok})
                    voters.append((ImageKey(entity.id, image.sha256, n, entity.language or ""), f, mirrored, len(described)))
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
        self.descriptors.remove_entities([e.id for e in entities])
        for key, f, mirrored, frames in voters:
            self.descriptors.add(key, f.points, f.descriptors, f.width, f.height, self.descriptors.per_frame(frames),
                                 coarse=f.coarse, coarse_limit=self.descriptors.coarse_per_frame(frames), mirrored=mirrored)
        self.descriptors.save()
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
        self.descriptors.clear()
        self._descriptors_ready = True
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
        self._ensure_descriptors()
        if self.descriptors.remove_entities(entity_ids):
            self.descriptors.save()
        return self.index.delete_entities(entity_ids)

    def _ensure_descriptors(self) -> None:
        """Read the descriptor index from disk once; when it is missing or torn while the hash index holds
        images (an index built before it existed, a crash between the two writes), rebuild it from the
        stored features of every indexed frame."""
        if self._descriptors_ready:
            return
        self._descriptors_ready = True
        if self.descriptors.load() or not self.index.exists:
            return
        self.rebuild_descriptors()

    def rebuild_descriptors(self) -> dict[str, int]:
        """Index the stored features of every frame in the hash index again (no image is decoded);
        returns ``frames`` indexed, ``missing`` feature files and frames ``unmirrored`` (described before their
        mirrored codes were kept: found only as they are, not mirrored; both re-described by ``kar kb reindex-images``)."""
        self.descriptors.clear()
        counts = {"frames": 0, "missing": 0, "unmirrored": 0}
        payloads = [p for p in self.index.payloads() if not p.get("part")]
        frames_of: dict[tuple[str, str], int] = {}
        for p in payloads:
            frames_of[(p["entity_id"], p["sha256"])] = frames_of.get((p["entity_id"], p["sha256"]), 0) + 1
        for p in payloads:
            f = self._stored_features(p)
            if f is None:
                counts["missing"] += 1
                continue
            key = ImageKey(str(p["entity_id"]), str(p["sha256"]), int(p.get("frame") or 0), str(p.get("language") or ""))
            frames = frames_of[(p["entity_id"], p["sha256"])]
            mirrored = self._stored_mirrored(key.sha256, key.frame, f)
            counts["unmirrored"] += mirrored is None
            self.descriptors.add(key, f.points, f.descriptors, f.width, f.height, self.descriptors.per_frame(frames),
                                 coarse=f.coarse, coarse_limit=self.descriptors.coarse_per_frame(frames), mirrored=mirrored)
            counts["frames"] += 1
        self.descriptors.save()
        self._descriptors_ready = True
        log.info("descriptor index rebuilt from stored features: %s", counts)
        if counts["unmirrored"]:
            log.warning("%d image frames were described before their mirrored codes were kept: a mirrored repost of them "
                        "is not found until `kar kb reindex-images` describes them again", counts["unmirrored"])
        return counts

    # -- query --------------------------------------------------------------------------
    def prepare(self, data: bytes) -> QueryImage:
        """Hash, describe (and with an embedder, embed) a query image once; raises the PIL error for
        bytes that are not an image."""
        img = open_image(data)
        # the grey picture once (hashes, regions and features all read grey pixels: the same bits as from the
        # colour picture, without converting it again for every crop); the embedder reads the colour crops
        grey_img = flatten_grey(img)
        crops_of = img if self.embedder is not None else grey_img
        grey = np.asarray(grey_img, dtype=np.uint8)

        def hashed() -> tuple[list[tuple[str, Any]], tuple[tuple[str, Any], ...]]:
            variants = query_variants(crops_of) if self.crops else [("full", crops_of)]
            return variants, tuple((name, hash_image(v)) for name, v in variants)

        # side by side on the route's threads: the crops (caption bands, borders, a screenshot's picture) found and
        # hashed on a pool thread while the pictures it shows (a post's meme, the cells of a grid) are found here; then
        # each of those described apart (small ones enlarged) while the whole picture is, its keypoints spread tile by
        # tile (at a smaller budget when there are regions), the pool taking regions as soon as the hashes are done
        hashing = self.threads.ahead([hashed])

        def whole(with_regions: bool) -> feats.Features:
            if with_regions:
                p = feats.FEATURE_PARAMS
                return feats.describe_query(grey_img, p.query_pixels_with_regions, p.query_features_with_regions, p.query_detect_with_regions)
            return feats.describe_query(grey_img)

        try:
            boxes = feats.picture_regions(grey)
            done = self.threads.run([lambda: whole(bool(boxes)), *[lambda box=box: feats.describe_region(grey, box) for box in boxes]])
            ((variants, hashes),) = hashing.results()
        finally:
            hashing.drop()  # (after an error: the hashes are not started)
        full = done[0]
        regions = tuple(r for r in done[1:] if r[0].count >= feats.VERIFICATION_PARAMS.min_keypoints)
        if boxes and not regions:  # no region kept keypoints enough: the whole picture at the full budget after all
            full = whole(False)
        embeddings: tuple[tuple[str, Any], ...] = ()
        if self.embedder is not None:
            vectors = self.embedder.embed([v for _, v in variants])
            embeddings = tuple((name, vectors[i]) for i, (name, _) in enumerate(variants))
        described = (("full", full),)
        return QueryImage(hashes, grey_img.width, grey_img.height, embeddings, described, grey_img, tuple((box, f) for f, box in regions),
                          hashlib.sha256(data).hexdigest())

    hash_query = prepare  # the earlier name

    def _stored_features(self, image: dict[str, Any], previous: bool = True) -> feats.Features | None:
        sha, frame = str(image.get("sha256")), int(image.get("frame") or 0)
        arrays = self.features.get(sha, frame, feats.METHOD)
        if arrays is None and previous:  # described before coarse keypoints: its fine ones (until `kar kb reindex-images`)
            arrays = self.features.get(sha, frame, feats.PREVIOUS_METHOD)
        if arrays is None:
            return None
        w, h = (int(v) for v in arrays["size"])
        coarse = int(arrays["coarse"][0]) if "coarse" in arrays else 0
        return feats.Features(arrays["points"], arrays["descriptors"], w, h, coarse)

    def _stored_mirrored(self, sha256: str, frame: int, features: feats.Features | None) -> feats.MirroredCodes | None:
        """The stored mirrored codes of a frame's stored ``features`` (None when not kept, or not of these keypoints)."""
        if features is None:
            return None
        arrays = self.features.get(sha256, frame, feats.MIRRORED_METHOD)
        if arrays is None or len(arrays["descriptors"]) != features.count:
            return None
        return feats.MirroredCodes(arrays["descriptors"], arrays["ok"].astype(bool))

    def _verify(
        self, queries: Sequence[tuple[str, "feats.Features | Callable[[], feats.Features]"]], hits: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """Verify an entity's candidate images (frames) with the query's feature sets (in order; the
        first that verifies an image counts for it; a set given as a function is read when reached): the
        strongest verified frame (inliers × share of its own area), its stored keypoints, outline coverage
        and share, image and query part."""
        out: dict[str, Any] = {"inliers": None, "keypoints": None, "coverage": None, "share": None, "quad": None, "image": None, "part": None}
        best = -1.0
        for image in hits:
            stored = self._stored_features(image)
            if stored is None:
                continue
            out["keypoints"] = max(out["keypoints"] or 0, stored.fine)  # what the accept rule reads: the fine ones
            if stored.fine < feats.VERIFICATION_PARAMS.min_keypoints:
                continue
            for part, query in queries:
                if callable(query):
                    query = query()
                if query.count < feats.VERIFICATION_PARAMS.min_keypoints:
                    continue
                v = feats.verify(query, stored)
                if v.verified and part.startswith("region") and (v.coverage or 0.0) < PARAMS.region_min_coverage:
                    v = dataclasses.replace(v, coverage=None)  # a region shows a picture: its template fills it
                if v.verified:
                    if v.strength > best:
                        best = v.strength
                        quad = v.quad / np.array([max(1, query.width), max(1, query.height)], np.float32)
                        out.update(inliers=v.inliers, keypoints=stored.fine, coverage=v.coverage, share=v.share, quad=quad,
                                   image=image, part=part)
                    break
                if out["coverage"] is None:
                    out["inliers"] = max(out["inliers"] or 0, v.inliers)
            if out["coverage"] is not None and feats.evidence(out["inliers"], feats.required_inliers(out["keypoints"])) >= 1.0:
                break  # a strongly verified frame: the entity's other frames cannot do much better
        return out

    def _voted(
        self, features: Sequence[tuple[str, feats.Features]], language: str | None, regions: Sequence[feats.Features] = (),
    ) -> tuple[dict[str, "_Voted"], dict[str, "_Voted"]]:
        """Entities shortlisted by descriptor votes: the :attr:`vote` best of the whole picture's features and
        the :attr:`ImageRouteParams.region_vote` best of each picture region's, from one faiss search; entity id → its best
        frame's votes, voted frames, where its whole-picture voters sit (a box in fractions) and the regions
        that voted for it (region index → votes).  The whole picture votes with all of its descriptors,
        :attr:`ImageRouteParams.full_voters_with_regions` of them when there are regions.  Second, from the
        same search, the entities the picture shows *mirrored* (votes for the frames' mirrored codes; the box
        flipped, in the flipped picture's fractions); with regions only the regions' votes count there, as the
        flipped regions alone voted when the mirrored pass described them."""
        self._ensure_descriptors()
        full = next((f for part, f in features if part == "full"), None)
        if not self.descriptors.size or full is None or full.count < feats.VERIFICATION_PARAMS.min_keypoints:
            return {}, {}
        voters = [f.descriptors[spread(f.points, PARAMS.region_voters, f.width, f.height)] for f in regions]
        whole = spread(full.points, PARAMS.full_voters_with_regions if regions else full.count, full.width, full.height)
        own, flipped = self.descriptors.vote_both([full.descriptors[whole], *voters], top=4 * self.vote, language=language,
                                                  threads=self.threads)
        if regions:
            flipped[0] = []
        return self._shortlist(own, whole, full, False), self._shortlist(flipped, whole, full, True)

    def _shortlist(self, lists: list[list[Vote]], whole: np.ndarray, full: feats.Features, mirrored: bool) -> dict[str, "_Voted"]:
        """:meth:`_voted`'s shortlist from one kind of votes (the whole picture's, then each region's)."""
        out: dict[str, _Voted] = {}
        for v in lists[0]:
            c = out.get(v.key.entity_id)
            if c is None and len(out) >= self.vote:
                continue
            c = out.setdefault(v.key.entity_id, _Voted())
            if v.votes > c.votes and len(v.voters) >= 4:
                pts = full.points[whole[list(v.voters)]]
                lo, hi = np.percentile(pts, 5, axis=0) / [full.width, full.height], np.percentile(pts, 95, axis=0) / [full.width, full.height]
                if mirrored:  # where they sit in the flipped picture
                    lo, hi = np.array([1.0 - hi[0], lo[1]]), np.array([1.0 - lo[0], hi[1]])
                c.box = (lo, hi)
            c.votes = max(c.votes, v.votes)
            c.keys.append(v.key)
        for j, votes in enumerate(lists[1:]):
            taken: set[str] = set()
            for rank, v in enumerate(votes):
                eid = v.key.entity_id
                # a region's best-voted template is checked from PARAMS.region_top_votes votes (a small cell gets few)
                if (eid not in taken and len(taken) >= PARAMS.region_vote) or v.votes < (PARAMS.region_top_votes if rank == 0 else PARAMS.min_votes):
                    continue
                taken.add(eid)
                c = out.setdefault(eid, _Voted())
                c.need = min(c.need, PARAMS.region_top_votes if rank == 0 else PARAMS.min_votes)
                c.votes = max(c.votes, v.votes)
                c.regions[j] = max(c.regions.get(j, 0), v.votes)
                if v.key not in c.keys:
                    c.keys.append(v.key)
        return out

    @staticmethod
    def _focus(picture: Any, box: Any) -> tuple[feats.Features, tuple[float, float, float, float]] | None:
        """The query's features inside the box where a candidate's voters sit (grown by 35 % a side),
        described at full resolution: a template filling a quarter of a screenshot gets the keypoints
        the whole picture's budget spent on chrome and text.  None when the box is most of the picture."""
        (x0, y0), (x1, y1) = box
        w, h = x1 - x0, y1 - y0
        x0, y0, x1, y1 = max(0.0, x0 - 0.35 * w), max(0.0, y0 - 0.35 * h), min(1.0, x1 + 0.35 * w), min(1.0, y1 + 0.35 * h)
        if (x1 - x0) * (y1 - y0) > 0.6 or (x1 - x0) < 0.05 or (y1 - y0) < 0.05:
            return None
        crop = picture.crop((int(x0 * picture.width), int(y0 * picture.height), int(x1 * picture.width), int(y1 * picture.height)))
        return feats.describe(crop, feats.FEATURE_PARAMS.query_side, feats.FEATURE_PARAMS.focus_features), (x0, y0, x1, y1)

    def _payloads(self, keys: Sequence[ImageKey]) -> dict[tuple[str, str, int], dict[str, Any]]:
        """The stored image fields of voted frames (one retrieve from the hash index)."""
        from culturebase.store.images import image_point_id

        if not keys or not self.index.exists:
            return {}
        ids = [image_point_id(k.entity_id, k.sha256, k.frame) for k in keys]
        out = {}
        for p in self.index.collection.retrieve(ids):
            image = {k: p.get(k) for k in _IMAGE_FIELDS}
            out[(str(p.get("entity_id")), str(p.get("sha256")), int(p.get("frame") or 0))] = image
        return out

    def _geometric(
        self, features: Sequence[tuple[str, feats.Features]], best: dict[str, ImageMatch], frames: dict[str, list[dict[str, Any]]],
        language: str | None, voted: dict[str, "_Voted"], mirrored: bool = False, picture: Any = None,
        regions: Sequence[tuple[tuple[float, float, float, float], feats.Features]] = (),
        whole_later: "Callable[[], feats.Features] | None" = None, query_keypoints: int | None = None,
    ) -> dict[str, ImageMatch]:
        """Stage 2 over the union of the hash neighbours and the descriptor-vote shortlist ``voted`` (of the whole
        picture and of each picture region: :meth:`_voted`); returns the checked entities' matches (the hash-only
        ones unchanged).  A candidate is verified first in the regions that voted for it, then in the whole picture.
        ``whole_later`` (with no ``features``, ``query_keypoints`` given) describes the whole picture when a
        candidate first needs it; ``regions`` may be described as they are read (:class:`_FlippedRegions`)."""
        whole = list(features)
        if query_keypoints is None:
            query_keypoints = max(f.count for _, f in features)
        payloads = self._payloads([k for c in voted.values() for k in c.keys])
        nearest = [] if mirrored else [
            m.entity_id for m in sorted(best.values(), key=lambda m: (m.distance or 0, m.entity_id))[: self.verify]
            if m.distance is not None and m.distance <= PARAMS.hash_verify_max
        ]
        checked: dict[str, ImageMatch] = {}
        strong_votes = 0
        focused: list[tuple[Any, feats.Features]] = []
        for eid in dict.fromkeys([*voted, *nearest]):
            cand = voted.get(eid) or _Voted()
            votes, keys, box = cand.votes, cand.keys, cand.box
            m = best.get(eid)
            near = m is not None and m.distance is not None and m.distance <= PARAMS.near_duplicate
            if strong_votes and votes < strong_votes / 4 and not near:
                continue  # a template verified strongly with 4× these votes: this one is not a look-alike of it
            if eid not in nearest and votes < cand.need:
                continue  # shortlisted by a few chance votes only: never worth a geometric check
            if mirrored and votes < (PARAMS.mirror_min_votes_region if cand.regions else PARAMS.mirror_min_votes):
                continue  # the mirrored pass checks only what the flipped picture votes for clearly
            hits = list(frames.get(eid, []))
            for key in keys:
                image = payloads.get((key.entity_id, key.sha256, key.frame))
                if image is not None and all((i["sha256"], i.get("frame")) != (image["sha256"], image.get("frame")) for i in hits):
                    hits.insert(0, image)
            if not hits:
                continue
            # (each region read when it is reached: a flipped one is described then)
            own = [(f"region{j}", lambda j=j: regions[j][1]) for j in sorted(cand.regions, key=lambda j: -cand.regions[j])]
            v = self._verify([*own, *whole], hits)
            if v["coverage"] is None and not whole and whole_later is not None:  # not in its own regions: the whole picture
                whole.append(("full", whole_later()))
                again = self._verify(whole, hits)
                if again["coverage"] is not None:
                    v = again
                elif again["inliers"] is not None:  # neither verified: the most inliers either found
                    v["inliers"] = max(v["inliers"] or 0, again["inliers"])
            focus = None
            if v["coverage"] is None and box is not None and picture is not None:
                # not verified in the whole picture: the part where its votes sit, described at full resolution
                focus = next((f for b, f in focused if _same_box(b, box)), None)
                if focus is None:
                    focus = self._focus(picture, box)
                    if focus is not None:
                        focused.append((box, focus))
                if focus is not None:
                    again = self._verify([("focus", focus[0])], hits)
                    if again["coverage"] is not None:
                        v = again
            frame = focus[1] if v["part"] == "focus" and focus is not None else None
            if v["part"] and v["part"].startswith("region"):
                frame = regions[int(v["part"][len("region"):])][0]
            if frame is not None and v["quad"] is not None:  # the outline in the whole picture's fractions
                x0, y0, x1, y1 = frame
                v["quad"] = v["quad"] * np.array([x1 - x0, y1 - y0], np.float32) + np.array([x0, y0], np.float32)
            m = best.get(eid)
            checked[eid] = ImageMatch(
                eid, m.distance if m is not None else None, v["part"] or (m.crop if m is not None else "full"),
                v["image"] or (m.image if m is not None else hits[0]), inliers=v["inliers"], keypoints=v["keypoints"],
                query_keypoints=query_keypoints, coverage=v["coverage"], share=v["share"], quad=v["quad"],
                votes=voted[eid].votes if eid in voted else None, mirrored=mirrored and v["coverage"] is not None,
            )
            if v["coverage"] is not None and feats.evidence(v["inliers"], feats.required_inliers(v["keypoints"])) >= 1.0:
                strong_votes = max(strong_votes, votes)
        return checked

    @staticmethod
    def _contest(matches: dict[str, ImageMatch]) -> dict[str, ImageMatch]:
        """Look-alikes told apart: of the templates verified over the same part of the query (outlines
        overlapping by :attr:`ImageRouteParams.competing_overlap`; different images), the strongest (inliers × share of its
        own area) is claimed when it beats the runner-up by :attr:`ImageRouteParams.lookalike_margin`, else none of them is;
        each shows the others with their inliers (``rivals``)."""
        verified = sorted((m for m in matches.values() if m.verified), key=lambda m: (-m.strength, m.entity_id))
        out = dict(matches)
        settled: set[str] = set()
        for i, m in enumerate(verified):
            if m.entity_id in settled:
                continue
            rivals = [
                r for r in verified[i + 1 :]
                if r.entity_id not in settled and r.image.get("sha256") != m.image.get("sha256") and _competing(m, r)
            ]
            if not rivals:
                continue
            # no margin, or a lead within the noise of few inliers (two weak verifications of one shared part)
            noise = PARAMS.contest_noise * math.sqrt(float(m.inliers or 0)) * float(m.share or 0.0)
            ambiguous = rivals[0].strength * PARAMS.lookalike_margin > m.strength or m.strength - rivals[0].strength < noise
            group = [m, *rivals]
            for g in group:
                others = tuple(
                    {"entity_id": o.entity_id, "inliers": o.inliers, "share": o.share, "strength": round(o.strength, 2)}
                    for o in group if o is not g
                )
                contest = "ambiguous" if ambiguous else ("won" if g is m else "outranked")
                out[g.entity_id] = dataclasses.replace(g, contest=contest, rivals=others)
                settled.add(g.entity_id)
        return out

    def match(self, query: QueryHashes, language: str | None = None, limit: int | None = None) -> list[ImageMatch]:
        """Image evidence per entity, nearest hash first: stage 1 over every crop's hash and the whole
        picture's descriptor votes, stage 2 on the :attr:`verify` nearest hash neighbours and the
        :attr:`vote` best-voted entities; a query whose templates do not verify as it is is tried mirrored
        (callers apply the accept rule: :meth:`ImageMatch.signal`)."""
        best: dict[str, ImageMatch] = {}
        frames: dict[str, list[dict[str, Any]]] = {}

        def search(crop: str, vector: np.ndarray) -> None:
            for hit in self.index.search(vector, limit or self.candidates, language=language):
                eid = hit.payload["entity_id"]
                dist = distance_from_score(hit.score)
                image = {k: hit.payload.get(k) for k in _IMAGE_FIELDS}
                if crop == "full" and same_bytes and image["sha256"] == same_bytes and not image.get("frame"):
                    dist = 0  # the very bytes stored (a KB indexed with one-step hashes holds them a few bits off)
                seen = frames.setdefault(eid, [])
                if all((i["sha256"], i.get("frame")) != (image["sha256"], image.get("frame")) for i in seen):
                    seen.append(image)
                if eid not in best or dist < (best[eid].distance or 0):
                    best[eid] = ImageMatch(eid, dist, crop, image)

        same_bytes = getattr(query, "sha256", "")
        for crop, h in query.variants:
            search(crop, h.vector())
        features = tuple(getattr(query, "features", ()) or ())
        if features:
            from PIL import ImageOps

            picture = getattr(query, "picture", None)
            regions = tuple(getattr(query, "regions", ()) or ())
            ahead: list[Ahead[Any]] = []

            def flipped_and_hashed() -> tuple[Any, Any]:
                flipped = ImageOps.mirror(picture)
                return flipped, hash_image(flipped)

            voted, voted_mirrored = self._voted(features, language, [f for _, f in regions]) if self.vote else ({}, {})
            if self.mirror and picture is not None and max((c.votes for c in voted.values()), default=0) < PARAMS.speculate_below_votes:
                # the first pass's candidates are verified on this thread: the flipped picture is hashed on a pool
                # thread meanwhile, unless a candidate has the votes that verify
                ahead.append(self.threads.ahead([flipped_and_hashed]))
            try:
                best.update(self._geometric(features, best, frames, language, voted, picture=picture, regions=regions))
                if self.mirror and picture is not None and not any(m.verified for m in best.values()):
                    flipped, flipped_hashes = ahead[0].results()[0] if ahead else flipped_and_hashed()
                    search("mirrored", flipped_hashes.vector())
                    # what the same search found mirrored, verified in the flipped picture: each voting region's keypoints
                    # mirrored and described there when a candidate first needs it, the whole picture's likewise
                    again = self._geometric(
                        (), best, frames, language, voted_mirrored, mirrored=True, picture=flipped, regions=_FlippedRegions(regions),
                        whole_later=lambda: self._mirrored_whole(picture, features), query_keypoints=max(f.count for _, f in features),
                    )
                    best.update({eid: m for eid, m in again.items() if m.verified or eid not in best or best[eid].inliers is None})
            finally:
                for started in ahead:
                    started.drop()  # not needed (the first pass verified), or an error: what has not started never runs
            best = self._contest(best)
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
                best[eid] = dataclasses.replace(m, similarity=sim, learned_crop=crop, embed_tau=self.embed_tau)
        return sorted(best.values(), key=lambda m: (m.distance is None, m.distance or 0, -(m.similarity or 0.0), m.entity_id))

    @staticmethod
    def _mirrored_whole(picture: Any, features: Sequence[tuple[str, feats.Features]]) -> feats.Features:
        """The whole picture's keypoints mirrored and described in the flipped picture."""
        from PIL import ImageOps

        full = next((f for part, f in features if part == "full"), None)
        return feats.mirrored_query(full, picture) if full is not None else feats.describe_query(ImageOps.mirror(picture))

    def match_many(self, queries: Sequence[QueryHashes], language: str | None = None, limit: int | None = None) -> list[ImageMatch]:
        """Several images of one item (a clip's sampled frames, a post's pictures) in one call: each
        image is matched as :meth:`match` does, and every entity is counted once, by its best match
        (accepted before not accepted, then the larger evidence, then more inliers)."""
        best: dict[str, tuple[tuple[Any, ...], ImageMatch]] = {}
        for query in queries:
            for m in self.match(query, language=language, limit=limit):
                signal = m.signal(self.tau)
                rank = (signal is not None, m.evidence(self.tau), m.inliers or 0, -(m.distance if m.distance is not None else 999))
                if m.entity_id not in best or rank > best[m.entity_id][0]:
                    best[m.entity_id] = (rank, m)
        return sorted((m for _, m in best.values()), key=lambda m: (m.distance is None, m.distance or 0, -(m.similarity or 0.0), m.entity_id))


class _FlippedRegions(Sequence):
    """The query's picture regions as the flipped picture shows them, each described (its keypoints mirrored:
    :func:`~retrieval.images.features.mirrored_query`) when first read: a mirrored candidate needs only the
    regions that voted for it."""

    def __init__(self, regions: Sequence[tuple[tuple[float, float, float, float], feats.Features]]) -> None:
        self._regions = regions
        self._done: dict[int, tuple[tuple[float, float, float, float], feats.Features]] = {}

    def __len__(self) -> int:
        return len(self._regions)

    def __getitem__(self, j):  # type: ignore[override]
        if j not in self._done:
            (x0, y0, x1, y1), f = self._regions[j]
            self._done[j] = ((1.0 - x1, y0, 1.0 - x0, y1), feats.mirrored_query(f))
        return self._done[j]


@dataclass
class _Voted:
    """An entity's descriptor votes (:meth:`ImageRoute._voted`)."""

    votes: int = 0
    keys: list[ImageKey] = field(default_factory=list)
    box: Any = None
    regions: dict[int, int] = field(default_factory=dict)
    #: the votes that make it worth a geometric check (fewer for a region's best-voted template)
    need: int = PARAMS.min_votes


def _same_box(a: Any, b: Any, tol: float = 0.05) -> bool:
    return all(abs(float(x) - float(y)) <= tol for p, q in zip(a, b) for x, y in zip(p, q))


def _competing(a: ImageMatch, b: ImageMatch) -> bool:
    """Two verified templates compete when their outlines overlap in the same query part (a part
    described apart, the picture of a screenshot, is taken as the same place)."""
    def frame(crop: str) -> str:  # a focus crop's or a region's outline is mapped to the whole picture's fractions
        return "full" if crop == "focus" or crop.startswith("region") else crop

    if a.quad is None or b.quad is None or frame(a.crop) != frame(b.crop):
        return True
    return feats.overlap(a.quad, b.quad) >= PARAMS.competing_overlap


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
