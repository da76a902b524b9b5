"""What the descriptor index and the local features both use: faiss kept to the calling thread, and
keypoints spread over a grid of the picture."""

from __future__ import annotations

import threading

import numpy as np

#: faiss runs in the calling thread (searches, adds, retrains): one query's few hundred lookups are too small
#: to share, OpenMP threads spinning against the service's other requests cost more than they gain, and two
#: indexing processes that each trained with every core slowed each other several times over
SEARCH_THREADS = 1

_threads = threading.local()


def single_threaded() -> None:
    """faiss runs in the calling thread (:data:`SEARCH_THREADS`): searches, adds and retrains.  Set once per
    thread: OpenMP keeps the setting per thread, so each of a service's request threads (and an indexing
    job's) sets it for itself; set once per process, the others searched and trained with every core."""
    if not getattr(_threads, "set", False):
        import faiss

        faiss.omp_set_num_threads(SEARCH_THREADS)
        _threads.set = True


def spread(points: np.ndarray, count: int, width: int, height: int, grid: int = 8) -> np.ndarray:
    """Indices of at most ``count`` keypoints spread over a ``grid``×``grid`` partition of the picture
    (round robin over the cells, each cell in its stored order), so that a caption or a crop that hides
    part of the template leaves votes elsewhere."""
    n = int(points.shape[0])
    if n <= count:
        return np.arange(n)
    gx = np.clip((points[:, 0] * grid / max(1, width)).astype(np.int64), 0, grid - 1)
    gy = np.clip((points[:, 1] * grid / max(1, height)).astype(np.int64), 0, grid - 1)
    cell = gy * grid + gx
    order = np.argsort(cell, kind="stable")  # by cell, each cell in its stored order
    sorted_cells = cell[order]
    starts = np.searchsorted(sorted_cells, sorted_cells, side="left")
    depth = np.empty(n, np.int64)
    depth[order] = np.arange(n) - starts  # a keypoint's place within its cell
    # round robin: every cell's first keypoint, then every cell's second, ... (cells in order within a round)
    chosen = np.lexsort((cell, depth))[:count]
    return np.sort(chosen).astype(np.int64)
