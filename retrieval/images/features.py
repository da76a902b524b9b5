"""Local image features and their geometric verification: the image route's second stage.

The first stage (perceptual hashes, :mod:`retrieval.images.hashes`) ranks entity images by a
whole-picture fingerprint; it cannot tell a template from a look-alike of the same show, and
it does not see a template that fills only part of the picture (a screenshot of a post, a
collage).  The second stage checks the best hash candidates (and the candidates of the
picture-region crop) with local features: ORB keypoints (binary descriptors, Hamming
matching) of the query are matched to the stored keypoints of each candidate image with
Lowe's ratio test, and a homography is fitted with RANSAC; the template is *verified* when at
least :attr:`VerificationParams.min_inliers` matches agree with one plane-to-plane mapping whose image of the
template is a sane quadrilateral (convex, not degenerate).  A homography also places a
template that fills a third of a screenshot.

ORB was chosen over AKAZE and SIFT on the template bench (top-1, false claims, latency:
:data:`~retrieval.images.provenance.TUNING_RUN`).  Entity images are described once at indexing time
(:func:`describe`) and stored (:class:`culturebase.store.images.ImageFeatureStore`); a query is
described once per request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

from retrieval.images.descriptor_support import single_threaded, spread

#: the feature method and its version (stored with the features: a change re-describes the images)
METHOD = "orb3"
#: the method before coarse keypoints: read when an image has no ``orb3`` file yet (a KB indexed before;
#: ``kar kb reindex-images`` describes it again), with its fine keypoints only
PREVIOUS_METHOD = "orb2"
#: the :data:`METHOD` keypoints' mirrored codes (:class:`MirroredCodes`), stored beside them for the descriptor index
#: (an image described before they were has none until it is indexed again)
MIRRORED_METHOD = "orb3m"
#: OpenCV works in the calling thread: describing one picture and matching a few hundred descriptors are
#: too small to share, and its worker threads contend with the service's other requests
CV_THREADS = 1


@dataclass(frozen=True)
class FeatureParams:
    """How entity and query images are described (ORB keypoints).  Provenance: *tuning* is
    :data:`~retrieval.images.provenance.TUNING_RUN` (top-1, false claims and CPU per query style on the tuning seed,
    the alternatives compared by its ``BENCH_VARIANTS``)."""

    #: ORB's FAST threshold, border and patch size for every description but the query's tiles (chosen by: tuning,
    #: ORB over AKAZE and SIFT on top-1, false claims and latency)
    orb_fast_threshold: int = 7
    orb_edge_threshold: int = 15
    orb_patch_size: int = 15
    #: longest side at which an entity image is described, and its keypoints (chosen by: tuning)
    index_side: int = 480
    index_features: int = 400
    #: an entity image is described a second time at this longest side, with ``coarse_features`` keypoints
    #: (positions in the 480 px copy's pixels): a template shown small (a grid cell, a quarter of a screenshot:
    #: 130-250 px) matches keypoints ORB found at its own scale, which the 480 px pyramid barely has
    #: (chosen by: tuning, grid_narrow)
    coarse_side: int = 200
    coarse_features: int = 150
    #: longest side at which a focus crop of the query is described (a template filling 40 % of a screenshot
    #: keeps ~320 px) (chosen by: tuning)
    query_side: int = 800
    #: the whole query is described near its own size (a grid cell at 25 % of the width keeps its pixels) up to
    #: ``query_pixels`` and ``query_max_side``, ``query_detect`` keypoints detected and the ``query_features``
    #: strongest kept spread over the picture (chosen by: tuning)
    query_features: int = 1000
    query_pixels: int = 800_000
    query_max_side: int = 1600
    query_detect: int = 1600
    #: a query whose picture regions are described apart (:func:`picture_regions`): the whole picture at this
    #: budget (chosen by: tuning, the same top-1 at less CPU)
    query_pixels_with_regions: int = 400_000
    query_features_with_regions: int = 700
    query_detect_with_regions: int = 1100
    #: the query's keypoints are detected tile by tile over this many tiles a side (:func:`describe_query`): one
    #: detection over the picture kept 87 of 1,000 keypoints on a template beside dense text instead of 179
    #: (chosen by: tuning)
    query_tiles: int = 3
    #: the FAST threshold of the query's tiles (chosen by: tuning)
    query_fast_threshold: int = 12
    #: keypoints of the part of the query where a candidate's descriptor votes sit (the image route's focus)
    #: (chosen by: tuning)
    focus_features: int = 800
    #: longest side of the grey copy the query's picture regions are found in (:func:`picture_regions`)
    #: (chosen by: tuning)
    region_work_side: int = 720
    #: a picture region is described at this longest side (a small grid cell enlarged up to ``region_max_upscale``×)
    #: with ``region_features`` keypoints (chosen by: tuning, grid and grid_narrow)
    region_side: int = 340
    region_max_upscale: float = 2.5
    region_features: int = 400
    #: at most this many regions per query, the largest first (chosen by: tuning)
    max_regions: int = 6


@dataclass(frozen=True)
class VerificationParams:
    """When a stored template is verified in a query (ratio test, RANSAC homography, a sane outline).  Provenance:
    *tuning* is :data:`~retrieval.images.provenance.TUNING_RUN` (``BENCH_HITS=1`` prints every hit's inliers,
    share and coverage; ``BENCH_MISSES=1`` every miss and false claim)."""

    #: Lowe's ratio test (chosen by: tuning)
    ratio: float = 0.75
    #: RANSAC inliers needed to verify a textured template; a template with few keypoints needs a quarter of
    #: them, never fewer than ``min_inliers_floor`` (:func:`required_inliers`) (chosen by: tuning, false claims)
    min_inliers: int = 15
    min_inliers_floor: int = 10
    #: an entity image with fewer keypoints than this cannot be verified (flat colour, tiny): hashes alone decide
    #: (chosen by: tuning, blank_background)
    min_keypoints: int = 60
    #: RANSAC's reprojection threshold in pixels (chosen by: tuning)
    ransac_px: float = 6.0
    #: an outline covers at least this share of the query part it is found in ... (chosen by: tuning)
    min_coverage: float = 0.03
    #: ... or this share, with ``small_coverage_inliers`` × the inliers the template needs (a small grid cell in a
    #: whole screenshot) (chosen by: tuning, grid_narrow)
    small_coverage: float = 0.008
    small_coverage_inliers: int = 2
    #: the inliers of a verified template span at least this share of its own area (convex hull)
    #: (chosen by: tuning)
    min_share: float = 0.03


FEATURE_PARAMS = FeatureParams()
VERIFICATION_PARAMS = VerificationParams()
_cv_ready = False


def _cv2():
    """OpenCV, set to :data:`CV_THREADS` once per process."""
    global _cv_ready
    import cv2

    if not _cv_ready:
        cv2.setNumThreads(CV_THREADS)
        _cv_ready = True
    return cv2


def _orb(cv2, n_features: int, fast_threshold: int | None = None):
    """An ORB detector of ``n_features`` keypoints with :class:`FeatureParams`' FAST threshold, border and patch."""
    p = FEATURE_PARAMS
    fast = p.orb_fast_threshold if fast_threshold is None else fast_threshold
    return cv2.ORB_create(nfeatures=n_features, fastThreshold=fast, edgeThreshold=p.orb_edge_threshold, patchSize=p.orb_patch_size)


