"""Embedded backend: Qdrant Edge (the Qdrant engine in-process), one shard folder per collection.

The storage folder is single-process.  A lock file (``.lock``, holding the owner's pid and
command line) is taken with ``flock`` when the backend opens; a second opener gets a
:class:`StoreLockedError` that names the holder and what to do instead.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import sys
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# the metadata and generation files (and their fingerprint) live where a reader needs no store import
from culturebase.generation import GENERATION_FILE, META_FILE, collection_fingerprint  # noqa: F401
from culturebase.settings import setting_default
from culturebase.store.base import Backend, Collection, CollectionSpec, EmbedderInfo, Nearest, PayloadFilter, PointRecord
from culturebase.store.base import ScoredRecord, SparseVec, StoreError, StoreLockedError, StoreNotFoundError, check_embedder, point_uuid
from culturebase.store.fifo_turns import FifoTurns
from culturebase.store.layout import OLD_LAYOUT_HELP, LayoutPolicy, StoreLayout, edge_vector_params
from culturebase.store.memory import release_free_heap
from culturebase.store.params import PARAMS
from culturebase.store.payload_cache import PayloadCache
from culturebase.store.translate import EDGE, collection_meta, paged, payload_selection, point_from_record, scored
from culturebase.store.translate import sparse_by_id, vectors_by_id, with_meta

log = logging.getLogger(__name__)


def _edge() -> Any:
    return EDGE.models


def _point_key(point_id: str) -> uuid.UUID:
    """The engine's id of a stored point (what a search hit carries), from its string id."""
    return uuid.UUID(point_uuid(point_id))


