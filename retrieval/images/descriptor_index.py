"""Local descriptors of every entity image frame in one faiss binary index: candidates by votes.

The image route's hashes read the *whole* picture, so a template that fills a quarter of a
screenshot, one cell of a grid or a quote post inside a post is not near any hash.  Local
descriptors are: each entity image frame gives up to :attr:`DescriptorParams.per_image` ORB descriptors (256-bit,
the ones :mod:`retrieval.images.features` stores for verification, spread over the picture by a
grid) and up to :attr:`DescriptorParams.per_image_coarse` of its coarse ones (found in a 200 px copy, for a template
shown small), all held in one faiss binary index (Hamming distance), each beside its *mirrored code*
(the keypoint mirrored and described in the flipped picture: what a mirrored repost of the frame gives,
under the frame's id | :data:`MIRRORED`).  One search serves both: :meth:`DescriptorIndex.vote_both`
counts the votes for each kind apart.  A query's descriptors, taken
over the whole picture with no layout detection in front, each look up their nearest
neighbours; a neighbour within :attr:`DescriptorParams.max_hamming` bits is one vote for its image (a query
descriptor votes at most once, for the image of its nearest neighbour, when that neighbour is
distinctive: nearer than :attr:`DescriptorParams.ratio` × the nearest descriptor of any other image).
Images are ranked by votes over the square root of their descriptor count (an image with many descriptors collects chance votes) and the best
become candidates for the geometric check (:func:`retrieval.images.features.verify`), which
stays the judge.

Index kinds: below :attr:`DescriptorParams.ivf_from` descriptors an exact ``IndexBinaryFlat`` behind an id map;
from there an ``IndexBinaryIVF`` (``nlist`` ≈ √(2n) lists, trained on the descriptors held,
searched with :func:`probes_for` lists: 3, 2 from 2,500 lists), trained again when it has grown
:attr:`DescriptorParams.retrain_growth`× since (the lists stay near √(n/2) codes: lists that grew 8× past their training cost the search twice the scanned codes).
A retrain trains its centroids and fills the new lists outside the lock (queries keep searching the old index
meanwhile); the lock is held only to swap it in (:attr:`DescriptorIndex.last_retrain` says how long each took).  Ids are image
*slots*: every descriptor of one frame carries its slot's id, so removing an entity removes its
slots' ids.  The index and its slot table are written to ``root`` (``index.faissb`` and
``slots.json``, atomically, beside the per-image feature files) and read back at start; one that
is missing or does not match its slot table is rebuilt from the stored features.  A large IVF
(from :attr:`DescriptorParams.mmap_from` descriptors) is memory-mapped read-only at start, so a service that only
queries holds its lists as file-backed pages; the first write reads it into memory.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retrieval.images.descriptor_support import single_threaded, spread

if TYPE_CHECKING:
    from retrieval.images.features import MirroredCodes
    from retrieval.images.query_threads import QueryThreads

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class DescriptorParams:
    """The descriptor index's tuned values.  Provenance: *tuning* is :data:`~retrieval.images.provenance.TUNING_RUN`
    (votes, top-1 and CPU on the tuning seed), *scale* is :data:`~retrieval.images.provenance.SCALE_RUN` (the IVF's lists, retrains and probes at 20,000 images; the
    ``BENCH_VARIANTS`` of that run compare the alternatives named)."""

    #: descriptors indexed per image (an animation's frames share them, never fewer than ``per_frame_min`` a frame),
    #: spread over the picture by a grid; the rest stay for verification (chosen by: tuning)
    per_image: int = 256
    per_frame_min: int = 96
    #: beside them, up to this many of the image's *coarse* keypoints (found in its small copy:
    #: :attr:`retrieval.images.features.FeatureParams.coarse_side`), never fewer than ``coarse_frame_min`` a frame:
    #: what a template shown in one cell of a grid votes with (chosen by: tuning, grid_narrow)
    per_image_coarse: int = 96
    coarse_frame_min: int = 32
    #: an IVF index of at least this many descriptors is memory-mapped read-only when loaded (the service reads it
    #: from the page cache); the first write loads it into memory (chosen by: scale, resident memory)
    mmap_from: int = 1_000_000
    #: a query descriptor votes for an image when a descriptor of it is within this many bits of 256 (chosen by: tuning)
    max_hamming: int = 64
    #: neighbours looked up per query descriptor (the nearest one of another image is the ratio test's reference);
    #: both kinds of code (a frame's own, its mirrored ones) share them: 16 found two narrow-grid cells fewer at the
    #: same CPU (chosen by: tuning)
    neighbours: int = 8
    #: a vote counts when the nearest neighbour is nearer than this share of the nearest one of another image
    #: (chosen by: tuning)
    ratio: float = 0.75
    #: from this many descriptors the index is an IVF (below: exact search) (chosen by: scale)
    ivf_from: int = 50_000
    #: IVF lists searched per query descriptor: votes are counted over hundreds of query descriptors, so a neighbour
    #: missed now and then costs a vote, not the candidate; with lists kept near √(n/2) codes by retraining, 3 probes
    #: found more small grid cells than 2 at about the same CPU (chosen by: tuning and scale)
    nprobe: int = 3
    #: an IVF of at least this many lists (≈ 3.1 M descriptors at training) is searched with ``nprobe_large`` probes:
    #: each probe scans ≈ 1,900 codes there, and a 3rd probe cost ×1.15 p50 / ×1.19 p95 of the route's CPU for no
    #: top-1 (chosen by: scale)
    nprobe_large_from: int = 2_500
    nprobe_large: int = 2
    #: the IVF is trained again when it holds this many times the descriptors it was trained on (lists that grew 8×
    #: past their training made scanning them half the search) (chosen by: scale)
    retrain_growth: int = 2
    #: lists = √(nlist_cost · nlist_probes · n) at training (≈ 1,000 codes a list at 1.8 M descriptors);
    #: ``nlist_cost`` is what scanning one listed code costs over comparing one centroid (chosen by: scale)
    nlist_cost: float = 1.0
    nlist_probes: int = 2
    #: centroids are trained on at most this many codes a list and this many in all (faiss's k-means costs
    #: sample × lists): 40, just above the 39 faiss asks for, trained in ×0.57 of 64's time with lists as even
    #: (chosen by: scale)
    train_per_list: int = 40
    train_max: int = 262_144
    #: k-means iterations of a retrain (faiss's IVF default, made explicit): 25 trained ×2.4 as long for the same
    #: top-1 (chosen by: scale)
    train_iterations: int = 10
    #: a retrain of at least this many lists (≈ 8.4 M descriptors) fills them through a coarse quantizer over its
    #: centroids (:func:`coarse_quantizer`): each code is compared with the √lists·``fill_coarse_per`` coarse
    #: centroids and the centroids of its ``fill_probes`` nearest coarse lists, not with every centroid (0: every
    #: centroid); 98.2 % of codes reach a nearest centroid in ×0.52 of the time, the same top-1.  Queries probe
    #: through the exact quantizer either way (chosen by: scale)
    fill_coarse_from: int = 4096
    fill_coarse_per: float = 2.0
    fill_probes: int = 8
    #: a search split over a query's threads (:class:`~retrieval.images.query_threads.QueryThreads`) gives each at
    #: least this many descriptors (fewer are not worth a thread switch) (chosen by: tuning, ``--query-threads 2``)
    split_rows: int = 256


PARAMS = DescriptorParams()

CODE_BYTES = 32
#: the id bit of a frame's mirrored codes (its slot's id | MIRRORED): what a mirrored repost of the frame votes for
MIRRORED = 1 << 40
#: 2: coarse keypoints indexed beside the fine ones; 3: each frame's mirrored codes beside its own
FORMAT = 3


@dataclass(frozen=True)
class ImageKey:
    """One indexed entity image frame."""

    entity_id: str
    sha256: str
    frame: int
    language: str = ""


@dataclass(frozen=True)
class Vote:
    """An image frame's share of the query's descriptors: ``votes`` query descriptors found one of its
    ``descriptors`` within :attr:`DescriptorParams.max_hamming`; ``score`` = votes / √descriptors."""

    key: ImageKey
    votes: int
    descriptors: int
    #: indices (into the query's descriptors) of the descriptors that voted for it
    voters: tuple[int, ...] = ()

    @property
    def score(self) -> float:
        return self.votes / math.sqrt(max(1, self.descriptors))


def probes_for(nlist: int) -> int:
    """IVF lists to search per query descriptor in an index of ``nlist`` lists: :attr:`DescriptorParams.nprobe`, and
    :attr:`DescriptorParams.nprobe_large` from :attr:`DescriptorParams.nprobe_large_from` lists."""
    return PARAMS.nprobe_large if nlist >= PARAMS.nprobe_large_from else PARAMS.nprobe


def coarse_quantizer(exact, nlist: int):
    """An IVF over a trained IVF's ``nlist`` centroids (√nlist · :attr:`DescriptorParams.fill_coarse_per` lists,
    :attr:`DescriptorParams.fill_probes` probed) that answers the fill's nearest-centroid lookups with ids of the exact quantizer's centroids."""
    import faiss

    centroids = faiss.vector_to_array(faiss.downcast_IndexBinary(exact).xb).reshape(nlist, CODE_BYTES)
    inner = faiss.IndexBinaryFlat(CODE_BYTES * 8)
    lists = max(8, min(nlist // 16, int(math.sqrt(nlist) * PARAMS.fill_coarse_per)))
    coarse = faiss.IndexBinaryIVF(inner, CODE_BYTES * 8, lists)
    coarse.own_fields = True
    inner.this.disown()
    coarse.cp.min_points_per_centroid = 1  # (a few dozen centroids a list is all there is to train on)
    coarse.train(centroids)
    coarse.add(centroids)  # ids 0..nlist-1, in the exact quantizer's order
    coarse.nprobe = PARAMS.fill_probes
    return coarse


def _fill(ivf, codes: np.ndarray, ids: np.ndarray, coarse) -> None:
    """Fill a trained IVF's lists with these (code, id) rows, each code's list named by ``coarse``
    (:func:`coarse_quantizer`) when given, else by the IVF's exact quantizer, which stays the one queries probe."""
    exact = ivf.quantizer
    if coarse is not None:
        ivf.quantizer = coarse
    try:
        ivf.add_with_ids(np.ascontiguousarray(codes), ids)
    finally:
        ivf.quantizer = exact


