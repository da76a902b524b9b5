"""CultureBaseStore: entities and the crawled-pages corpus on top of a backend.

The store holds vectors it is given; it never embeds.  Callers pass the
:class:`EmbedderInfo` of their embedder and the store refuses collections built by
another one (see ``kar kb reindex``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from culturebase.entity import Entity, normalize_text
from culturebase.settings import Settings
from culturebase.store.base import (
    Backend,
    Collection,
    CollectionSpec,
    EmbedderInfo,
    PayloadFilter,
    PointRecord,
    SparseVec,
    StoreError,
)
from culturebase.store.bulk import DEFAULT_MIN_FREE_BYTES, BulkWriter
from culturebase.store.layout import LayoutPolicy

#: dense vectors the grounding routes search (name → identity, visual handle → visual, OCR → usage)
ENTITY_DENSE = ("identity", "visual", "usage")
#: the release's embedding text; no route searches it, so it is stored only when asked for (KAR_ENTITY_FULL_VECTOR)
ENTITY_FULL = "full"
ENTITY_SPARSE = ("identity_sparse",)
#: BM25 sparse vector of every entity (embedder-independent; the IDF modifier is on)
ENTITY_LEXICAL = "lexical"
CORPUS_DENSE = ("text",)
CORPUS_SPARSE = ("text_sparse",)
#: BM25 sparse vector of every corpus chunk (embedder-independent, IDF modifier on), as the entities have
CORPUS_LEXICAL = "lexical"


def entity_spec(embedder: EmbedderInfo, lexical: bool = True, full: bool = False) -> CollectionSpec:
    """Entities: one dense vector per grounding route, the BM25 ``lexical`` sparse vector (IDF modifier),
    and bge-m3's sparse lexical weights when the embedder has them.  ``lexical=False`` describes a
    collection created before the lexical index existed; ``full=True`` one that also stores the
    unsearched ``full`` text vector (and its sparse weights), as collections built before it was dropped do.
    A point may lack a route vector: an entity with nothing to say on a route gets none there."""
    dense = ((ENTITY_FULL,) if full else ()) + ENTITY_DENSE
    sparse_routes = ((f"{ENTITY_FULL}_sparse",) if full else ()) + ENTITY_SPARSE
    return CollectionSpec(
        "entities",
        dense=dense,
        sparse=((ENTITY_LEXICAL,) if lexical else ()) + (sparse_routes if embedder.sparse else ()),
        keyword_indexes=("language", "sites", "match_keys"),
        idf_sparse=(ENTITY_LEXICAL,) if lexical else (),
    )


def corpus_spec(embedder: EmbedderInfo, lexical: bool = True) -> CollectionSpec:
    """Corpus: cleaned page text chunks for the offline web-search backend: the dense ``text`` vector,
    the BM25 ``lexical`` sparse vector (IDF modifier; ``lexical=False`` describes a collection built
    before it existed), bge-m3's sparse weights when the embedder has them; ``page`` is the chunk's
    canonical page URL (pages are replaced, deleted and fetched by it)."""
    return CollectionSpec(
        "corpus",
        dense=CORPUS_DENSE,
        sparse=((CORPUS_LEXICAL,) if lexical else ()) + (CORPUS_SPARSE if embedder.sparse else ()),
        keyword_indexes=("site", "url", "entity_id", "page"),
        idf_sparse=(CORPUS_LEXICAL,) if lexical else (),
    )


class CultureBaseStore:
    """Entity records with route vectors, plus the corpus collection, in one backend."""

    def __init__(
        self, backend: Backend, embedder: EmbedderInfo, batch_size: int = 64, create: bool = True, full_vector: bool = False
    ) -> None:
        self.backend = backend
        self.full_vector = full_vector
        self.embedder = embedder
        self.batch_size = batch_size
        self._entities: Collection | None = None
        self._corpus: Collection | None = None
        self._create = create
        if create or backend.collection_info("entities") is not None:
            self._entities = backend.open_collection(self._entity_spec(), embedder, create=create)

    # -- collections --------------------------------------------------------------------
    def _entity_spec(self) -> CollectionSpec:
        """The entity spec; a collection built before the lexical index keeps working without it."""
        meta = self.backend.collection_info("entities")
        recorded = (meta or {}).get("sparse_vectors")
        dense = (meta or {}).get("dense_vectors")
        full = self.full_vector if meta is None or dense is None else ENTITY_FULL in dense
        return entity_spec(self.embedder, lexical=meta is None or recorded is None or ENTITY_LEXICAL in recorded, full=full)

    @property
    def has_lexical(self) -> bool:
        """Whether the entities carry the BM25 lexical vector (false for stores built before it: reindex)."""
        return ENTITY_LEXICAL in self.entities.spec.sparse

    @property
    def entities(self) -> Collection:
        if self._entities is None:
            self._entities = self.backend.open_collection(self._entity_spec(), self.embedder, create=self._create)
        return self._entities

    @property
    def corpus(self) -> Collection:
        """The crawled-pages corpus (created on first use); one built before the lexical vector keeps
        working dense-only until `kar kb reindex`."""
        if self._corpus is None:
            meta = self.backend.collection_info("corpus")
            recorded = (meta or {}).get("sparse_vectors")
            lexical = meta is None or recorded is None or CORPUS_LEXICAL in recorded
            self._corpus = self.backend.open_collection(corpus_spec(self.embedder, lexical=lexical), self.embedder, create=True)
        return self._corpus

    @property
    def has_corpus(self) -> bool:
        """Whether the corpus collection exists (nothing crawled or imported yet: False)."""
        return self._corpus is not None or self.backend.collection_info("corpus") is not None

    @property
    def corpus_has_lexical(self) -> bool:
        """Whether the corpus chunks carry the BM25 lexical vector (not in corpora built before it)."""
        return CORPUS_LEXICAL in self.corpus.spec.sparse

    # -- corpus pages -------------------------------------------------------------------
    def page_chunks(self, url: str) -> list[dict[str, Any]]:
        """Every stored chunk of one page (by canonical page URL, or the URL as stored), in chunk order."""
        from culturebase.entity import canonical_url

        if not self.has_corpus:
            return []
        page = canonical_url(url)
        found: dict[str, dict[str, Any]] = {}
        for flt in (PayloadFilter.of(page=page), PayloadFilter.of(url=list(dict.fromkeys([url, page])))):
            for p in self.corpus.scroll(flt=flt):
                found[p["_id"]] = p
        return sorted(found.values(), key=lambda p: (int(p.get("chunk") or 0), p["_id"]))

    def entity_page_chunks(self, entity_ids: Sequence[str], urls: Sequence[str] = (), limit: int = 200) -> list[dict[str, Any]]:
        """Chunks of the pages linked to entities: by ``entity_id`` or by one of their source URLs (as
        stored or canonical), fetched by filter, not by similarity; at most ``limit``."""
        from culturebase.entity import canonical_url

        if not self.has_corpus or (not entity_ids and not urls):
            return []
        found: dict[str, dict[str, Any]] = {}
        filters = [PayloadFilter.of(entity_id=list(entity_ids))] if entity_ids else []
        if urls:
            canon = list(dict.fromkeys(canonical_url(u) for u in urls))
            filters += [PayloadFilter.of(page=canon), PayloadFilter.of(url=list(dict.fromkeys([*urls, *canon])))]
        for flt in filters:
            for p in self.corpus.scroll(flt=flt):
                found.setdefault(p["_id"], p)
                if len(found) >= limit:
                    return list(found.values())
        return list(found.values())

    def delete_page(self, url: str) -> int:
        """Delete every chunk of one page; returns how many there were."""
        ids = [p["_id"] for p in self.page_chunks(url)]
        if ids:
            self.corpus.delete(ids)
            self.corpus.flush()
        return len(ids)

    def corpus_stats(self) -> dict[str, Any]:
        """Chunks, pages, pages by site, pages linked to an entity, and whether the lexical index is there."""
        if not self.has_corpus:
            return {"chunks": 0, "pages": 0, "by_site": {}, "entity_pages": 0, "lexical_index": None}
        pages: dict[str, tuple[str, bool]] = {}
        for p in self.corpus.scroll(batch=1024):
            key = str(p.get("page") or p.get("url") or "")
            site, linked = pages.get(key, (str(p.get("site") or ""), False))
            pages[key] = (site, linked or bool(p.get("entity_id")))
        by_site: dict[str, int] = {}
        for site, _ in pages.values():
            by_site[site] = by_site.get(site, 0) + 1
        return {
            "chunks": self.corpus.count(),
            "pages": len(pages),
            "by_site": dict(sorted(by_site.items())),
            "entity_pages": sum(1 for _, linked in pages.values() if linked),
            "lexical_index": self.corpus_has_lexical,
        }

    # -- entity writes ------------------------------------------------------------------
    def upsert_entities(
        self,
        entities: Sequence[Entity],
        dense: dict[str, np.ndarray],
        sparse: dict[str, Sequence[SparseVec]] | None = None,
    ) -> int:
        """Upsert entities with their route vectors (``dense[name]`` is an (n, dim) array); returns n."""
        points = self.entity_points(entities, dense, sparse)
        for start in range(0, len(points), self.batch_size):
            self.entities.upsert(points[start : start + self.batch_size])
        self.entities.flush()
        return len(points)

    # -- bulk import (layout by size, deferred indexing, disk guard) -----------------------
    def entity_points(
        self, entities: Sequence[Entity], dense: dict[str, np.ndarray], sparse: dict[str, Sequence[SparseVec]] | None = None
    ) -> list[PointRecord]:
        """Points for entities with their route vectors (``dense[name]`` is an (n, dim) array, or n rows
        where ``None`` leaves that entity without the vector: a route it has nothing to say on)."""
        n = len(entities)
        spec = self.entities.spec
        for name in spec.dense:
            if name not in dense or len(dense[name]) != n:
                raise StoreError(f"entity_points: vector {name!r} missing or not one row per entity")
        return [
            PointRecord(
                id=e.id,
                dense={name: dense[name][i] for name in spec.dense if dense[name][i] is not None},
                sparse={name: (sparse or {}).get(name, [{}] * n)[i] for name in spec.sparse},
                payload=e.to_payload(),
            )
            for i, e in enumerate(entities)
        ]

    def prepare_layout(self, incoming: int) -> None:
        """Before importing ``incoming`` entities: an empty entity collection is re-created with the
        storage layout chosen for that size (a non-empty one keeps its layout until `kar kb reindex`)."""
        coll = self.entities
        layout = getattr(coll, "layout", None)
        if getattr(coll, "read_only", None):  # refuse before anything is embedded
            from culturebase.store.base import StoreReadOnlyError

            raise StoreReadOnlyError(coll.read_only)  # type: ignore[attr-defined]
        if coll.count() > 0:
            return
        policy = getattr(self.backend, "layout_policy", None)
        if policy is None or layout == policy.choose(incoming, coll.spec.dense):
            return
        self.backend.drop_collection(coll.spec.name)
        self._entities = self.backend.open_collection(
            entity_spec(self.embedder, full=self.full_vector), self.embedder, create=True, expected_points=incoming
        )

    def bulk_writer(
        self, total: int | None = None, progress: Any = None, min_free_bytes: int = DEFAULT_MIN_FREE_BYTES, corpus: bool = False
    ) -> BulkWriter:
        """A :class:`~culturebase.store.bulk.BulkWriter` into the entity collection, or with
        ``corpus`` the corpus collection (use as a context manager)."""
        return BulkWriter(
            self.corpus if corpus else self.entities,
            total=total,
            disk_path=getattr(self.backend, "root", None),
            min_free_bytes=min_free_bytes,
            progress=progress,
            what="corpus chunks" if corpus else "entities",
        )

    def layout_info(self) -> dict[str, Any]:
        """The entity collection's storage layout (quantization, on-disk, HNSW vectors) and whether it is read-only."""
        if self._entities is None and self.backend.collection_info("entities") is None:
            return {}
        layout = getattr(self.entities, "layout", None)
        return {
            "layout": layout.to_meta() if layout is not None else None,
            "describe": layout.describe() if layout is not None else "older layout (float32 in RAM, no quantization)",
            "read_only": getattr(self.entities, "read_only", None),
        }

    def delete(self, ids: Sequence[str]) -> int:
        """Delete entities by id; returns how many existed."""
        existing = [p["_id"] for p in self.entities.retrieve(list(ids))]
        self.entities.delete(existing)
        self.entities.flush()
        return len(existing)

    # -- entity reads -------------------------------------------------------------------
    def get(self, entity_id: str) -> Entity | None:
        """One entity by id."""
        found = self.entities.retrieve([entity_id])
        return Entity.from_payload(found[0]) if found else None

    def get_many(self, ids: Sequence[str]) -> list[Entity]:
        """Entities by id (missing ones skipped), in order."""
        return [Entity.from_payload(p) for p in self.entities.retrieve(list(ids))]

    def count(self, language: str | None = None, site: str | None = None) -> int:
        """Number of entities, optionally filtered."""
        if self._entities is None and self.backend.collection_info("entities") is None:
            return 0
        return self.entities.count(PayloadFilter.of(language=language, sites=site))

    def iter_entities(self, batch: int = 256, language: str | None = None) -> Iterator[Entity]:
        """Every entity (export / reindex)."""
        for payload in self.entities.scroll(batch=batch, flt=PayloadFilter.of(language=language)):
            yield Entity.from_payload(payload)

    def find_by_name(self, names: Iterable[str], language: str | None = None) -> list[Entity]:
        """Entities whose name or an alias equals one of ``names`` after normalization."""
        keys = sorted({normalize_text(n) for n in names if normalize_text(n)})
        if not keys:
            return []
        flt = PayloadFilter.of(match_keys=keys, language=language)
        return [Entity.from_payload(p) for p in self.entities.scroll(batch=256, flt=flt)]

    def search(
        self,
        vector_name: str,
        vector: np.ndarray,
        limit: int = 10,
        language: str | None = None,
        site: str | None = None,
    ) -> list[tuple[Entity, float]]:
        """Nearest entities on one route vector."""
        hits = self.entities.search(vector_name, vector, limit, PayloadFilter.of(language=language, sites=site))
        return [(Entity.from_payload(h.payload), h.score) for h in hits]

    def search_sparse(
        self, vector_name: str, vector: SparseVec, limit: int = 10, language: str | None = None
    ) -> list[tuple[Entity, float]]:
        """Best entities by sparse lexical weights (bge-m3 only)."""
        if vector_name not in self.entities.spec.sparse:
            return []
        hits = self.entities.search_sparse(vector_name, vector, limit, PayloadFilter.of(language=language))
        return [(Entity.from_payload(h.payload), h.score) for h in hits]

    def stats(self) -> dict[str, Any]:
        """Counts by language and site, the backend and the embedder."""
        total = self.count()
        by_lang: dict[str, int] = {}
        by_site: dict[str, int] = {}
        if total:
            for e in self.iter_entities():
                by_lang[e.language] = by_lang.get(e.language, 0) + 1
                for s in e.sites:
                    by_site[s] = by_site.get(s, 0) + 1
        corpus_count = self.corpus.count() if self.backend.collection_info("corpus") is not None else 0
        return {
            "entities": total,
            "by_language": dict(sorted(by_lang.items())),
            "by_site": dict(sorted(by_site.items())),
            "corpus_chunks": corpus_count,
            "backend": self.backend.describe(),
            "storage": self.layout_info(),
            "embedder": {"name": self.embedder.name, "dim": self.embedder.dim, "sparse": self.embedder.sparse},
            "lexical_index": self.has_lexical if total else None,
        }

    def close(self) -> None:
        """Flush and release the backend (and its lock)."""
        self.backend.close()

    def __enter__(self) -> "CultureBaseStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_backend(settings: Settings) -> Backend:
    """The backend the settings choose: a Qdrant server when KAR_QDRANT_URL is set, else embedded."""
    if settings.qdrant_url:
        from culturebase.store.server import ServerBackend

        return ServerBackend(
            url=settings.qdrant_url,
            api_key=settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None,
            prefix=settings.qdrant_collection_prefix,
            shards=settings.qdrant_shards,
            replication_factor=settings.qdrant_replication_factor,
            write_consistency=settings.qdrant_write_consistency,
            hnsw_ef=settings.hnsw_ef,
            hnsw_m=settings.hnsw_m,
            hnsw_ef_construct=settings.hnsw_ef_construct,
            layout_policy=LayoutPolicy.from_settings(settings),
        )
    from culturebase.store.edge import EdgeBackend

    return EdgeBackend(
        settings.kb_path,
        hnsw_ef=settings.hnsw_ef,
        hnsw_m=settings.hnsw_m,
        hnsw_ef_construct=settings.hnsw_ef_construct,
        layout_policy=LayoutPolicy.from_settings(settings),
        search_threads=settings.search_threads,
    )


def open_store(settings: Settings, embedder: EmbedderInfo, create: bool = True) -> CultureBaseStore:
    """Open CultureBase for an embedder; raises StoreLockedError / EmbedderMismatchError with user-facing messages."""
    backend = open_backend(settings)
    try:
        return CultureBaseStore(
            backend, embedder, batch_size=settings.upsert_batch_size, create=create, full_vector=settings.entity_full_vector
        )
    except BaseException:
        backend.close()
        raise