class EdgeCollection(Collection):
    """A collection stored as one Qdrant Edge shard."""

    def __init__(
        self, path: Path, spec: CollectionSpec, embedder: EmbedderInfo, shard: Any,
        hnsw_ef: int = setting_default("hnsw_ef"), layout: StoreLayout | None = None, read_only: str | None = None,
    ) -> None:
        super().__init__(spec, embedder, hnsw_ef, layout, read_only)
        self.path = path  # the shard's folder (its metadata and generation files beside the shard)
        self._shard = shard
        # whether anything was written since the last flush (the next write then starts a new generation)
        self._dirty = False
        # the engine holds the GIL during a read: callers take it in arrival order (fifo_turns.py)
        self._turns = FifoTurns()
        # payloads of recent hits and reads by id: searches run without payloads and read them here, the points
        # not held there in one ``retrieve`` (payload_cache.py); this process is the only writer (the folder
        # lock), so a write drops what it touches, and the exact point count is kept until the next write
        self.payloads = PayloadCache()
        self._count: int | None = None

    def _written(self, ids: Iterable[str]) -> None:
        self._count = None
        self.payloads.drop(_point_key(i) for i in ids)

    # -- writes -------------------------------------------------------------------------
    def _mark_written(self) -> None:
        """Before the first write since the last flush: a new write generation (:data:`GENERATION_FILE`)."""
        if self._dirty:
            return
        tmp = self.path / f".{GENERATION_FILE}.tmp"
        tmp.write_text(uuid.uuid4().hex, "utf-8")
        tmp.replace(self.path / GENERATION_FILE)
        self._dirty = True

    def upsert(self, points: Sequence[PointRecord]) -> None:
        if not points:
            return
        self._writable()
        self._mark_written()
        self._written(p.id for p in points)
        batch = EDGE.points(points, self.spec, self.embedder)
        self._shard.update(_edge().UpdateOperation.upsert_points(batch))

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            self._writable()
            self._mark_written()
            self._written(ids)
            qe = _edge()
            self._shard.update(qe.UpdateOperation.delete_points([point_uuid(i) for i in ids]))

    def flush(self) -> None:
        self._shard.flush()
        self._dirty = False

    def optimize(self) -> None:
        """Run Qdrant's segment optimizers in-process (builds the HNSW index once segments are large), then
        hand the heap the build freed back to the OS."""
        if not self.read_only:
            self._mark_written()
            self._shard.optimize()
            release_free_heap()

    @property
    def segment_points(self) -> int | None:
        """Points per index segment (the bulk writer builds a segment's index each time so many were written)."""
        return self.layout.segment_points if self.layout is not None else None

    def segment_info(self) -> dict[str, int]:
        """The engine's segments, points and indexed vectors (benches and tests)."""
        info = self._shard.info()
        return {"segments": int(info.segments_count), "points": int(info.points_count), "indexed_vectors": int(info.indexed_vectors_count)}

    def build_segment(self) -> None:
        """During a bulk import: persist what was written and build its index now, as one segment."""
        self.flush()
        self.optimize()

    def scroll_points(self, batch: int = 256) -> Iterator[PointRecord]:
        """Every point with its dense and sparse vectors (reindex without re-embedding)."""
        qe = _edge()
        names = list(self.spec.dense) + list(self.spec.sparse)
        pages = paged(lambda offset: self._shard.scroll(qe.ScrollRequest(offset=offset, limit=batch, with_payload=True, with_vector=names)))
        for r in pages:
            yield point_from_record(r.payload, r.vector, self.spec)

    # -- reads --------------------------------------------------------------------------
    def retrieve(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Payloads of the given ids that exist, in the given order (read through :attr:`payloads`)."""
        if not ids:
            return []
        keys = [_point_key(i) for i in ids]
        with self._turns.turn():
            found, missing = self.payloads.lookup(keys)
            if missing:
                records = self._shard.retrieve(missing, with_payload=True, with_vector=False)
                fetched = [(r.id, r.payload) for r in records if r.payload]  # payload converted on each access: once
                self.payloads.store(fetched)
                found.update(fetched)
        # copies: the cached payloads are shared with searches, a caller may change its own
        return [dict(found[k]) for k in keys if k in found]

    def retrieve_sparse(self, ids: Sequence[str], vector_name: str) -> dict[str, SparseVec]:
        if not ids:
            return {}
        with self._turns.turn():
            records = self._shard.retrieve([point_uuid(i) for i in ids], with_payload=["_id"], with_vector=[vector_name])
        return sparse_by_id(records, vector_name)

    def retrieve_vectors(self, ids: Sequence[str], vector_names: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
        if not ids or not vector_names:
            return {}
        with self._turns.turn():
            records = self._shard.retrieve([point_uuid(i) for i in ids], with_payload=["_id"], with_vector=list(vector_names))
        return vectors_by_id(records, vector_names)

    def count(self, flt: PayloadFilter | None = None) -> int:
        """Exact number of points matching the filter.  Unfiltered, counted once and kept until the next
        write: the shard's ``info().points_count`` is not the number of points (it counts a point once per
        segment holding a version of it: 100,000 for a 50,000-point corpus written twice by a killed run)."""
        qe = _edge()
        if flt is None or not (flt.equals or flt.lacks_vectors or flt.ids):
            if self._count is None:
                self._count = int(self._shard.count(qe.CountRequest(exact=True)))
            return self._count
        return int(self._shard.count(qe.CountRequest(exact=True, filter=EDGE.filter(flt))))

    def scroll(self, batch: int = 256, flt: PayloadFilter | None = None) -> Iterator[dict[str, Any]]:
        qe = _edge()
        edge_filter = EDGE.filter(flt)
        pages = paged(
            lambda offset: self._shard.scroll(
                qe.ScrollRequest(offset=offset, limit=batch, filter=edge_filter, with_payload=True, with_vector=False)
            )
        )
        for r in pages:
            yield r.payload

    def nearest(self, query: Nearest) -> list[ScoredRecord]:
        qe = _edge()
        if query.sparse:
            vector, params = EDGE.sparse(query.vector), None  # type: ignore[arg-type]
        else:
            vector, params = query.vector, self._search_params(qe, query)
        selection = payload_selection(query.payload_keys)
        request = qe.SearchRequest(
            query=qe.Query.Nearest(vector, using=query.vector_name),
            limit=query.limit,
            filter=EDGE.filter(query.flt),
            params=params,
            with_payload=selection if selection is not True else False,
        )
        return self._search(request, lean=selection is not True)

    def _search(self, request: Any, lean: bool) -> list[ScoredRecord]:
        """Hits of a search.  ``lean`` (a few payload keys asked for): the engine returns just those.  Else the
        search ran without payloads and each hit's payload is read from :attr:`payloads` (the points not held
        there: one ``retrieve``); a hit whose point vanished in between is left out."""
        if lean:
            with self._turns.turn():
                hits = self._shard.search(request)
            return [scored(h) for h in hits]
        with self._turns.turn():
            hits = self._shard.search(request)
            found, missing = self.payloads.lookup(h.id for h in hits)
            if missing:
                records = self._shard.retrieve(missing, with_payload=True, with_vector=False)
                fetched = [(r.id, r.payload) for r in records if r.payload]
                self.payloads.store(fetched)
                found.update(fetched)
        out = []
        for h in hits:
            payload = found.get(h.id)
            if payload is not None:
                out.append(ScoredRecord(payload["_id"], float(h.score), payload))
        return out

    def close(self) -> None:
        try:
            if not self.read_only:  # also after a read: a load that replayed the WAL of a killed writer persists it
                self._shard.flush()
        finally:
            self._shard.close()


class EdgeBackend(Backend):
    """Collections as Qdrant Edge shards under one folder, guarded by a process lock."""

    kind = "embedded"

    def __init__(
        self,
        root: Path | str,
        hnsw_ef: int = setting_default("hnsw_ef"),
        hnsw_m: int = setting_default("hnsw_m"),
        hnsw_ef_construct: int = setting_default("hnsw_ef_construct"),
        layout_policy: LayoutPolicy | None = None,
        search_threads: int = setting_default("search_threads"),
    ) -> None:
        super().__init__(hnsw_ef, hnsw_m, hnsw_ef_construct, layout_policy)
        self.root = Path(root)
        self.search_threads = search_threads  # of shards created here (persisted with each shard)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create CultureBase folder {self.root}: {exc.strerror}") from exc
        if not os.access(self.root, os.R_OK | os.W_OK | os.X_OK):
            raise StoreError(f"CultureBase folder {self.root} is not readable and writable by this user")
        self._lock_fd = self._acquire_lock()
        self._open: dict[str, EdgeCollection] = {}
        self._open_lock = threading.RLock()

    def describe(self) -> str:
        return f"embedded Qdrant Edge at {self.root}"

    # -- locking ------------------------------------------------------------------------
    def _acquire_lock(self) -> int:
        lock_path = self.root / ".lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip() or "an unknown process"
            os.close(fd)
            raise StoreLockedError(
                f"CultureBase at {self.root} is already open in another process ({holder}); the embedded store is "
                "single-process: stop that process, or go through the API of the running service (kar serve), "
                "or configure a Qdrant server with KAR_QDRANT_URL for shared access"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}: {' '.join(sys.argv)[:300]}".encode())
        return fd

    def close(self) -> None:
        for coll in self._open.values():
            coll.close()
        self._open.clear()
        if self._lock_fd is not None:
            try:
                os.ftruncate(self._lock_fd, 0)
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __del__(self) -> None:  # pragma: no cover - safety net
        if getattr(self, "_lock_fd", None) is not None:
            try:
                self.close()
            except Exception:
                pass

    # -- collections --------------------------------------------------------------------
    def _meta_path(self, name: str) -> Path:
        return self.root / name / META_FILE

    def set_collection_meta(self, name: str, key: str, value: Any) -> None:
        meta = self.collection_info(name)
        if meta is None:
            raise StoreError(f"no collection {name!r} at {self.root}")
        with_meta(meta, key, value)
        path = self._meta_path(name)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(meta, indent=2), "utf-8")
        tmp.replace(path)

    def collection_info(self, name: str) -> dict[str, Any] | None:
        path = self._meta_path(name)
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text("utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise StoreError(f"collection metadata {path} is unreadable: {exc}") from exc

    def _config(self, spec: CollectionSpec, embedder: EmbedderInfo, layout: StoreLayout) -> Any:
        qe = _edge()
        # searches among fewer than ~5,000 vectors are exact (PARAMS.exact_search_kb); larger segments use their graphs
        hnsw = qe.HnswIndexConfig(m=self.hnsw_m, ef_construct=self.hnsw_ef_construct, full_scan_threshold=PARAMS.exact_search_kb)
        # a large (on-disk) KB keeps its sparse (BM25) index and point-id map in mapped files too, not on the heap
        cold = qe.Memory.Cold if layout.on_disk else None
        return qe.EdgeConfig(
            vectors=edge_vector_params(qe, layout, spec.dense, embedder.dim, hnsw),
            sparse_vectors={
                n: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf if n in spec.idf_sparse else None, memory=cold)
                for n in spec.sparse
            }
            or None,
            hnsw_config=hnsw,
            payload_memory=qe.Memory.Cold if layout.on_disk else qe.Memory.Cached,
            id_tracker_memory=cold,
            optimizers=qe.EdgeOptimizersConfig(
                indexing_threshold=layout.indexing_threshold_kb if layout.indexing_threshold_kb is not None else PARAMS.small_index_kb,
                # segments are built segment_points at a time (BulkWriter) and not merged beyond that
                max_segment_size=layout.max_segment_kb(embedder.dim),
            ),
            # the calling thread holds the GIL for the whole search, so searches run one at a time;
            # a pool of one runs it at 1 core instead of ~1.8 and sooner (KAR_SEARCH_THREADS)
            max_search_threads=self.search_threads or None,
        )

    def _create_at(self, folder: Path, spec: CollectionSpec, embedder: EmbedderInfo, layout: StoreLayout) -> Any:
        qe = _edge()
        shard_dir = folder / "shard"
        shard = qe.EdgeShard.create(str(shard_dir), self._config(spec, embedder, layout))
        # a large (on-disk) KB keeps its keyword indexes (language, sites, name keys) in mapped files too
        keyword = qe.KeywordIndexParams(memory=qe.Memory.Cold) if layout.on_disk else qe.PayloadSchemaType.Keyword
        for field_name in spec.keyword_indexes:
            shard.update(qe.UpdateOperation.create_field_index(field_name, keyword))
        meta = collection_meta(spec, embedder, layout)
        tmp = folder / (META_FILE + ".tmp")
        tmp.write_text(json.dumps(meta, indent=2), "utf-8")
        tmp.replace(folder / META_FILE)
        return shard

    def open_collection(
        self, spec: CollectionSpec, embedder: EmbedderInfo, create: bool = True, expected_points: int | None = None
    ) -> EdgeCollection:
        # one opener at a time: concurrent first searches must not load the same shard twice
        # (its WAL is locked by the first load)
        with self._open_lock:
            return self._open_collection(spec, embedder, create, expected_points)

    def _open_collection(
        self, spec: CollectionSpec, embedder: EmbedderInfo, create: bool, expected_points: int | None
    ) -> EdgeCollection:
        if spec.name in self._open:
            coll = self._open[spec.name]
            check_embedder(spec.name, {"embedder": coll.embedder.name, "dim": coll.embedder.dim}, embedder, str(self.root))
            return coll
        folder = self.root / spec.name
        meta = self.collection_info(spec.name)
        qe = _edge()
        read_only = None
        if meta is None:
            if not create:
                raise StoreNotFoundError(f"no collection {spec.name!r} in {self.root} yet: import entities first (kar kb import FILE)")
            if folder.exists():
                shutil.rmtree(folder)  # a creation that died before writing its metadata
            folder.mkdir(parents=True)
            layout = self.layout_policy.choose(expected_points, spec.dense)
            shard = self._create_at(folder, spec, embedder, layout)
        else:
            check_embedder(spec.name, meta, embedder, str(self.root))
            layout = StoreLayout.from_meta(meta)
            if layout is None:
                read_only = f"collection {spec.name!r} at {self.root}: {OLD_LAYOUT_HELP}"
                log.warning("%s", read_only)
            shard = qe.EdgeShard.load(str(folder / "shard"))
        coll = EdgeCollection(folder, spec, embedder, shard, hnsw_ef=self.hnsw_ef, layout=layout, read_only=read_only)
        self._open[spec.name] = coll
        return coll

    def drop_collection(self, name: str) -> None:
        coll = self._open.pop(name, None)
        if coll is not None:
            coll.close()
        shutil.rmtree(self.root / name, ignore_errors=True)

    def replace_collection(
        self, spec: CollectionSpec, embedder: EmbedderInfo, points: Iterator[Sequence[PointRecord]], expected_points: int | None = None
    ) -> EdgeCollection:
        new_dir = self.root / f"{spec.name}.new"
        old_dir = self.root / f"{spec.name}.old"
        shutil.rmtree(new_dir, ignore_errors=True)
        new_dir.mkdir(parents=True)
        layout = self.layout_policy.choose(expected_points, spec.dense)
        shard = self._create_at(new_dir, spec, embedder, layout)
        staging = EdgeCollection(new_dir, spec, embedder, shard, layout=layout)
        try:
            since = 0
            for batch in points:
                staging.upsert(batch)
                since += len(batch)
                if layout.segment_points is not None and since >= layout.segment_points:
                    staging.build_segment()  # one segment's graphs at a time: memory does not grow with the KB
                    since = 0
            staging.optimize()  # the last segment's indexes
        except BaseException:
            staging.close()
            shutil.rmtree(new_dir, ignore_errors=True)
            raise
        staging.close()
        current = self._open.pop(spec.name, None)
        if current is not None:
            current.close()
        live = self.root / spec.name
        shutil.rmtree(old_dir, ignore_errors=True)
        if live.exists():
            live.rename(old_dir)
        new_dir.rename(live)
        shutil.rmtree(old_dir, ignore_errors=True)
        return self.open_collection(spec, embedder, create=False)