@dataclass(frozen=True)
class Features:
    """Keypoint positions (N×2 float32, in the described copy's pixels) and ORB descriptors (N×32 uint8)."""

    points: np.ndarray
    descriptors: np.ndarray
    width: int
    height: int
    #: the last ``coarse`` keypoints were found in the :attr:`FeatureParams.coarse_side` copy (an entity image's; 0 for a query)
    coarse: int = 0

    @property
    def count(self) -> int:
        return int(self.points.shape[0])

    @property
    def fine(self) -> int:
        """Keypoints found at the described size (the first ones)."""
        return self.count - self.coarse

    def neighbours(self, descriptors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The 2 nearest of these descriptors for each given one (Hamming distances, indices; -1 where
        there is no second): an exact faiss index over this picture's descriptors, built on first use and
        kept with it (a query verifies a dozen templates against it; OpenCV's brute-force matcher took 5×)."""
        import faiss

        index = self.__dict__.get("_index")
        if index is None:
            single_threaded()
            index = faiss.IndexBinaryFlat(self.descriptors.shape[1] * 8)
            index.add(np.ascontiguousarray(self.descriptors, dtype=np.uint8))
            object.__setattr__(self, "_index", index)
        return index.search(np.ascontiguousarray(descriptors, dtype=np.uint8), 2)

    @classmethod
    def empty(cls, width: int = 0, height: int = 0) -> "Features":
        return cls(np.zeros((0, 2), np.float32), np.zeros((0, 32), np.uint8), width, height)


@dataclass(frozen=True)
class Verification:
    """The outcome of matching one query against one entity image."""

    inliers: int
    matches: int
    #: the template's outline in the query (fraction of the query's area it covers), when its shape is sane
    coverage: float | None
    required: int = VERIFICATION_PARAMS.min_inliers
    #: share of the template's own area spanned by its inliers (convex hull in the template), when verified
    share: float | None = None
    #: the template's outline in the query (4×2, the query's described pixels), when its shape is sane
    quad: np.ndarray | None = None

    @property
    def strength(self) -> float:
        """Inliers over the share of its own area they span: what tells a template from a look-alike that
        shares a part of it (a face, a logo): ``inliers × share``."""
        return float(self.inliers) * float(self.share or 0.0)

    @property
    def verified(self) -> bool:
        return self.inliers >= self.required and self.coverage is not None


def required_inliers(template_keypoints: int) -> int:
    """Inliers that verify a template with this many stored keypoints (see :attr:`VerificationParams.min_inliers`)."""
    return max(VERIFICATION_PARAMS.min_inliers_floor, min(VERIFICATION_PARAMS.min_inliers, -(-template_keypoints // 4)))


def _grey_array(img: Image.Image, side: int) -> np.ndarray:
    from retrieval.images.hashes import flatten_grey

    grey = flatten_grey(img)
    if max(grey.size) > side:
        grey = grey.copy()
        grey.thumbnail((side, side), Image.Resampling.BILINEAR)
    return np.asarray(grey, dtype=np.uint8)


def describe(img: Image.Image, side: int = FEATURE_PARAMS.index_side, n_features: int = FEATURE_PARAMS.index_features) -> Features:
    """ORB keypoints and descriptors of a PIL image at longest side ``side`` (empty for a flat or tiny image)."""
    cv2 = _cv2()

    arr = _grey_array(img, side)
    h, w = arr.shape
    if min(h, w) < 32:  # below ORB's border and patch size: nothing to describe
        return Features.empty(w, h)
    orb = _orb(cv2, n_features)
    keypoints, descriptors = orb.detectAndCompute(arr, None)
    if descriptors is None or not keypoints:
        return Features.empty(w, h)
    points = np.array([k.pt for k in keypoints], dtype=np.float32)
    return Features(points, descriptors.astype(np.uint8), w, h)


@dataclass(frozen=True)
class MirroredCodes:
    """An entity image's descriptors as its mirror image gives them: row ``i`` is keypoint ``i`` mirrored (FAST
    corners are mirror-symmetric) and described in the flipped picture, for the descriptor index's mirrored codes
    (a mirrored repost votes for them); ``ok`` is False where ORB dropped the mirrored keypoint (at the border)."""

    descriptors: np.ndarray
    ok: np.ndarray


def describe_entity(img: Image.Image) -> Features:
    """An entity image's features: :attr:`FeatureParams.index_features` keypoints at :attr:`FeatureParams.index_side`, then up to
    :attr:`FeatureParams.coarse_features` found in a :attr:`FeatureParams.coarse_side` copy (their positions scaled to the first copy),
    so that the template shown small in a query still meets keypoints of its own scale."""
    return _describe_entity(img, False)[0]


def describe_entity_mirrored(img: Image.Image) -> tuple[Features, MirroredCodes]:
    """:func:`describe_entity` and the same keypoints' :class:`MirroredCodes` (one detection)."""
    features, mirrored = _describe_entity(img, True)
    assert mirrored is not None
    return features, mirrored


def _described_mirrored(cv2, arr: np.ndarray, keypoints: list) -> tuple[list, np.ndarray | None]:
    """``keypoints`` of ``arr`` mirrored (FAST corners are mirror-symmetric: no second detection) and described in
    the flipped copy: the keypoints ORB kept (each one's ``class_id`` its index in ``keypoints``) and their codes."""
    w = arr.shape[1]
    mirrored = [cv2.KeyPoint(w - 1 - k.pt[0], k.pt[1], k.size, (180.0 - k.angle) % 360.0, k.response, k.octave, i)
                for i, k in enumerate(keypoints)]
    orb = _orb(cv2, max(1, len(mirrored)))
    return orb.compute(np.ascontiguousarray(arr[:, ::-1]), mirrored)


def _mirrored_codes(cv2, arr: np.ndarray, keypoints: list) -> MirroredCodes:
    """``keypoints`` of ``arr`` mirrored and described in the flipped copy, row-aligned with them."""
    n = len(keypoints)
    codes, ok = np.zeros((n, 32), np.uint8), np.zeros(n, bool)
    if not n:
        return MirroredCodes(codes, ok)
    kept, descriptors = _described_mirrored(cv2, arr, keypoints)
    if descriptors is not None and kept:
        rows = np.array([k.class_id for k in kept], np.int64)  # ORB keeps class_id: each kept row's keypoint
        codes[rows], ok[rows] = descriptors.astype(np.uint8), True
    return MirroredCodes(codes, ok)


def _describe_entity(img: Image.Image, mirrored: bool) -> tuple[Features, MirroredCodes | None]:
    cv2 = _cv2()
    parts: list[MirroredCodes] = []  # (with ``mirrored``) the mirrored codes of the keypoints kept so far

    def out(f: Features) -> tuple[Features, MirroredCodes | None]:
        if not mirrored:
            return f, None
        return f, MirroredCodes(np.concatenate([p.descriptors for p in parts] or [np.zeros((0, 32), np.uint8)]),
                                np.concatenate([p.ok for p in parts] or [np.zeros(0, bool)]))

    arr = _grey_array(img, FEATURE_PARAMS.index_side)
    h, w = arr.shape
    if min(h, w) < 32:
        return out(Features.empty(w, h))
    orb = _orb(cv2, FEATURE_PARAMS.index_features)
    keypoints, descriptors = orb.detectAndCompute(arr, None)
    if descriptors is None or not keypoints:
        return out(Features.empty(w, h))
    points = np.array([k.pt for k in keypoints], dtype=np.float32)
    descriptors = descriptors.astype(np.uint8)
    if mirrored:
        parts.append(_mirrored_codes(cv2, arr, keypoints))
    scale = FEATURE_PARAMS.coarse_side / max(h, w)
    if scale > 0.75:  # a small image: its one description is already at the coarse scale
        return out(Features(points, descriptors, w, h))
    sw, sh = max(1, int(round(w * scale))), max(1, int(round(h * scale)))
    if min(sw, sh) < 48:  # a strip: too thin at the coarse size for ORB's patch
        return out(Features(points, descriptors, w, h))
    small = cv2.resize(arr, (sw, sh), interpolation=cv2.INTER_AREA)
    coarse_orb = _orb(cv2, FEATURE_PARAMS.coarse_features)
    small_kp, small_desc = coarse_orb.detectAndCompute(small, None)
    if small_desc is None or not small_kp:
        return out(Features(points, descriptors, w, h))
    small_pts = np.array([k.pt for k in small_kp], dtype=np.float32) * np.array([w / sw, h / sh], np.float32)
    if mirrored:
        parts.append(_mirrored_codes(cv2, small, small_kp))
    return out(Features(np.concatenate([points, small_pts]), np.concatenate([descriptors, small_desc.astype(np.uint8)]), w, h,
                        coarse=len(small_kp)))


def _tiled_keypoints(cv2, arr: np.ndarray, margin: int = 24, detect: int = FEATURE_PARAMS.query_detect) -> list:
    """ORB keypoints detected tile by tile (:attr:`FeatureParams.query_tiles` a side, overlapping by ``margin``), strongest
    first within each tile: one detector over the whole picture keeps the corners of black-on-white text and
    drops the template beside it, whose corners respond less."""
    tiles = FEATURE_PARAMS.query_tiles
    h, w = arr.shape
    per = max(64, detect // (tiles * tiles))
    orb = _orb(cv2, per, FEATURE_PARAMS.query_fast_threshold)
    out = []
    for ty in range(tiles):
        for tx in range(tiles):
            x0, x1 = tx * w // tiles, (tx + 1) * w // tiles
            y0, y1 = ty * h // tiles, (ty + 1) * h // tiles
            gx0, gy0 = max(0, x0 - margin), max(0, y0 - margin)
            tile = arr[gy0 : min(h, y1 + margin), gx0 : min(w, x1 + margin)]
            if min(tile.shape) < 40:
                continue
            found = orb.detect(tile, None)
            if not found:
                continue
            response = np.fromiter((k.response for k in found), np.float64, len(found))
            order = np.argsort(-response, kind="stable")  # strongest first, ties in detection order
            xy = cv2.KeyPoint_convert(found).astype(np.float64)[order] + (gx0, gy0)
            own = (x0 <= xy[:, 0]) & (xy[:, 0] < x1) & (y0 <= xy[:, 1]) & (xy[:, 1] < y1)  # each keypoint once: from its tile
            for i, (x, y) in zip(order[own].tolist(), xy[own].tolist()):
                k = found[i]
                k.pt = (x, y)  # in the whole picture's pixels
                out.append(k)
    return out


def describe_query(
    img: Image.Image, pixels: int = FEATURE_PARAMS.query_pixels, features: int = FEATURE_PARAMS.query_features,
    detect: int = FEATURE_PARAMS.query_detect,
) -> Features:
    """The query's features, spread over the picture: described near its own resolution (at most
    :attr:`FeatureParams.query_pixels`, longest side :attr:`FeatureParams.query_max_side`: a template in one cell of a grid keeps its
    pixels), :attr:`FeatureParams.query_detect` keypoints detected and the :attr:`FeatureParams.query_features` strongest taken cell by
    cell of an 8×8 grid, so that chrome and text do not spend the budget a small template needs.  A query
    whose picture regions are described apart is described with a smaller budget (``pixels``, ``features``,
    ``detect``: :attr:`FeatureParams.query_pixels_with_regions`)."""
    cv2 = _cv2()
    longest = max(1, img.width, img.height)
    scale = min(1.0, FEATURE_PARAMS.query_max_side / longest, (pixels / max(1, img.width * img.height)) ** 0.5)
    arr = _grey_array(img, max(32, int(round(longest * scale))))
    h, w = arr.shape
    if min(h, w) < 32:
        return Features.empty(w, h)
    orb = _orb(cv2, detect)
    keypoints = _tiled_keypoints(cv2, arr, detect=detect)
    if not keypoints:
        return Features.empty(w, h)
    if len(keypoints) > features:
        points = np.array([k.pt for k in keypoints], dtype=np.float32)
        keypoints = [keypoints[i] for i in spread(points, features, w, h).tolist()]
    keypoints, descriptors = orb.compute(arr, keypoints)
    if descriptors is None or not keypoints:
        return Features.empty(w, h)
    out = Features(np.array([k.pt for k in keypoints], dtype=np.float32), descriptors.astype(np.uint8), w, h)
    object.__setattr__(out, "_source", (arr, keypoints))  # for :func:`mirrored_query`
    return out


def mirrored_query(query: Features, img: Image.Image | None = None) -> Features:
    """The query's features as a mirrored repost of the template would give them: the same keypoints
    mirrored (FAST corners are mirror-symmetric), described in the flipped picture, so a flipped template
    gets as many keypoints as it had (no second detection).  ``img`` is described again when ``query``
    does not keep its picture."""
    cv2 = _cv2()

    source = query.__dict__.get("_source")
    if source is None:
        if img is None:
            return Features.empty(query.width, query.height)
        from PIL import ImageOps

        return describe_query(ImageOps.mirror(img))
    arr, keypoints = source
    h, w = arr.shape
    mirrored, descriptors = _described_mirrored(cv2, arr, keypoints)
    if descriptors is None or not mirrored:
        return Features.empty(w, h)
    return Features(np.array([k.pt for k in mirrored], dtype=np.float32), descriptors.astype(np.uint8), w, h)


def _convex(quad: np.ndarray) -> bool:
    signs = []
    for i in range(4):
        a, b, c = quad[i], quad[(i + 1) % 4], quad[(i + 2) % 4]
        signs.append(np.sign((b[0] - a[0]) * (c[1] - b[1]) - (b[1] - a[1]) * (c[0] - b[0])))
    # every turn the template's own corners take (clockwise on screen): a mirrored outline turns the other way,
    # and a mirrored picture is the mirrored pass's to claim (symmetric shapes match their mirror images)
    return all(s > 0 for s in signs)


def verify(query: Features, template: Features) -> Verification:
    """Match ``template`` into ``query`` (ratio test, RANSAC homography); inliers and the covered share."""
    cv2 = _cv2()

    need = required_inliers(template.fine)
    if query.count < 2 or template.count < 2:
        return Verification(0, 0, None, need)
    dist, idx = query.neighbours(template.descriptors)
    ok = (idx[:, 1] >= 0) & (dist[:, 0] < VERIFICATION_PARAMS.ratio * dist[:, 1])
    if template.coarse:  # a query keypoint a fine keypoint matched is not counted again for a coarse one
        fine = template.fine
        ok[fine:] &= ~np.isin(idx[fine:, 0], idx[:fine, 0][ok[:fine]])
    n_good = int(ok.sum())
    if n_good < need:
        return Verification(n_good, n_good, None, need)
    src = template.points[ok].reshape(-1, 1, 2)
    dst = query.points[idx[ok, 0]].reshape(-1, 1, 2)
    h, mask = cv2.findHomography(src, dst, cv2.USAC_FAST, VERIFICATION_PARAMS.ransac_px, maxIters=300, confidence=0.995)
    if h is None or mask is None:
        return Verification(0, n_good, None, need)
    inliers = int(mask.sum())
    corners = np.array([[0, 0], [template.width, 0], [template.width, template.height], [0, template.height]], np.float32)
    quad = cv2.perspectiveTransform(corners.reshape(-1, 1, 2), h).reshape(4, 2)
    area = abs(cv2.contourArea(quad.astype(np.float32)))
    coverage = area / float(max(1, query.width * query.height))
    # a template as small as a narrow grid's cell (1-3 % of a screenshot) is placed only by many inliers
    small_ok = coverage >= VERIFICATION_PARAMS.small_coverage and inliers >= VERIFICATION_PARAMS.small_coverage_inliers * need
    sane = bool(np.isfinite(quad).all() and _convex(quad) and (VERIFICATION_PARAMS.min_coverage <= coverage or small_ok) and coverage <= 4.0)
    share = None
    if sane and inliers >= 3:
        inlying = src.reshape(-1, 2)[mask.reshape(-1).astype(bool)]
        hull = cv2.convexHull(inlying.astype(np.float32))
        share = round(float(cv2.contourArea(hull)) / float(max(1, template.width * template.height)), 3)
        sane = share >= VERIFICATION_PARAMS.min_share  # inliers heaped on one spot (a symmetric blob matched again and again) place nothing
    return Verification(inliers, n_good, round(coverage, 3) if sane else None, need, share, quad if sane else None)


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection of two convex outlines over the smaller one's area (0 … 1): two templates that
    verify over the same part of the query compete for it; two cells of a grid do not."""
    import cv2

    pa, pb = a.astype(np.float32).reshape(-1, 2), b.astype(np.float32).reshape(-1, 2)
    smaller = min(abs(cv2.contourArea(pa)), abs(cv2.contourArea(pb)))
    if smaller <= 0:
        return 0.0
    inter, _ = cv2.intersectConvexConvex(pa, pb)
    return float(min(1.0, max(0.0, inter) / smaller))


def evidence(inliers: int, required: int = VERIFICATION_PARAMS.min_inliers) -> float:
    """Verified-match evidence in (0, 1]: 0.5 at the required inliers, 1.0 from 4× that."""
    if inliers < required:
        return 0.0
    return min(1.0, 0.5 + 0.5 * (inliers - required) / (3 * required))


def _dominant_levels(grey: np.ndarray, count: int = 2, tolerance: int = 10) -> list[int]:
    """The grey levels of the page and the card: the most common levels (more than ``tolerance`` / 2 apart)
    that are flat colours (most of the pixels within 12 of the level sit within 2 of it: a picture's smooth
    gradient with its noise spreads wider).  Another common level nearby is not counted as spread: a light
    feed's white cards on a 243 page, or a dark one's 42 card on a 30 page, made neither level flat (and no
    region found)."""
    hist = np.bincount(grey.reshape(-1), minlength=256).astype(np.int64)
    smooth = np.convolve(hist, np.ones(2 * 2 + 1, np.int64), mode="same")
    common_bar = 0.08 * grey.size  # a level holding this many pixels (±2 levels) is a common one
    common, rest = [], smooth.copy()  # every common level, however near another
    while len(common) < 8 and rest.max() >= common_bar:
        level = int(rest.argmax())
        common.append(level)
        rest[max(0, level - 4) : level + 5] = 0
    out: list[int] = []
    for _ in range(4 * count):
        level = int(smooth.argmax())
        if smooth[level] < common_bar or len(out) >= count:
            break
        lo = max(0, level - 12)
        around = hist[lo : level + 13].copy()
        for other in common:
            if abs(other - level) > 4:
                around[max(0, other - 2 - lo) : max(0, other + 3 - lo)] = 0
        if smooth[level] >= 0.6 * around.sum():
            out.append(level)
        smooth[max(0, level - tolerance // 2) : level + tolerance // 2 + 1] = 0  # a card a few levels off the page is a level too
    return out


def _gutters(background: np.ndarray, axis: int, min_cell: int) -> list[tuple[int, int]]:
    """Spans along ``axis`` (0: columns, 1: rows) of a block separated by gutters: runs of lines that are
    nearly all page or card colour (the gap between the cells of an image grid); one span when none."""
    flat = background.mean(axis=axis) >= 0.85
    spans, start = [], None
    for i, gutter in enumerate([*flat.tolist(), True]):
        if not gutter and start is None:
            start = i
        elif gutter and start is not None:
            if i - start >= min_cell:
                spans.append((start, i))
            start = None
    return spans or [(0, len(flat))]


def grey_of(img: Image.Image) -> np.ndarray:
    """The picture's grey pixels at full size (computed once per query for :func:`picture_regions` and
    :func:`describe_region`)."""
    from retrieval.images.hashes import flatten_grey

    return np.asarray(flatten_grey(img), dtype=np.uint8)


def _shrunk(grey: np.ndarray, side: int) -> np.ndarray:
    cv2 = _cv2()
    h, w = grey.shape
    if max(h, w) <= side:
        return grey
    scale = side / max(h, w)
    return cv2.resize(grey, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)


def _tilted(component: np.ndarray, degrees: float = 1.0) -> bool:
    """The block's outline (its smallest enclosing rectangle) is turned by more than ``degrees``: a
    rotated screenshot, whose gutters are not straight lines of the copy."""
    cv2 = _cv2()
    contours, _ = cv2.findContours(component.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    if not contours:
        return False
    points = max(contours, key=len)
    angle = float(cv2.minAreaRect(points)[2]) % 90.0
    return min(angle, 90.0 - angle) > degrees


def picture_regions(img: Image.Image | np.ndarray) -> list[tuple[float, float, float, float]]:
    """Boxes (fractions of the picture: x0, y0, x1, y1) of the pictures a screenshot shows: the meme of a
    post, each cell of an image grid, the cover of a card.  Found in a grey copy: pixels off the page and
    card colours, opened (text strokes and thin lines go), connected blocks of a useful size, a block cut
    along its gutters (lines nearly all page or card colour) into cells; a turned block that no gutter
    cuts and that is shaped like a row of three or a 2×2 grid also gives its thirds or quarters (a rotated
    grid's gutters are not straight lines of the copy).  Empty when the picture has no plain page colour."""
    cv2 = _cv2()

    arr = _shrunk(img if isinstance(img, np.ndarray) else grey_of(img), FEATURE_PARAMS.region_work_side)
    h, w = arr.shape
    if min(h, w) < 48:
        return []
    levels = _dominant_levels(arr)
    if not levels:
        return []
    grey = arr.astype(np.int16)
    background = np.zeros(arr.shape, bool)
    for level in levels:
        background |= np.abs(grey - level) <= 10
    mask = (~background).astype(np.uint8)
    k = max(3, (min(h, w) // 100) | 1)
    mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, np.ones((k, k), np.uint8))
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=4)
    min_side = max(24, min(h, w) // 10)
    boxes: list[tuple[int, int, int, int]] = []
    for i in range(1, n):
        x, y, bw, bh, area = (int(v) for v in stats[i])
        if bw < min_side or bh < min_side or area < 0.35 * bw * bh:
            continue
        cells = []
        for cx0, cx1 in _gutters(background[y : y + bh, x : x + bw], 0, min_side):
            for ry0, ry1 in _gutters(background[y : y + bh, x + cx0 : x + cx1], 1, min_side):
                cells.append((x + cx0, y + ry0, x + cx1, y + ry1))
        boxes.extend(cells)
        if len(cells) == 1 and bw * bh >= 0.08 * w * h and _tilted(labels[y : y + bh, x : x + bw] == i):  # a rotated grid?
            if bw >= 2.2 * bh:
                boxes.extend((x + j * bw // 3, y, x + (j + 1) * bw // 3, y + bh) for j in range(3))
            elif 0.7 <= bw / bh <= 1.4:
                boxes.extend((x + a * bw // 2, y + b * bh // 2, x + (a + 1) * bw // 2, y + (b + 1) * bh // 2)
                             for b in range(2) for a in range(2))
    boxes.sort(key=lambda b: -(b[2] - b[0]) * (b[3] - b[1]))
    out = []
    for x0, y0, x1, y1 in boxes[:FEATURE_PARAMS.max_regions]:
        if (x1 - x0) * (y1 - y0) > 0.7 * w * h:
            continue  # the picture is this block: the whole picture's description covers it
        out.append((x0 / w, y0 / h, x1 / w, y1 / h))
    return out


def describe_region(
    img: Image.Image | np.ndarray, box: tuple[float, float, float, float],
) -> tuple[Features, tuple[float, float, float, float]]:
    """One picture region of the query (``box`` in fractions, grown by 2 % a side), described at
    :attr:`FeatureParams.region_side` (a small cell enlarged up to :attr:`FeatureParams.region_max_upscale`×: its template then meets the
    stored keypoints of its own scale) with :attr:`FeatureParams.region_features` keypoints; the features (they keep their pixels
    for :func:`mirrored_query`) and the box described (fractions).  ``img``: the picture or its :func:`grey_of`."""
    cv2 = _cv2()
    grey = img if isinstance(img, np.ndarray) else grey_of(img)
    H, W = grey.shape
    x0, y0, x1, y1 = box
    gx, gy = 0.02 * (x1 - x0), 0.02 * (y1 - y0)
    left, top = int(max(0.0, x0 - gx) * W), int(max(0.0, y0 - gy) * H)
    right, bottom = max(left + 1, int(min(1.0, x1 + gx) * W)), max(top + 1, int(min(1.0, y1 + gy) * H))
    grown = (left / W, top / H, right / W, bottom / H)
    crop = grey[top:bottom, left:right]
    longest = max(crop.shape)
    side = int(min(FEATURE_PARAMS.region_side, longest * FEATURE_PARAMS.region_max_upscale))
    if side != longest:
        scale = side / longest
        crop = cv2.resize(crop, (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale))),
                          interpolation=cv2.INTER_LINEAR if scale > 1 else cv2.INTER_AREA)
    h, w = crop.shape
    if min(h, w) < 32:
        return Features.empty(w, h), grown
    orb = _orb(cv2, FEATURE_PARAMS.region_features)
    keypoints, descriptors = orb.detectAndCompute(np.ascontiguousarray(crop), None)
    if descriptors is None or not keypoints:
        return Features.empty(w, h), grown
    out = Features(np.array([k.pt for k in keypoints], dtype=np.float32), descriptors.astype(np.uint8), w, h)
    object.__setattr__(out, "_source", (np.ascontiguousarray(crop), keypoints))  # for :func:`mirrored_query`
    return out, grown
