"""Bulk import into one collection: indexing deferred to the end, a free-disk guard, honest counts.

:class:`BulkWriter` wraps a :class:`~culturebase.store.base.Collection`:

* on enter it calls ``begin_bulk()`` (a Qdrant server stops indexing: ``indexing_threshold=0``;
  Qdrant Edge never indexes in the background, so writes already go to plain appendable
  segments), on a clean exit ``end_bulk()`` (flush, then the HNSW graphs and quantized
  copies are built once instead of being rebuilt while segments grow);
* on the embedded store, every ``segment_points`` points written (the collection's layout,
  ``KAR_SEGMENT_POINTS``) it builds their indexes as one segment (``build_segment()``) and
  the engine does not merge segments beyond that size: the index build's memory is that of
  one segment, not of the whole dump;
* before every batch it checks the free space of the store's disk: the embedded engine writes
  through memory-mapped files, and a write into a full file system kills the process
  (SIGBUS) instead of raising.  When less than ``min_free_bytes`` plus twice the largest
  growth seen per batch is left, the import stops with :class:`BulkImportError`, whose
  ``stored`` is the number of points written so far (all flushed, so the store opens);
* a batch the engine rejects stops the import the same way (never retried, never dropped
  silently).

Points have deterministic ids, so rerunning an import after a failure or a SIGKILL
overwrites what was stored and completes without duplicates.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from culturebase.settings import setting_default
from culturebase.store.base import Collection, PointRecord, StoreError

log = logging.getLogger(__name__)
#: the free-disk guard when none is given: the default of KAR_MIN_FREE_DISK_MB
DEFAULT_MIN_FREE_BYTES: int = setting_default("min_free_disk_mb") * 2**20


class BulkImportError(StoreError):
    """A bulk import stopped; ``stored`` points were written (and flushed) before it did."""

    def __init__(self, message: str, stored: int) -> None:
        super().__init__(message)
        self.stored = stored


def _free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


class BulkWriter:
    """Batched writes into a collection with deferred indexing and a free-disk guard."""

    def __init__(
        self,
        collection: Collection,
        total: int | None = None,
        disk_path: Path | None = None,
        min_free_bytes: int = DEFAULT_MIN_FREE_BYTES,
        progress: Callable[[int], None] | None = None,
        what: str = "points",
    ) -> None:
        self.collection = collection
        self.total = total
        self.disk_path = disk_path
        self.min_free_bytes = min_free_bytes
        self.progress = progress
        self.what = what
        self.stored = 0
        self.started = time.perf_counter()
        self._max_growth = 0
        self._since_segment = 0
        self.segments_built = 0

    # -- context ------------------------------------------------------------------------
    def __enter__(self) -> "BulkWriter":
        self.collection.begin_bulk()
        self.started = time.perf_counter()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.collection.end_bulk()
            return
        try:  # what was stored stays stored: persist it (and, on a server, switch indexing back on)
            self.collection.flush()
            if not isinstance(exc, BulkImportError) or self.disk_path is None:
                self.collection.end_bulk()
        except Exception as cleanup:  # pragma: no cover - best effort after a failure
            log.warning("after a failed bulk import: %s", cleanup)

    # -- writes -------------------------------------------------------------------------
    def _of_total(self) -> str:
        return f"{self.stored} of {self.total}" if self.total is not None else str(self.stored)

    def _check_disk(self) -> int | None:
        if self.disk_path is None:
            return None
        free = _free_bytes(self.disk_path)
        needed = self.min_free_bytes + 2 * self._max_growth
        if free < needed:
            self.collection.flush()
            raise BulkImportError(
                f"import stopped: the disk holding {self.disk_path} is nearly full ({free / 2**20:.0f} MiB free, "
                f"{needed / 2**20:.0f} MiB needed to go on: KAR_MIN_FREE_DISK_MB plus room for the next batch); "
                f"stored {self._of_total()} {self.what} so far, all kept and searchable; free space and rerun the "
                "import (stored points are overwritten, not duplicated)",
                self.stored,
            )
        return free

    def write(self, points: Sequence[PointRecord]) -> None:
        """Upsert one batch, or raise :class:`BulkImportError` with the count stored so far."""
        if not points:
            return
        before = self._check_disk()
        try:
            self.collection.upsert(points)
        except StoreError:
            raise
        except Exception as exc:
            raise self._stopped(
                f"the store refused a batch of {len(points)} {self.what} ({exc}); "
                f"stored {self._of_total()} {self.what} so far; rerun the import to complete it"
            ) from exc
        if before is not None:
            self._max_growth = max(self._max_growth, before - _free_bytes(self.disk_path))  # type: ignore[arg-type]
        self.stored += len(points)
        self._since_segment += len(points)
        segment = getattr(self.collection, "segment_points", None)
        if segment is not None and self._since_segment >= segment:
            self._build_segment()
        if self.progress is not None:
            self.progress(len(points))

    def _build_segment(self) -> None:
        """Build the indexes of the points written since the last segment; a build the engine refuses (a
        nearly full disk) stops the import like a refused batch, with everything written kept."""
        try:
            self.collection.build_segment()
        except StoreError:
            raise
        except Exception as exc:
            where = f"the disk holding {self.disk_path} is nearly full: " if "space" in str(exc).lower() and self.disk_path else ""
            raise self._stopped(
                f"{where}the store could not build the index of the last {self._since_segment} {self.what} ({exc}); "
                f"stored {self._of_total()} {self.what} so far, all kept; free disk space and rerun the import "
                "(stored points are overwritten, not duplicated)"
            ) from exc
        self._since_segment = 0
        self.segments_built += 1

    def _stopped(self, why: str) -> BulkImportError:
        """The error that stops the import, after flushing what was written (kept and searchable)."""
        try:
            self.collection.flush()
        except Exception:  # pragma: no cover
            pass
        return BulkImportError(f"import stopped: {why}", self.stored)

    def rate(self) -> float:
        """Points per second so far."""
        elapsed = time.perf_counter() - self.started
        return self.stored / elapsed if elapsed > 0 else 0.0
