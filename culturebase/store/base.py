"""The store interface: named collections of points with dense/sparse vectors and payloads.

Two backends implement :class:`Collection` (embedded Qdrant Edge, Qdrant server); the
:class:`~culturebase.store.culturebase.CultureBaseStore` builds entity and corpus views
on top of whichever one the settings choose.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from culturebase.settings import setting_default
from culturebase.store.layout import LayoutPolicy, StoreLayout, search_params

SparseVec = dict[int, float]
POINT_NAMESPACE = uuid.UUID("6f1c3c1e-3d43-4c56-9a65-2f0b1f6c9a11")
SCHEMA_VERSION = 1


class StoreError(RuntimeError):
    """Base class of store errors; messages are meant for users."""


class StoreLockedError(StoreError):
    """The embedded store folder is open in another process."""


class EmbedderMismatchError(StoreError):
    """A collection built by one embedder was used with another."""


class StoreNotFoundError(StoreError):
    """The collection does not exist yet (nothing was imported)."""


class StoreReadOnlyError(StoreError):
    """The collection was opened read-only (older layout): ``kar kb reindex`` migrates it."""


@dataclass(frozen=True)
class EmbedderInfo:
    """Which embedder built a collection: recorded at creation, checked on every open."""

    name: str
    dim: int
    sparse: bool = False

    def describe(self) -> str:
        return f"{self.name} ({self.dim}-d{', sparse' if self.sparse else ''})"


@dataclass(frozen=True)
class CollectionSpec:
    """Shape of a collection: dense vector names, sparse vector names, keyword payload indexes."""

    name: str
    dense: tuple[str, ...]
    sparse: tuple[str, ...] = ()
    keyword_indexes: tuple[str, ...] = ()
    #: sparse vectors whose weights the engine multiplies by the IDF at query time (Qdrant's ``Modifier.Idf``)
    idf_sparse: tuple[str, ...] = ()


@dataclass
class PointRecord:
    """A point to upsert: string id, named dense vectors, named sparse vectors, payload."""

    id: str
    dense: dict[str, np.ndarray]
    payload: dict[str, Any]
    sparse: dict[str, SparseVec] = field(default_factory=dict)


@dataclass
class ScoredRecord:
    """A search hit: the point's string id, its score and payload."""

    id: str
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class PayloadFilter:
    """Equality filters on indexed payload fields (all must hold); values in a list match any.
    ``lacks_vectors``: only points that carry none of these named dense vectors (Qdrant's ``HasVector``
    condition, negated); ``ids``: only these points (Qdrant's ``HasId``)."""

    equals: tuple[tuple[str, tuple[str, ...]], ...] = ()
    lacks_vectors: tuple[str, ...] = ()
    #: only these points (string ids; empty: no condition on ids)
    ids: tuple[str, ...] = ()

    @classmethod
    def of(cls, **fields: str | Sequence[str] | None) -> "PayloadFilter | None":
        items = []
        for key, value in fields.items():
            if value is None or value == [] or value == ():
                continue
            values = (value,) if isinstance(value, str) else tuple(value)
            items.append((key, values))
        return cls(tuple(items)) if items else None

    def lacking(self, *vector_names: str) -> "PayloadFilter":
        """This filter, also requiring that the point carries none of ``vector_names``."""
        return PayloadFilter(self.equals, self.lacks_vectors + tuple(vector_names), self.ids)

    @classmethod
    def among(cls, ids: Sequence[str]) -> "PayloadFilter":
        """Only the points of these string ids."""
        return cls(ids=tuple(ids))

    @classmethod
    def without_vectors(cls, flt: "PayloadFilter | None", *vector_names: str) -> "PayloadFilter":
        """``flt`` (or no condition) and none of ``vector_names`` on the point."""
        return (flt or cls()).lacking(*vector_names)


@dataclass(frozen=True)
class Nearest:
    """One nearest-points query as a backend runs it.

    ``vector``: a dense vector (a list of floats) or, with ``sparse``, a :data:`SparseVec`; ``exact`` and
    ``hnsw_ef`` apply to dense queries only; ``payload_keys`` as in :meth:`Collection.search`."""

    vector_name: str
    vector: list[float] | SparseVec
    limit: int
    flt: PayloadFilter | None = None
    sparse: bool = False
    exact: bool = False
    hnsw_ef: int | None = None
    payload_keys: Sequence[str] | None = None