class DescriptorIndex:
    """Binary descriptors of entity image frames in faiss; :meth:`vote` shortlists frames for a query."""

    def __init__(
        self, root: Path | str | None, per_image: int = PARAMS.per_image, ivf_from: int = PARAMS.ivf_from, nprobe: int | None = None,
        mmap_from: int = PARAMS.mmap_from, per_image_coarse: int = PARAMS.per_image_coarse,
    ) -> None:
        self.root = Path(root) if root is not None else None
        self.per_image = per_image
        self.per_image_coarse = per_image_coarse
        self.mmap_from = mmap_from
        self.mapped = False
        self.ivf_from = ivf_from
        #: probes of an IVF search; None: by the index's lists (:func:`probes_for`)
        self.nprobe = nprobe
        self._lock = threading.RLock()
        self._index = None
        self._slots: list[ImageKey | None] = []  # slot -> key (None: a freed slot)
        self._counts: list[int] = []  # slot -> descriptors indexed
        self._mirror_counts: list[int] = []  # slot -> mirrored codes indexed (0: described before they were stored)
        self._mirror_total = 0
        self._slot_of: dict[tuple[str, str, int], int] = {}
        self._free: list[int] = []
        self._trained_at = 0
        self._dirty = False
        self.loaded = False
        #: bumped by every change of the indexed codes (a retrain built outside the lock checks it before the swap)
        self._generation = 0
        self._retraining = False
        #: the last retrain's figures: descriptors, lists, seconds training, filling, and holding the lock (wall), and
        #: the calling thread's CPU seconds training and filling
        self.last_retrain: dict[str, float] = {}
        #: every retrain's figures in this process (for the bench and the log)
        self.retrains: list[dict[str, float]] = []

    # -- state ----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Descriptors indexed."""
        return int(self._index.ntotal) if self._index is not None else 0

    @property
    def images(self) -> int:
        """Image frames indexed."""
        return len(self._slot_of)

    @property
    def kind(self) -> str:
        import faiss

        return "ivf" if isinstance(self._index, faiss.IndexBinaryIVF) else "flat"

    def memory_bytes(self) -> int:
        """What the index holds in anonymous memory: codes and ids (plus IVF centroids); a mapped index
        holds only its centroids (its lists are file-backed pages)."""
        extra = 0
        if self._index is not None and self.kind == "ivf":
            extra = int(self._index.nlist) * CODE_BYTES
        return (0 if self.mapped else self.size * (CODE_BYTES + 8)) + extra

    @property
    def mirrored_frames(self) -> int:
        """Frames indexed with their mirrored codes (the others are found only as they are, until re-described)."""
        return sum(1 for k, c in zip(self._slots, self._mirror_counts) if k is not None and c)

    def per_frame(self, frames: int) -> int:
        """Descriptors indexed for each of an image's ``frames`` frames."""
        return max(PARAMS.per_frame_min, self.per_image // max(1, frames))

    def coarse_per_frame(self, frames: int) -> int:
        """Coarse descriptors indexed for each of an image's ``frames`` frames (0 when switched off)."""
        if self.per_image_coarse <= 0:
            return 0
        return max(PARAMS.coarse_frame_min, self.per_image_coarse // max(1, frames))

    def _writable(self) -> None:
        """A mapped (read-only) index is read into memory before its first change."""
        import faiss

        if self.mapped and self.root is not None:
            self._index = faiss.read_index_binary(str(self._paths()[0]))
            self._index.nprobe = self.probes(self._index)
            self.mapped = False

    def has(self, key: ImageKey) -> bool:
        return (key.entity_id, key.sha256, key.frame) in self._slot_of

    def _flat(self):
        import faiss

        return faiss.IndexBinaryIDMap2(faiss.IndexBinaryFlat(CODE_BYTES * 8))

    def _ensure(self) -> None:
        if self._index is None:
            self._index = self._flat()

    # -- add / remove ---------------------------------------------------------------------
    def add(
        self, key: ImageKey, points: np.ndarray, descriptors: np.ndarray, width: int, height: int, limit: int | None = None,
        coarse: int = 0, coarse_limit: int | None = None, mirrored: "MirroredCodes | None" = None,
    ) -> int:
        """Index up to ``limit`` (default :attr:`per_image`) of one frame's fine descriptors and up to
        ``coarse_limit`` (default :attr:`per_image_coarse`) of its ``coarse`` ones (the last ``coarse`` rows),
        each set spread over the picture (replacing what the frame had), and the same keypoints' ``mirrored``
        codes (row-aligned with ``descriptors``; under the slot's id | :data:`MIRRORED`); returns how many of its own."""
        with self._lock:
            self._ensure()
            self._writable()
            self._remove_slots([s for s in [self._slot_of.get((key.entity_id, key.sha256, key.frame))] if s is not None])
            fine = len(points) - coarse
            chosen = spread(points[:fine], limit or self.per_image, width, height) if fine > 0 else np.zeros(0, np.int64)
            budget = self.per_image_coarse if coarse_limit is None else coarse_limit
            if coarse > 0 and budget > 0:
                chosen = np.concatenate([chosen, fine + spread(points[fine:], budget, width, height)])
            codes = np.ascontiguousarray(descriptors[chosen], dtype=np.uint8) if len(chosen) else np.zeros((0, CODE_BYTES), np.uint8)
            flipped = np.zeros((0, CODE_BYTES), np.uint8)
            if mirrored is not None and len(chosen):
                rows = chosen[mirrored.ok[chosen]]
                flipped = np.ascontiguousarray(mirrored.descriptors[rows], dtype=np.uint8)
            slot = self._free.pop() if self._free else len(self._slots)
            if slot == len(self._slots):
                self._slots.append(key)
                self._counts.append(len(codes))
                self._mirror_counts.append(len(flipped))
            else:
                self._slots[slot], self._counts[slot], self._mirror_counts[slot] = key, len(codes), len(flipped)
            self._mirror_total += len(flipped)
            self._slot_of[(key.entity_id, key.sha256, key.frame)] = slot
            if len(codes) or len(flipped):
                single_threaded()
                self._index.add_with_ids(np.concatenate([codes, flipped]),
                                         np.concatenate([np.full(len(codes), slot, np.int64), np.full(len(flipped), slot | MIRRORED, np.int64)]))
            self._dirty = True
            self._generation += 1
            due = self._retrain_due()
        if due:
            self.retrain()
        return len(codes)

    def remove_entities(self, entity_ids: Iterable[str]) -> int:
        """Drop every frame of these entities; returns the frames dropped."""
        wanted = set(entity_ids)
        with self._lock:
            slots = [s for (eid, _, _), s in self._slot_of.items() if eid in wanted]
            self._remove_slots(slots)
            return len(slots)

    def remove_images(self, keys: Iterable[tuple[str, str, int]]) -> int:
        with self._lock:
            slots = [self._slot_of[k] for k in keys if k in self._slot_of]
            self._remove_slots(slots)
            return len(slots)

    def _remove_slots(self, slots: Sequence[int]) -> None:
        import faiss

        if not slots:
            return
        self._writable()
        if self._index is not None and self._index.ntotal:
            single_threaded()
            ids = np.array(slots, dtype=np.int64)
            self._index.remove_ids(faiss.IDSelectorBatch(np.concatenate([ids, ids | MIRRORED])))
        for s in slots:
            key = self._slots[s]
            if key is not None:
                self._slot_of.pop((key.entity_id, key.sha256, key.frame), None)
            self._slots[s] = None
            self._counts[s] = 0
            self._mirror_total -= self._mirror_counts[s]
            self._mirror_counts[s] = 0
            self._free.append(s)
        self._dirty = True
        self._generation += 1

    def keys(self) -> list[ImageKey]:
        return [k for k in self._slots if k is not None]

    # -- IVF --------------------------------------------------------------------------------
    def _all_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (code, id) the index holds (to train a new IVF)."""
        import faiss

        index = self._index
        if isinstance(index, faiss.IndexBinaryIVF):
            inv = index.invlists
            codes, ids = [], []
            for lst in range(index.nlist):
                n = inv.list_size(lst)
                if n:
                    codes.append(faiss.rev_swig_ptr(inv.get_codes(lst), n * CODE_BYTES).copy().reshape(n, CODE_BYTES))
                    ids.append(faiss.rev_swig_ptr(inv.get_ids(lst), n).copy())
            if not codes:
                return np.zeros((0, CODE_BYTES), np.uint8), np.zeros(0, np.int64)
            return np.concatenate(codes), np.concatenate(ids)
        flat = faiss.downcast_IndexBinary(index.index)
        codes = faiss.vector_to_array(flat.xb).reshape(-1, CODE_BYTES)
        ids = faiss.vector_to_array(index.id_map).astype(np.int64)
        return codes, ids

    @staticmethod
    def _canonical(codes: np.ndarray, ids: np.ndarray, slots: Sequence[ImageKey | None]) -> tuple[np.ndarray, np.ndarray]:
        """The (code, id) rows in an order that depends only on what is held, not on the order it was added in or
        on the lists a previous training put it in: by a 64-bit mix of the code's bits, then by the frame's key
        (entity id, image, frame; not its slot, which depends on the order of adds).  A retrain samples from
        this order and fills its lists in it, so an index rebuilt or grown another way trains the same
        centroids and breaks distance ties the same way (a frame's mirrored codes after its own)."""
        if not len(codes):
            return codes, ids
        words = np.ascontiguousarray(codes).view("<u8").reshape(len(codes), CODE_BYTES // 8)
        mixed = np.full(len(codes), 0x9E3779B97F4A7C15, dtype=np.uint64)
        for w in range(words.shape[1]):  # xor-multiply-shift over the four words (uint64 wraps)
            mixed = (mixed ^ words[:, w]) * np.uint64(0xBF58476D1CE4E5B9)
            mixed ^= mixed >> np.uint64(31)
        keyed = sorted((k.entity_id, k.sha256, k.frame, s) for s, k in enumerate(slots) if k is not None)
        rank = np.full(len(slots) + 1, len(keyed), dtype=np.int64)
        rank[[s for *_, s in keyed]] = np.arange(len(keyed))
        of_id = 2 * rank[np.clip(ids & (MIRRORED - 1), 0, len(slots))] + (ids >= MIRRORED)
        order = np.lexsort((of_id, mixed))
        return codes[order], ids[order]

    def _retrain_due(self) -> bool:
        n = self.size
        if self._retraining or n < self.ivf_from:
            return False
        return not self._trained_at or n >= PARAMS.retrain_growth * self._trained_at

    def probes(self, index=None) -> int:
        """IVF lists searched per query descriptor: the ``nprobe`` given, else :func:`probes_for` the index's lists."""
        index = self._index if index is None else index
        return self.nprobe or probes_for(int(getattr(index, "nlist", 0) or 0))

    def lists_for(self, n: int) -> int:
        """IVF lists for ``n`` descriptors: a query descriptor is compared with every centroid, then with the
        codes of its probed lists; √(nlist_cost · nlist_probes · n) makes that least for ``nlist_probes`` probes."""
        return int(max(64, min(65_536, math.sqrt(PARAMS.nlist_cost * PARAMS.nlist_probes * n))))

    def retrain(self) -> dict[str, float]:
        """Train the IVF's centroids again on the descriptors held and refill its lists. The centroids are
        trained and the lists filled outside the lock (queries search the old index meanwhile); under the lock
        the new index is swapped in, after adding again what changed since the snapshot (another writer's
        codes). The training sample and the fill order are :meth:`_canonical`: the same codes give the same index
        whatever order they came in. Returns (and keeps in :attr:`last_retrain`) the figures: descriptors, lists, seconds."""
        import faiss

        with self._lock:
            if self._retraining or self._index is None:
                return {}
            self._retraining = True
            codes, ids = self._all_codes()
            slots = list(self._slots)
            generation = self._generation
        try:
            t0, c0 = time.perf_counter(), time.thread_time()
            n = len(codes)
            nlist = self.lists_for(n)
            if n < nlist:  # too few descriptors for the smallest IVF: the index stays as it is
                return {}
            single_threaded()
            quantizer = faiss.IndexBinaryFlat(CODE_BYTES * 8)
            ivf = faiss.IndexBinaryIVF(quantizer, CODE_BYTES * 8, nlist)
            ivf.own_fields = True
            quantizer.this.disown()
            # the same sample and fill order whatever order the codes came in (:meth:`_canonical`): the first
            # codes of a well-mixed order are a uniform sample, and the retrained index does not depend on history
            codes, ids = self._canonical(codes, ids, slots)
            sample = codes[: min(n, nlist * PARAMS.train_per_list, PARAMS.train_max)]
            ivf.cp.niter = PARAMS.train_iterations
            ivf.train(np.ascontiguousarray(sample))
            t1, c1 = time.perf_counter(), time.thread_time()
            coarse = coarse_quantizer(ivf.quantizer, nlist) if PARAMS.fill_coarse_from and nlist >= PARAMS.fill_coarse_from else None
            _fill(ivf, codes, ids, coarse)
            ivf.nprobe = self.probes(ivf)
            t2, c2 = time.perf_counter(), time.thread_time()
            with self._lock:
                if self._generation != generation:  # written meanwhile: the lists are filled again from what is held now
                    codes, ids = self._canonical(*self._all_codes(), self._slots)
                    ivf.reset()
                    _fill(ivf, codes, ids, coarse)
                self._index = ivf
                self.mapped = False
                self._trained_at = len(codes)
                self._dirty = True
                t3 = time.perf_counter()
        finally:
            with self._lock:
                self._retraining = False
        figures = {"descriptors": float(len(codes)), "lists": float(nlist), "train_s": round(t1 - t0, 3),
                   "fill_s": round(t2 - t1, 3), "locked_s": round(t3 - t2, 3),
                   # the calling thread's CPU (faiss threads, when it has any, are not counted)
                   "train_cpu_s": round(c1 - c0, 3), "fill_cpu_s": round(c2 - c1, 3)}
        self.last_retrain = figures
        self.retrains.append(figures)
        log.info("descriptor index: IVF with %d lists over %d descriptors (trained in %.1f s on %d, filled in %.1f s, "
                 "queries held %.3f s)", nlist, len(codes), t1 - t0, len(sample), t2 - t1, t3 - t2)
        return figures

    # -- query ------------------------------------------------------------------------------
    def vote(
        self, descriptors: np.ndarray, top: int = 8, language: str | None = None, neighbours: int | None = None,
        max_hamming: int = PARAMS.max_hamming, ratio: float = PARAMS.ratio,
    ) -> list[Vote]:
        """The ``top`` image frames with the most votes from these query descriptors (best first)."""
        return self.vote_many([descriptors], top, language, neighbours, max_hamming, ratio)[0]

    def vote_many(
        self, parts: Sequence[np.ndarray], top: int = 8, language: str | None = None, neighbours: int | None = None,
        max_hamming: int = PARAMS.max_hamming, ratio: float = PARAMS.ratio, threads: "QueryThreads | None" = None,
    ) -> list[list[Vote]]:
        """:meth:`vote` for several descriptor sets of one query (the whole picture, each picture region) in
        one faiss search; each set's votes are counted apart (``voters`` index into that set).  With
        ``threads``, the search's rows are split over them (at least :attr:`DescriptorParams.split_rows` a part): the same
        neighbours, found side by side."""
        return self.vote_both(parts, top, language, neighbours, max_hamming, ratio, threads)[0]

    def vote_both(
        self, parts: Sequence[np.ndarray], top: int = 8, language: str | None = None, neighbours: int | None = None,
        max_hamming: int = PARAMS.max_hamming, ratio: float = PARAMS.ratio, threads: "QueryThreads | None" = None,
    ) -> tuple[list[list[Vote]], list[list[Vote]]]:
        """:meth:`vote_many`, and from the same search each set's votes for the frames' *mirrored* codes (what
        the query shows mirrored). Each kind is counted among its own codes only: a query descriptor votes for
        the frame of its nearest code of that kind, against the nearest code of that kind of any other frame."""
        sizes = [len(p) for p in parts]
        neighbours = PARAMS.neighbours if neighbours is None else neighbours  # (read at call time: the bench's variants set it)
        with self._lock:
            if self._index is None or not self._index.ntotal or not sum(sizes):
                return [[] for _ in parts], [[] for _ in parts]
            q = np.ascontiguousarray(np.concatenate([p for p in parts if len(p)]), dtype=np.uint8)
            if self.kind == "ivf":
                self._index.nprobe = self.probes(self._index)
            index = self._index
            n_parts = min(threads.threads if threads is not None else 1, len(q) // PARAMS.split_rows)

            def search(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                single_threaded()  # in whichever thread runs it
                return index.search(rows, neighbours)

            if n_parts > 1 and threads is not None:  # each row's neighbours do not depend on the other rows
                found = threads.run([lambda c=c: search(c) for c in np.array_split(q, n_parts)])
                dist, ids = np.concatenate([d for d, _ in found]), np.concatenate([i for _, i in found])
            else:
                dist, ids = search(q)
            slots, counts, mirror_counts = self._slots, self._counts, self._mirror_counts
            any_mirrored = self._mirror_total > 0
        flipped = ids >= MIRRORED if any_mirrored else None
        if flipped is not None:
            ids = np.where(flipped, ids & (MIRRORED - 1), ids)  # slots again (-1 stays -1)
        out: list[list[Vote]] = []
        out_mirrored: list[list[Vote]] = []
        start = 0
        for n in sizes:
            part = slice(start, start + n)
            d, i = dist[part], ids[part]
            if flipped is None:
                out.append(self._tally(d, i, None, slots, counts, top, language, max_hamming, ratio) if n else [])
                out_mirrored.append([])
            else:
                kind = flipped[part]
                out.append(self._tally(d, i, (i >= 0) & ~kind, slots, counts, top, language, max_hamming, ratio) if n else [])
                out_mirrored.append(self._tally(d, i, kind, slots, mirror_counts, top, language, max_hamming, ratio) if n else [])
            start += n
        return out, out_mirrored

    @staticmethod
    def _tally(
        dist: np.ndarray, ids: np.ndarray, kind: np.ndarray | None, slots: list[ImageKey | None], counts: list[int], top: int,
        language: str | None, max_hamming: int, ratio: float,
    ) -> list[Vote]:
        # one vote per query descriptor, for the image of its nearest neighbour, when that neighbour is near
        # (≤ max_hamming) and distinctive: nearer than ``ratio`` × the nearest descriptor of any *other* image
        # (Lowe's ratio test across images: texture every picture has votes for none). ``kind``: the neighbours
        # of the kind counted (a frame's own codes or its mirrored ones; None: every found one), nearest first
        n = np.arange(len(ids))
        if kind is None:
            first, d1, has = ids[:, 0], dist[:, 0], ids[:, 0] >= 0
            other = (ids != first[:, None]) & (ids >= 0)
        else:
            at = kind.argmax(axis=1)  # the nearest of the kind (neighbours come nearest first)
            first, d1, has = ids[n, at], dist[n, at], kind[n, at]
            other = (ids != first[:, None]) & kind
        has_other = other.any(axis=1)
        d2 = np.where(has_other, dist[n, other.argmax(axis=1)], 256)
        ok = has & (d1 <= max_hamming) & (d1 < ratio * d2)
        hit = first[ok].astype(np.int64)
        if not len(hit):
            return []
        rows = np.nonzero(ok)[0]
        found, inverse, tally = np.unique(hit, return_inverse=True, return_counts=True)
        n_slots = len(slots)
        valid = found < n_slots
        if language:
            keep = np.array([bool(valid[i]) and slots[s] is not None and (not slots[s].language or slots[s].language == language)
                             for i, s in enumerate(found.tolist())], dtype=bool)
        else:
            keep = np.array([bool(valid[i]) and slots[s] is not None for i, s in enumerate(found.tolist())], dtype=bool)
        if not keep.any():
            return []
        desc = np.array([counts[s] if valid[i] else 1 for i, s in enumerate(found.tolist())], dtype=np.float64)
        score = np.where(keep, tally / np.sqrt(np.maximum(1.0, desc)), -1.0)
        # best first (score, then votes); ties in stored order of (entity id, frame) below
        order = np.lexsort((-tally, -score))
        picked = [int(i) for i in order[: 4 * top + 8] if keep[i]]
        out = [Vote(slots[int(found[i])], int(tally[i]), int(desc[i]), tuple(rows[inverse == i].tolist())) for i in picked]
        out.sort(key=lambda x: (-x.score, -x.votes, x.key.entity_id, x.key.frame))
        return out[:top]

    # -- disk -------------------------------------------------------------------------------
    def _paths(self) -> tuple[Path, Path]:
        assert self.root is not None
        return self.root / "index.faissb", self.root / "slots.json"

    def save(self) -> bool:
        """Write the index and its slot table (atomically) when they changed; False without a folder."""
        import faiss

        if self.root is None:
            return False
        with self._lock:
            if not self._dirty:
                return True
            self._ensure()
            self.root.mkdir(parents=True, exist_ok=True)
            index_path, slots_path = self._paths()
            tag = f".tmp{os.getpid()}.{threading.get_ident()}"
            tmp_index, tmp_slots = index_path.with_name(index_path.name + tag), slots_path.with_name(slots_path.name + tag)
            faiss.write_index_binary(self._index, str(tmp_index))
            table = {
                "format": FORMAT, "per_image": self.per_image, "per_image_coarse": self.per_image_coarse, "ntotal": int(self._index.ntotal), "trained_at": self._trained_at,
                "kind": self.kind,
                "slots": [None if k is None else [k.entity_id, k.sha256, k.frame, k.language, c, m]
                          for k, c, m in zip(self._slots, self._counts, self._mirror_counts)],
            }
            tmp_slots.write_text(json.dumps(table), "utf-8")
            tmp_index.replace(index_path)
            tmp_slots.replace(slots_path)
            self._dirty = False
            return True

    def load(self) -> bool:
        """Read the index written by :meth:`save`; False (and an empty index) when it is missing, torn or
        written for another descriptor budget: the caller rebuilds it from the stored features."""
        import faiss

        if self.root is None:
            return False
        index_path, slots_path = self._paths()
        with self._lock:
            try:
                table = json.loads(slots_path.read_text("utf-8"))
                big = int(table.get("ntotal") or 0) >= self.mmap_from and table.get("kind") == "ivf"
                index = faiss.read_index_binary(str(index_path), faiss.IO_FLAG_MMAP if big else 0)
            except (FileNotFoundError, ValueError, RuntimeError, OSError) as exc:
                if index_path.exists() or slots_path.exists():
                    log.warning("descriptor index in %s unreadable (%s): it is rebuilt from the stored features", self.root, exc)
                return False
            if (table.get("format") != FORMAT or table.get("per_image") != self.per_image
                    or table.get("per_image_coarse") != self.per_image_coarse or table.get("ntotal") != index.ntotal):
                log.warning("descriptor index in %s does not match its slot table: it is rebuilt", self.root)
                return False
            self._index = index
            self.mapped = big
            if isinstance(index, faiss.IndexBinaryIVF):
                index.nprobe = self.probes(index)
            self._slots, self._counts, self._mirror_counts, self._slot_of, self._free = [], [], [], {}, []
            for s, row in enumerate(table["slots"]):
                if row is None:
                    self._slots.append(None)
                    self._counts.append(0)
                    self._mirror_counts.append(0)
                    self._free.append(s)
                    continue
                key = ImageKey(str(row[0]), str(row[1]), int(row[2]), str(row[3]))
                self._slots.append(key)
                self._counts.append(int(row[4]))
                self._mirror_counts.append(int(row[5]))
                self._slot_of[(key.entity_id, key.sha256, key.frame)] = s
            self._mirror_total = sum(self._mirror_counts)
            self._trained_at = int(table.get("trained_at") or 0)
            self._dirty = False
            self._generation += 1
            self.loaded = True
            return True

    def clear(self) -> None:
        with self._lock:
            self._index = None
            self.mapped = False
            self._slots, self._counts, self._mirror_counts, self._slot_of, self._free = [], [], [], {}, []
            self._mirror_total = 0
            self._trained_at = 0
            self._dirty = True
            self._generation += 1
