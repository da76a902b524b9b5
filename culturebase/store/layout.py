"""Where a collection's dense vectors live and which of them get an HNSW graph.

A :class:`LayoutPolicy` (from the settings) turns the expected number of points into a
:class:`StoreLayout`:

* ``quantization``: ``int8`` keeps a scalar-quantized copy of every dense vector in RAM
  (a quarter of float32) and searches it, rescoring the best candidates with the original
  vectors; ``none`` searches the float32 vectors.  With ``on_disk`` the int8 copy lives in
  the page cache (a mapped file pre-warmed at load), otherwise on the heap.
* ``segment_points``: the points per index segment (see :mod:`culturebase.store.bulk`).
* ``on_disk``: the original float32 vectors and the payloads stay in memory-mapped files
  (the OS page cache holds what is touched; only rescoring reads them), instead of being
  loaded into RAM.
* ``hnsw_vectors``: the named dense vectors that get an HNSW graph.  A vector used only for
  rescoring or for exact (filtered) look-ups is stored without one (``m=0``).

``auto`` (the default of ``KAR_QUANTIZATION`` and ``KAR_ON_DISK``) picks ``int8`` and
on-disk originals once a collection is expected to hold ``KAR_LARGE_KB_ENTITIES`` points or
more, and plain in-RAM float32 below that (small KBs are searched exhaustively anyway).

The layout is recorded in the collection's metadata (``layout``).  A collection without it
was written by an older CultureKAR (no quantization, every vector in RAM): it is opened
read-only until ``kar kb reindex`` rewrites it, reusing its stored vectors.

Both backends implement every part: Qdrant Edge through ``EdgeVectorParams(memory=Cold,
quantization_config=ScalarQuantizationConfig(Int8, memory=Cached), hnsw_config=m=0)`` and
``EdgeConfig(payload_memory=Cold, optimizers=EdgeOptimizersConfig(max_segment_size=...))``; a Qdrant server through ``VectorParams(on_disk=True,
quantization_config=..., hnsw_config=HnswConfigDiff(m=0))`` and ``on_disk_payload``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from culturebase.settings import Settings, setting_default

LAYOUT_VERSION = 2
Quantization = Literal["int8", "none"]
OLD_LAYOUT_HELP = (
    "it was written by an older CultureKAR (no quantization, every vector in RAM) and is opened read-only; "
    "run `kar kb reindex` to migrate it to the current layout (stored vectors are reused, nothing is re-embedded)"
)


@dataclass(frozen=True)
class StoreLayout:
    """The storage layout of one collection (recorded in its metadata)."""

    quantization: Quantization = "none"
    on_disk: bool = False
    hnsw_vectors: tuple[str, ...] | None = None  # None: every dense vector gets a graph
    quantile: float = 0.99
    oversampling: float = 2.0
    indexing_threshold_kb: int | None = None  # None: the engine's default (10 MB of vectors per segment)
    #: points per index segment: a bulk import builds the graphs of every so many points as it writes them,
    #: and segments are not merged beyond that size (None: one segment, built at the end; older collections)
    segment_points: int | None = None

    def max_segment_kb(self, dim: int) -> int | None:
        """The engine's ``max_segment_size`` for ``segment_points`` vectors of ``dim`` (its unit: 1 KB = one
        vector of 256 floats).  The engine merges only segments below this size (measured: 10k-point
        segments of 384-d vectors stay apart at 15,000 and all merge into one at 16,500), so a segment the
        import built full is never merged again."""
        if self.segment_points is None:
            return None
        return max(1, self.segment_points * dim // 256)

    def has_hnsw(self, vector_name: str) -> bool:
        """Whether ``vector_name`` gets an HNSW graph."""
        return self.hnsw_vectors is None or vector_name in self.hnsw_vectors

    def to_meta(self) -> dict[str, Any]:
        d = asdict(self)
        d["hnsw_vectors"] = list(self.hnsw_vectors) if self.hnsw_vectors is not None else None
        d["version"] = LAYOUT_VERSION
        return d

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> "StoreLayout | None":
        """The layout recorded in collection metadata; None for the older layout (none recorded)."""
        raw = meta.get("layout")
        if not isinstance(raw, dict):
            return None
        hv = raw.get("hnsw_vectors")
        return cls(
            quantization="int8" if raw.get("quantization") == "int8" else "none",
            on_disk=bool(raw.get("on_disk")),
            hnsw_vectors=tuple(hv) if hv is not None else None,
            quantile=float(raw.get("quantile", 0.99)),
            oversampling=float(raw.get("oversampling", 2.0)),
            indexing_threshold_kb=raw.get("indexing_threshold_kb"),
            segment_points=raw.get("segment_points"),
        )

    def describe(self) -> str:
        hnsw = "all vectors" if self.hnsw_vectors is None else (", ".join(self.hnsw_vectors) or "no vector")
        return (
            f"{'int8 scalar quantization' if self.quantization == 'int8' else 'float32'}, "
            f"originals {'on disk (mmap)' if self.on_disk else 'in RAM'}, HNSW on {hnsw}"
        )


@dataclass(frozen=True)
class LayoutPolicy:
    """The settings' rule from KB size to layout (``KAR_QUANTIZATION``, ``KAR_ON_DISK``, ...)."""

    quantization: Literal["auto", "int8", "none"] = setting_default("quantization")
    on_disk: Literal["auto", "true", "false"] = setting_default("on_disk")
    large_kb: int = setting_default("large_kb_entities")
    hnsw_vectors: tuple[str, ...] | None = None  # None: every dense vector gets a graph
    oversampling: float = setting_default("quantization_oversampling")
    indexing_threshold_kb: int | None = None
    segment_points: int | None = setting_default("segment_points") or None

    @classmethod
    def from_settings(cls, settings: Settings) -> "LayoutPolicy":
        hv = settings.hnsw_vectors
        return cls(
            quantization=settings.quantization,
            on_disk=settings.on_disk,
            large_kb=settings.large_kb_entities,
            hnsw_vectors=tuple(hv) if hv else None,
            oversampling=settings.quantization_oversampling,
            segment_points=settings.segment_points or None,
        )

    def choose(self, expected_points: int | None, dense: tuple[str, ...]) -> StoreLayout:
        """The layout for a collection expected to hold ``expected_points`` (None: unknown, small)."""
        large = (expected_points or 0) >= self.large_kb
        quant: Quantization = ("int8" if large else "none") if self.quantization == "auto" else self.quantization
        on_disk = large if self.on_disk == "auto" else self.on_disk == "true"
        hnsw = None
        if self.hnsw_vectors is not None:
            hnsw = tuple(n for n in dense if n in self.hnsw_vectors)
        return StoreLayout(
            quantization=quant,
            on_disk=on_disk,
            hnsw_vectors=hnsw,
            oversampling=self.oversampling,
            indexing_threshold_kb=self.indexing_threshold_kb,
            segment_points=self.segment_points,
        )


