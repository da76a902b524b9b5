"""The store's types in Qdrant's terms, written once for both backends.

Qdrant Edge (``qdrant_edge``) and qdrant-client (``qdrant_client.models``) share Qdrant's model
names but construct a few of them differently (Edge takes positional values, the client keyword
fields).  A :class:`Dialect` holds just those constructors; :data:`EDGE` and :data:`CLIENT` are
the two.  Everything else — filters, points, sparse vectors, the collection metadata, and reading
records, hits and scroll pages back — is translated here for either engine, so the backends
(:mod:`~culturebase.store.edge`, :mod:`~culturebase.store.server`) hold only what their engine
does differently.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from culturebase.store.base import (
    SCHEMA_VERSION,
    CollectionSpec,
    EmbedderInfo,
    PayloadFilter,
    PointRecord,
    ScoredRecord,
    SparseVec,
    StoreError,
    point_uuid,
)
from culturebase.store.layout import StoreLayout


class Dialect(abc.ABC):
    """The constructors in which one engine's models differ from the other's."""

    @property
    @abc.abstractmethod
    def models(self) -> Any:
        """The engine's model module (imported on first use)."""

    @abc.abstractmethod
    def match(self, values: tuple[str, ...]) -> Any:
        """A match on one value, or on any of several."""

    @abc.abstractmethod
    def has_id(self, ids: Sequence[str]) -> Any:
        """A condition on the points of these string ids."""

    @abc.abstractmethod
    def has_vector(self, name: str) -> Any:
        """A condition on points that carry the named vector."""

    @abc.abstractmethod
    def point(self, point_id: str, vectors: dict[str, Any], payload: dict[str, Any]) -> Any:
        """A point to upsert (``point_id``: the engine's UUID)."""

    def filter(self, flt: PayloadFilter | None) -> Any:
        """The engine's filter for ``flt`` (None: no filter)."""
        if flt is None:
            return None
        m = self.models
        must = [m.FieldCondition(key=key, match=self.match(values)) for key, values in flt.equals]
        if flt.ids:
            must.append(self.has_id(flt.ids))
        must_not = [self.has_vector(name) for name in flt.lacks_vectors]
        return m.Filter(must=must or None, must_not=must_not or None)

    def sparse(self, vector: SparseVec) -> Any:
        """The engine's sparse vector (indices sorted)."""
        idx, values = sparse_parts(vector)
        return self.models.SparseVector(indices=idx, values=values)

    def points(self, points: Sequence[PointRecord], spec: CollectionSpec, embedder: EmbedderInfo) -> list[Any]:
        """The engine's points for ``points``, validated against the collection's shape."""
        m = self.models
        out = []
        for p in points:
            dense, sparse, payload = point_parts(p, spec, embedder)
            vectors: dict[str, Any] = {**dense}
            vectors.update({name: m.SparseVector(indices=i, values=v) for name, (i, v) in sparse.items()})
            out.append(self.point(point_uuid(p.id), vectors, payload))
        return out


class EdgeDialect(Dialect):
    """Qdrant Edge (``qdrant_edge``): positional values."""

    @property
    def models(self) -> Any:
        import qdrant_edge

        return qdrant_edge

    def match(self, values: tuple[str, ...]) -> Any:
        m = self.models
        return m.MatchValue(values[0]) if len(values) == 1 else m.MatchAny(list(values))

    def has_id(self, ids: Sequence[str]) -> Any:
        return self.models.HasIdCondition({point_uuid(i) for i in ids})

    def has_vector(self, name: str) -> Any:
        return self.models.HasVectorCondition(name)

    def point(self, point_id: str, vectors: dict[str, Any], payload: dict[str, Any]) -> Any:
        return self.models.Point(id=point_id, vector=vectors, payload=payload)


class ClientDialect(Dialect):
    """qdrant-client (``qdrant_client.models``): keyword fields."""

    @property
    def models(self) -> Any:
        from qdrant_client import models

        return models

    def match(self, values: tuple[str, ...]) -> Any:
        m = self.models
        return m.MatchValue(value=values[0]) if len(values) == 1 else m.MatchAny(any=list(values))

    def has_id(self, ids: Sequence[str]) -> Any:
        return self.models.HasIdCondition(has_id=[point_uuid(i) for i in ids])

    def has_vector(self, name: str) -> Any:
        return self.models.HasVectorCondition(has_vector=name)

    def point(self, point_id: str, vectors: dict[str, Any], payload: dict[str, Any]) -> Any:
        return self.models.PointStruct(id=point_id, vector=vectors, payload=payload)


EDGE = EdgeDialect()
CLIENT = ClientDialect()


# -- our points in engine terms ------------------------------------------------------------------