def point_uuid(point_id: str) -> str:
    """Qdrant point id (a UUID) for a string id; the string id is kept in the payload as ``_id``."""
    return str(uuid.uuid5(POINT_NAMESPACE, point_id))


class Collection(abc.ABC):
    """One named collection in a backend: its shape, the embedder that built it, its storage layout.

    ``hnsw_ef``: the beam width of its graph searches; ``read_only``: why it may not be written (an older
    layout), or None."""

    def __init__(
        self,
        spec: CollectionSpec,
        embedder: EmbedderInfo,
        hnsw_ef: int = setting_default("hnsw_ef"),
        layout: StoreLayout | None = None,
        read_only: str | None = None,
    ) -> None:
        self.spec = spec
        self.embedder = embedder
        self.hnsw_ef = hnsw_ef
        self.layout = layout
        self.read_only = read_only

    def _writable(self) -> None:
        """Raise :class:`StoreReadOnlyError` when the collection may not be written."""
        if self.read_only:
            raise StoreReadOnlyError(self.read_only)

    def _search_params(self, models: Any, query: "Nearest") -> Any:
        """The engine's search params of a dense query (``models``: either engine's model module)."""
        return search_params(models, self.layout, query.hnsw_ef or self.hnsw_ef, query.limit, exact=query.exact)

    @abc.abstractmethod
    def upsert(self, points: Sequence[PointRecord]) -> None:
        """Insert or replace points (idempotent by id)."""

    @abc.abstractmethod
    def retrieve(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Payloads of the given ids that exist, in the given order."""

    @abc.abstractmethod
    def delete(self, ids: Sequence[str]) -> None:
        """Delete points by id (missing ids are ignored)."""

    @abc.abstractmethod
    def count(self, flt: PayloadFilter | None = None) -> int:
        """Exact number of points matching the filter."""

    @abc.abstractmethod
    def scroll(self, batch: int = 256, flt: PayloadFilter | None = None) -> Iterator[dict[str, Any]]:
        """Every payload, in id order, fetched in batches."""

    def search(
        self,
        vector_name: str,
        vector: np.ndarray,
        limit: int,
        flt: PayloadFilter | None = None,
        exact: bool = False,
        hnsw_ef: int | None = None,
        payload_keys: Sequence[str] | None = None,
    ) -> list[ScoredRecord]:
        """Nearest points by cosine similarity on a named dense vector (points without it are not searched).
        ``exact``: score every point (no HNSW graph, no quantized copy: the reference recall is measured
        against); ``hnsw_ef``: this search's beam width instead of the collection's; ``payload_keys``: each
        hit's payload holds only these keys and ``_id`` (None: the whole payload; turning a long payload into
        a Python dict is most of a search's cost: read the rest of the few hits kept with :meth:`retrieve`)."""
        dense = np.asarray(vector, dtype=np.float32).tolist()
        return self.nearest(Nearest(vector_name, dense, limit, flt, exact=exact, hnsw_ef=hnsw_ef, payload_keys=payload_keys))

    def search_sparse(
        self,
        vector_name: str,
        vector: SparseVec,
        limit: int,
        flt: PayloadFilter | None = None,
        payload_keys: Sequence[str] | None = None,
    ) -> list[ScoredRecord]:
        """Best points by dot product on a named sparse vector (``payload_keys`` as in :meth:`search`)."""
        if not vector:
            return []
        return self.nearest(Nearest(vector_name, vector, limit, flt, sparse=True, payload_keys=payload_keys))

    @abc.abstractmethod
    def nearest(self, query: "Nearest") -> list[ScoredRecord]:
        """The hits of one nearest-points query (what :meth:`search` and :meth:`search_sparse` run)."""

    @abc.abstractmethod
    def retrieve_sparse(self, ids: Sequence[str], vector_name: str) -> dict[str, SparseVec]:
        """The named sparse vector of each existing id."""

    def retrieve_vectors(self, ids: Sequence[str], vector_names: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
        """The named dense vectors of each existing id, read in one request (as stored: unit length for
        cosine vectors); a point without one of the names lacks that key."""
        raise NotImplementedError(f"{type(self).__name__} cannot read dense vectors back")

    def retrieve_dense(self, ids: Sequence[str], vector_name: str) -> dict[str, np.ndarray]:
        """The named dense vector of each existing id (as stored: unit length for cosine vectors)."""
        return {i: v[vector_name] for i, v in self.retrieve_vectors(ids, [vector_name]).items() if vector_name in v}

    def flush(self) -> None:
        """Persist pending writes (no-op where writes are synchronous)."""

    def optimize(self) -> None:
        """Build indexes and merge segments now (no-op where the engine does it in the background)."""

    def scroll_points(self, batch: int = 256) -> Iterator[PointRecord]:
        """Every point with its vectors (``kar kb reindex`` reuses them when the embedder is unchanged)."""
        raise NotImplementedError(f"{type(self).__name__} cannot read its vectors back")

    def begin_bulk(self) -> None:
        """Prepare for a bulk import: defer index building until :meth:`end_bulk`."""

    #: points per index segment built during a bulk import (None: the indexes are built at the end only)
    segment_points: int | None = None

    def build_segment(self) -> None:
        """During a bulk import, after :attr:`segment_points` points: build their indexes now."""

    def end_bulk(self) -> None:
        """Finish a bulk import: persist and build the indexes once."""
        self.flush()
        self.optimize()


class Backend(abc.ABC):
    """A place that holds collections; those it creates get HNSW graphs of ``hnsw_m`` links built with
    ``hnsw_ef_construct``, are searched with ``hnsw_ef``, and get the layout ``layout_policy`` chooses."""

    kind: str

    def __init__(
        self,
        hnsw_ef: int = setting_default("hnsw_ef"),
        hnsw_m: int = setting_default("hnsw_m"),
        hnsw_ef_construct: int = setting_default("hnsw_ef_construct"),
        layout_policy: LayoutPolicy | None = None,
    ) -> None:
        self.hnsw_ef = hnsw_ef
        self.hnsw_m = hnsw_m
        self.hnsw_ef_construct = hnsw_ef_construct
        self.layout_policy = layout_policy or LayoutPolicy()

    @abc.abstractmethod
    def open_collection(
        self, spec: CollectionSpec, embedder: EmbedderInfo, create: bool = True, expected_points: int | None = None
    ) -> Collection:
        """Open (or create) a collection, refusing one built by another embedder.

        A collection created here gets the storage layout the settings choose for
        ``expected_points`` (see :mod:`culturebase.store.layout`)."""

    @abc.abstractmethod
    def collection_info(self, name: str) -> dict[str, Any] | None:
        """Recorded metadata of a collection (embedder, schema), or None when absent."""

    @abc.abstractmethod
    def replace_collection(
        self,
        spec: CollectionSpec,
        embedder: EmbedderInfo,
        points: Iterator[Sequence[PointRecord]],
        expected_points: int | None = None,
    ) -> Collection:
        """Build a new collection from batches of points (layout chosen for ``expected_points``), then swap it in."""

    @abc.abstractmethod
    def drop_collection(self, name: str) -> None:
        """Delete a collection and its data."""

    def set_collection_meta(self, name: str, key: str, value: Any) -> None:
        """Record ``key`` in a collection's metadata (``None`` removes it): data that belongs with the collection
        and goes where it goes (the calibration record of the entities' embedder)."""
        raise StoreError(f"the {self.kind} backend cannot record collection metadata")

    @abc.abstractmethod
    def close(self) -> None:
        """Release files, locks and connections."""

    def describe(self) -> str:
        return self.kind


def check_embedder(name: str, recorded: dict[str, Any], embedder: EmbedderInfo, where: str) -> None:
    """Raise :class:`EmbedderMismatchError` unless the collection was built by ``embedder``."""
    rec_name, rec_dim = recorded.get("embedder"), recorded.get("dim")
    if rec_name != embedder.name or rec_dim != embedder.dim:
        raise EmbedderMismatchError(
            f"collection {name!r} at {where} was built with embedder {rec_name} ({rec_dim}-d) but the configured "
            f"embedder is {embedder.describe()}; run `kar kb reindex` to re-embed it with {embedder.name}, "
            f"or set KAR_EMBEDDER (with KAR_EMBEDDER_MODEL or KAR_EMBEDDER_REMOTE_MODEL) to the embedder it was built with"
        )