# -- engine configuration (kept here so the backends' create paths stay one call) --------------


def edge_vector_params(qe: Any, layout: StoreLayout, dense: tuple[str, ...], dim: int, hnsw: Any) -> dict[str, Any]:
    """Qdrant Edge ``EdgeVectorParams`` per dense vector for ``layout`` (``hnsw`` is the global graph config)."""
    quant = None
    if layout.quantization == "int8":
        # a large (on-disk) KB keeps its int8 copy in the page cache, pre-warmed at load (Cached), not on the
        # heap (Pinned): the same speed while RAM lasts, and memory that does not grow the process's heap
        quant_memory = qe.Memory.Cached if layout.on_disk else qe.Memory.Pinned
        quant = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=layout.quantile, memory=quant_memory)
    memory = qe.Memory.Cold if layout.on_disk else None
    out = {}
    for name in dense:
        per_vector_hnsw = None
        if not layout.has_hnsw(name):
            per_vector_hnsw = qe.HnswIndexConfig(m=0, ef_construct=hnsw.ef_construct, full_scan_threshold=hnsw.full_scan_threshold)
        out[name] = qe.EdgeVectorParams(
            size=dim, distance=qe.Distance.Cosine, memory=memory, quantization_config=quant, hnsw_config=per_vector_hnsw
        )
    return out


def server_vector_params(m: Any, layout: StoreLayout, dense: tuple[str, ...], dim: int, ef_construct: int) -> dict[str, Any]:
    """qdrant-client ``VectorParams`` per dense vector for ``layout``."""
    quant = None
    if layout.quantization == "int8":
        quant = m.ScalarQuantization(scalar=m.ScalarQuantizationConfig(type=m.ScalarType.INT8, quantile=layout.quantile, always_ram=True))
    out = {}
    for name in dense:
        hnsw = None if layout.has_hnsw(name) else m.HnswConfigDiff(m=0, ef_construct=ef_construct)
        out[name] = m.VectorParams(
            size=dim,
            distance=m.Distance.COSINE,
            on_disk=True if layout.on_disk else None,
            quantization_config=quant,
            hnsw_config=hnsw,
        )
    return out


def search_params(models: Any, layout: StoreLayout | None, hnsw_ef: int, limit: int, exact: bool = False) -> Any:
    """Query-time search params for either client (``qdrant_edge`` or ``qdrant_client.models``: the
    same class names): ef at least the limit, and rescoring against the originals when quantized;
    ``exact`` scores every point on its original vector (no graph, no quantized copy)."""
    if exact:
        return models.SearchParams(exact=True, quantization=models.QuantizationSearchParams(ignore=True))
    quant = None
    if layout is not None and layout.quantization != "none":
        quant = models.QuantizationSearchParams(rescore=True, oversampling=layout.oversampling)
    return models.SearchParams(hnsw_ef=max(hnsw_ef, limit), quantization=quant)