def payload_selection(payload_keys: Sequence[str] | None) -> bool | list[str]:
    """What a search asks the engine for: the whole payload, or only ``payload_keys`` and ``_id``."""
    if payload_keys is None:
        return True
    return ["_id", *(k for k in payload_keys if k != "_id")]


def sparse_parts(vector: SparseVec) -> tuple[list[int], list[float]]:
    """Sorted indices and their values, the form both Qdrant APIs take."""
    idx = sorted(vector)
    return idx, [float(vector[i]) for i in idx]


def point_parts(
    point: PointRecord, spec: CollectionSpec, embedder: EmbedderInfo
) -> tuple[dict[str, list[float]], dict[str, tuple[list[int], list[float]]], dict[str, Any]]:
    """Validated dense vectors (as lists), sparse vectors (indices, values) and payload (with ``_id``) of a point.

    A dense vector the point does not carry is left out (the engine stores the point without it)."""
    dense: dict[str, list[float]] = {}
    for name in spec.dense:
        if point.dense.get(name) is None:  # no vector on a route the entity has nothing to say on
            continue
        vec = np.asarray(point.dense[name], dtype=np.float32)
        if vec.shape != (embedder.dim,):
            raise StoreError(f"point {point.id!r}: vector {name!r} has shape {vec.shape}, expected ({embedder.dim},)")
        dense[name] = vec.tolist()
    sparse = {name: sparse_parts(point.sparse.get(name) or {}) for name in spec.sparse}
    return dense, sparse, {**point.payload, "_id": point.id}


def collection_meta(spec: CollectionSpec, embedder: EmbedderInfo, layout: StoreLayout) -> dict[str, Any]:
    """The metadata a new collection records: its embedder, shape, schema and layout."""
    return {
        "collection": spec.name,
        "embedder": embedder.name,
        "dim": embedder.dim,
        "sparse": embedder.sparse,
        "dense_vectors": list(spec.dense),
        "sparse_vectors": list(spec.sparse),
        "schema_version": SCHEMA_VERSION,
        "layout": layout.to_meta(),
        "created_at": datetime.now(timezone.utc).isoformat(),
    }


def with_meta(meta: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """``meta`` with ``key`` set to ``value`` (``None`` removes it)."""
    if value is None:
        meta.pop(key, None)
    else:
        meta[key] = value
    return meta


# -- engine records back as ours -----------------------------------------------------------------


def point_from_record(payload: dict[str, Any] | None, vector: Any, spec: CollectionSpec) -> PointRecord:
    """A stored point (payload with ``_id``, engine vectors) back as a :class:`PointRecord`."""
    payload = dict(payload or {})
    pid = str(payload.pop("_id"))
    vectors = vector if isinstance(vector, dict) else {}
    dense = {n: np.asarray(vectors[n], dtype=np.float32) for n in spec.dense if n in vectors}
    sparse: dict[str, SparseVec] = {}
    for n in spec.sparse:
        v = vectors.get(n)
        if v is not None:
            sparse[n] = dict(zip(v.indices, v.values))
    return PointRecord(id=pid, dense=dense, payload=payload, sparse=sparse)


def scored(hit: Any) -> ScoredRecord:
    """A search hit as a :class:`ScoredRecord` (Edge converts ``payload`` on each access: read once)."""
    payload = hit.payload
    return ScoredRecord(payload["_id"], float(hit.score), payload)


def sparse_by_id(records: Sequence[Any], vector_name: str) -> dict[str, SparseVec]:
    """``{id: sparse vector}`` of retrieved records that carry ``vector_name``."""
    out: dict[str, SparseVec] = {}
    for r in records:
        vec = r.vector.get(vector_name) if isinstance(r.vector, dict) else None
        if vec is not None and r.payload:
            out[r.payload["_id"]] = dict(zip(vec.indices, vec.values))
    return out


def vectors_by_id(records: Sequence[Any], vector_names: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """``{id: {name: vector}}`` of retrieved records (Edge converts ``payload`` and ``vector`` on each
    access: each is read once)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for r in records:
        payload, vectors = r.payload, r.vector
        if not payload or not isinstance(vectors, dict):
            continue
        out[payload["_id"]] = {n: np.asarray(vectors[n], dtype=np.float32) for n in vector_names if vectors.get(n) is not None}
    return out


def paged(fetch: Callable[[Any], tuple[Sequence[Any], Any]]) -> Iterator[Any]:
    """Every record of a scroll: ``fetch(offset)`` returns a page and the next offset (None: the last page)."""
    offset = None
    while True:
        records, offset = fetch(offset)
        yield from records
        if offset is None or not records:
            return
