"""KnowledgeBase: CultureBase plus the embedder that built it — add, import, export, reindex.

Everything that writes entities goes through :meth:`KnowledgeBase.add`, which embeds the
route texts of each record (``full``, ``identity``, ``visual``, ``usage``; sparse lexical
weights too for bge-m3) in batches, computes the embedder-independent BM25 ``lexical``
vector (:mod:`retrieval.text.lexical`), and upserts them.  Imports validate every line first,
report the rejected ones with line numbers, and store the valid ones.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from culturebase.entity import Entity
from culturebase.importers.report import ImportReport, Rejected, format_validation_error
from culturebase.settings import Settings
from culturebase.store import CollectionSpec, CultureBaseStore, EmbedderInfo, PointRecord, open_backend
from culturebase.store.culturebase import CORPUS_LEXICAL, ENTITY_LEXICAL, corpus_spec, entity_spec
from retrieval.dump_import import ImportFileError, import_dump, read_dump, record_to_entity
from retrieval.embedders import Embedder, build_embedder, embedder_info
from retrieval.text.lexical import encode_document, encode_documents, lexical_text

log = logging.getLogger(__name__)
_COUNTS = threading.Lock()  # the embed counters, the text cache and the texts being embedded
#: route texts whose vectors embed_entities keeps (last used first out): 4,096 × 1,024-d ≈ 16 MB
TEXT_CACHE = 4096
Progress = Callable[[int], None]


# the report and its pieces live with the importers (culturebase/importers), the import itself in
# retrieval/dump_import; re-exported here
__all__ = ["ImportFileError", "ImportReport", "KnowledgeBase", "Rejected", "format_validation_error", "record_to_entity"]


class KnowledgeBase:
    """CultureBase store + embedder: the one way entities get embedded and stored."""

    def __init__(
        self, store: CultureBaseStore, embedder: Embedder, embed_batch: int = 64, settings: Settings | None = None
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.embed_batch = embed_batch
        self.settings = settings
        self._image_route: Any = None
        self.min_free_bytes = 256 * 2**20
        self.texts_embedded = 0  # distinct texts sent to the embedder (benches read it)
        self.chars_embedded = 0

    @property
    def image_store(self) -> Any:
        """The image folder (``KAR_DATA_DIR/images``), or None for a knowledge base opened without settings."""
        return self.image_route.images if self.image_route is not None else None

    @property
    def image_route(self) -> Any:
        """The image route (:class:`retrieval.images.route.ImageRoute`), built on first use; None without settings."""
        settings = getattr(self, "settings", None)  # reindex builds a bare instance
        if getattr(self, "_image_route", None) is None and settings is not None:
            from culturebase.images import image_store_for
            from retrieval.images.embedder import build_image_embedder
            from retrieval.images.route import ImageRoute

            s = settings
            self._image_route = ImageRoute(
                self.store, image_store_for(s.data_dir, s.image_max_mb, s.max_image_pixels), tau=s.image_tau, crops=s.image_crops,
                embedder=build_image_embedder(s), embed_tau=s.image_embed_tau, threads=s.image_query_threads,
            )
        return getattr(self, "_image_route", None)

    @property
    def sound_store(self) -> Any:
        """The entity sounds and their landmark index (:class:`retrieval.sounds.route.SoundStore`,
        ``KAR_DATA_DIR/sounds``), built on first use; None without settings."""
        settings = getattr(self, "settings", None)
        if getattr(self, "_sound_store", None) is None and settings is not None:
            from retrieval.sounds.route import SoundStore

            self._sound_store = SoundStore(settings.data_dir / "sounds")
        return getattr(self, "_sound_store", None)

    def index_sounds(self, entities: Sequence[Entity]) -> None:
        """Fingerprint the sounds of the entities that carry any (the sound route's index)."""
        with_audio = [e for e in entities if e.audio]
        if with_audio and self.sound_store is not None:
            self.sound_store.index_entities(with_audio)

    @classmethod
    def open(cls, settings: Settings, embedder: Embedder | None = None, create: bool = True) -> "KnowledgeBase":
        """Open the configured store for the configured (or given) embedder."""
        from culturebase.store import open_store

        from retrieval.embedders.serial import SerialEmbedder

        embedder = SerialEmbedder.wrap(embedder or build_embedder(settings))  # the only serialised part of grounding
        store = open_store(settings, embedder_info(embedder), create=create)
        kb = cls(store, embedder, embed_batch=max(settings.embedder_batch_size, 1), settings=settings)
        kb.min_free_bytes = settings.min_free_disk_mb * 2**20
        return kb

    # -- embedding ----------------------------------------------------------------------
    def embed_entities(
        self, entities: Sequence[Entity], spec: CollectionSpec | None = None
    ) -> tuple[dict[str, list[np.ndarray | None]], dict[str, list[dict[int, float]]]]:
        """Route vectors for the entities, from one encode call over the texts not embedded yet.

        Only the vectors the collection holds are embedded (``full`` only where the KB stores it), and
        a route the entity has nothing to say on gets no vector (``None``: see :meth:`Entity.route_texts`).
        A text that several routes or entities share is embedded once: within the call, and across
        calls through a bounded cache of the last :data:`TEXT_CACHE` texts (a work's shared text
        repeats across the chunks of an import)."""
        spec = spec or self.store.entities.spec
        texts = [e.route_texts() for e in entities]
        rows: dict[str, list[str]] = {name: [t[name] for t in texts] for name in spec.dense}
        wanted = list(dict.fromkeys(t for name in spec.dense for t in rows[name] if t))
        cache = self._text_cache()
        inflight = self.__dict__.setdefault("_inflight", {})
        known: dict[str, Any] = {}
        waiting: dict[str, Future[Any]] = {}
        new: list[str] = []
        with _COUNTS:  # chunks of an import are embedded on two threads: a text one of them is embedding is awaited
            for t in wanted:
                if t in cache:
                    known[t] = cache[t]
                    cache.move_to_end(t)
                elif t in inflight:
                    waiting[t] = inflight[t]
                else:
                    inflight[t] = Future()
                    new.append(t)
        try:
            batch = self.embedder.encode_documents(new) if new else None
        except BaseException as exc:
            with _COUNTS:
                for t in new:
                    inflight.pop(t).set_exception(exc)
            raise
        with _COUNTS:
            for i, t in enumerate(new):
                known[t] = cache[t] = (batch.dense[i], batch.sparse[i] if batch.sparse is not None else None)  # type: ignore[union-attr]
                inflight.pop(t).set_result(known[t])
            while len(cache) > TEXT_CACHE:
                cache.popitem(last=False)
            self.texts_embedded = getattr(self, "texts_embedded", 0) + len(new)
            self.chars_embedded = getattr(self, "chars_embedded", 0) + sum(len(t) for t in new)
        for t, future in waiting.items():
            known[t] = future.result()
        dense: dict[str, list[np.ndarray | None]] = {
            name: [known[t][0] if t else None for t in rows[name]] for name in spec.dense
        }
        sparse: dict[str, list[dict[int, float]]] = {}
        for name in spec.sparse:
            route = name.removesuffix("_sparse")
            if name == ENTITY_LEXICAL or route not in rows:
                continue
            if any(known[t][1] is None for t in rows[route] if t):
                continue  # an embedder without sparse weights
            sparse[name] = [known[t][1] if t else {} for t in rows[route]]  # type: ignore[misc]
        if ENTITY_LEXICAL in spec.sparse:
            sparse[ENTITY_LEXICAL] = encode_documents(lexical_text(e) for e in entities)
        return dense, sparse

    def _text_cache(self) -> "OrderedDict[str, tuple[np.ndarray, dict[int, float] | None]]":
        """The bounded text → (vector, sparse weights) cache of :meth:`embed_entities` (per embedder)."""
        cache = getattr(self, "_texts", None)
        if cache is None:
            cache = self._texts = OrderedDict()
        return cache

    def add(self, entities: Sequence[Entity], progress: Progress | None = None) -> int:
        """Embed and upsert entities in batches; returns how many were stored."""
        stored = 0
        for start in range(0, len(entities), self.embed_batch):
            chunk = list(entities[start : start + self.embed_batch])
            dense, sparse = self.embed_entities(chunk)
            self.store.upsert_entities(chunk, dense, sparse)
            if self.image_route is not None:
                self.image_route.index_entities(chunk)
            self.index_sounds(chunk)
            stored += len(chunk)
            if progress:
                progress(len(chunk))
        return stored

    def drop_media(self, entity_ids: Sequence[str]) -> None:
        """Drop these entities from the image and sound indexes (before they are deleted or written again
        with fewer images or sounds)."""
        ids = list(entity_ids)
        if not ids:
            return
        if self.image_route is not None:
            self.image_route.delete_entities(ids)
        if self.sound_store is not None:
            self.sound_store.delete_entities(ids)

    def split(self, entity_id: str, url: str) -> tuple[Entity, Entity]:
        """Take the record of page ``url`` back out of entity ``entity_id`` into its own entity; both are
        embedded and indexed again, with their own images and sounds (:func:`culturebase.identity.split`).
        Raises ``KeyError`` for an unknown id and :class:`~culturebase.identity.SplitError` for a split
        that cannot be made."""
        from culturebase.identity import split

        entity = self.store.get(entity_id)
        if entity is None:
            raise KeyError(entity_id)
        kept, out = split(entity, url)
        if self.store.get(out.id) is not None:
            from culturebase.identity import SplitError

            raise SplitError(f"an entity {out.id} already exists for {url}; delete or merge it first")
        self.drop_media([kept.id, out.id])
        if kept.id != entity_id:
            self.store.delete([entity_id])
        self.add([kept, out])
        return kept, out

    def bulk_add(self, entities: Sequence[Entity], progress: Progress | None = None) -> int:
        """Embed and store many entities as one bulk import: the layout is chosen for the resulting
        size (when the KB is empty), indexing waits until the end, upserts go in batches of
        ``KAR_UPSERT_BATCH_SIZE``, and a full disk or a refused batch raises
        :class:`~culturebase.store.bulk.BulkImportError` with the count stored so far."""
        self.store.prepare_layout(self.store.count() + len(entities))
        with self.store.bulk_writer(total=len(entities), progress=progress, min_free_bytes=self.min_free_bytes) as writer:
            self.write_entities(writer, entities)
        return writer.stored

    def write_entities(self, writer: Any, entities: Sequence[Entity]) -> int:
        """Embed entities and write them through an open :class:`~culturebase.store.bulk.BulkWriter`
        (batches of ``KAR_UPSERT_BATCH_SIZE``; the writer's disk guard applies); returns how many."""
        pending: list[PointRecord] = []
        size = self.store.batch_size
        before = writer.stored
        for start in range(0, len(entities), self.embed_batch):
            chunk = list(entities[start : start + self.embed_batch])
            dense, sparse = self.embed_entities(chunk)
            pending.extend(self.store.entity_points(chunk, dense, sparse or None))
            if self.image_route is not None:  # its own collection; a point whose entity never lands is skipped by fusion
                self.image_route.index_entities(chunk)
            self.index_sounds(chunk)
            while len(pending) >= size:
                writer.write(pending[:size])
                del pending[:size]
        writer.write(pending)
        return writer.stored - before

    def write_chunk(self, writer: Any, entities: Sequence[Entity], embedded: Any = None) -> int:
        """Embed a chunk of entities in one call (or take ``embedded``, what :meth:`embed_entities` returned
        for them) and write it through an open bulk writer (batches of ``KAR_UPSERT_BATCH_SIZE``); the
        image route indexes their images.  Returns how many."""
        if not entities:
            return 0
        dense, sparse = embedded if embedded is not None else self.embed_entities(entities)
        points = self.store.entity_points(entities, dense, sparse or None)
        if self.image_route is not None:
            self.image_route.index_entities(list(entities))
        self.index_sounds(entities)
        size = self.store.batch_size
        for start in range(0, len(points), size):
            writer.write(points[start : start + size])
        return len(points)

    def import_dump(self, path: Path, **options: Any) -> ImportReport:
        """Stream a dump (any format :mod:`culturebase.importers` reads) into the KB; see
        :func:`retrieval.dump_import.import_dump` for the options."""
        options.setdefault("chunk", self.settings.import_chunk if self.settings is not None else 256)
        return import_dump(self, path, **options)

    def add_corpus_chunks(self, chunks: Sequence[dict[str, Any]], writer: Any = None) -> int:
        """Embed and upsert page-text chunks into the corpus collection.

        Each chunk is a payload dict with at least ``id`` (stable, e.g. ``{url}#{n}``), ``text``,
        ``url``, ``title`` and ``site``; ``entity_id`` and ``chunk`` are optional.  Each chunk also
        gets ``page`` (its canonical page URL) and the BM25 ``lexical`` vector of its title and text.
        With ``writer`` (a :class:`~culturebase.store.bulk.BulkWriter` on the corpus collection) the
        batches go through it: its disk guard applies and indexing waits for its end.
        """
        from culturebase.entity import canonical_url

        for i, c in enumerate(chunks):
            missing = [k for k in ("id", "text", "url", "title", "site") if not c.get(k)]
            if missing:
                raise ValueError(f"corpus chunk {i}: missing or empty field(s) {', '.join(missing)}")
        from retrieval.text.scripts import script_group

        payloads = [
            {"_id": c["id"], **{k: v for k, v in c.items() if k != "id"}, "page": c.get("page") or canonical_url(c["url"])}
            for c in chunks
        ]
        for p in payloads:
            p.setdefault("script", script_group(p))
        lexical = CORPUS_LEXICAL in self.store.corpus.spec.sparse
        stored = 0
        for batch in corpus_batches(self.embedder, payloads, self.embed_batch, lexical=lexical):
            if writer is not None:
                writer.write(batch)
            else:
                self.store.corpus.upsert(batch)
            stored += len(batch)
        if writer is None:
            self.store.corpus.flush()
        return stored

    def drop_stale_chunks(self, chunks: Sequence[dict[str, Any]]) -> int:
        """Before storing one page's ``chunks``: delete that page's stored chunks that are not among them
        (a page imported again with fewer chunks leaves none behind); returns how many."""
        if not chunks:
            return 0
        keep = {c["id"] for c in chunks}
        stale = [p["_id"] for p in self.store.page_chunks(str(chunks[0]["url"])) if p["_id"] not in keep]
        if stale:
            self.store.corpus.delete(stale)
        return len(stale)

    def replace_page(self, chunks: Sequence[dict[str, Any]], writer: Any = None) -> int:
        """Store one page's chunks in place of whatever that page had (idempotent by canonical URL);
        returns the chunks stored."""
        self.drop_stale_chunks(chunks)
        return self.add_corpus_chunks(chunks, writer=writer) if chunks else 0

    # -- import / export ----------------------------------------------------------------
    def validate_file(self, path: Path, fetch_images: bool | None = None) -> tuple[list[Entity], ImportReport]:
        """Read, validate and merge a dump without embedding or storing it (:func:`retrieval.dump_import.read_dump`,
        the import's own reader); images are stored in the image folder when this KB has one."""
        return read_dump(Path(path), images=self.image_store, fetch_images=fetch_images, sounds=self.sound_store)

    def import_file(self, path: Path, progress: Progress | None = None) -> ImportReport:
        """Import a file in any format :mod:`culturebase.importers` reads (streamed, see :meth:`import_dump`):
        valid records are stored, rejected ones reported by line."""
        return self.import_dump(Path(path), progress=progress)

    def optimize(self) -> None:
        """Let the engine build its indexes now (after bulk writes)."""
        self.store.entities.optimize()

    def export(self, out: IO[str], language: str | None = None) -> int:
        """Write every entity as JSONL; returns the count."""
        n = 0
        for entity in self.store.iter_entities(language=language):
            out.write(entity.model_dump_json() + "\n")
            n += 1
        return n

    # -- reindex ------------------------------------------------------------------------
    @staticmethod
    def reindex(
        settings: Settings, embedder: Embedder, progress: Progress | None = None, re_embed: bool = False
    ) -> dict[str, Any]:
        """Rebuild every collection with the current settings and swap the new ones in.

        When the collections were built by ``embedder`` already (only index or storage settings
        changed, or an older layout is migrated) the stored vectors are copied as they are;
        otherwise (or with ``re_embed``) every entity and corpus chunk is re-embedded."""
        backend = open_backend(settings)
        try:
            info = embedder_info(embedder)
            old = backend.collection_info("entities")
            if old is None:
                raise ImportFileError("nothing to reindex: CultureBase is empty (kar kb import FILE first)")
            old_info = EmbedderInfo(old["embedder"], int(old["dim"]), bool(old.get("sparse")))
            old_store = CultureBaseStore(backend, old_info, create=False)
            if old_info == info and not re_embed:
                out = _reindex_reusing_vectors(
                    backend, old_store, info, settings.upsert_batch_size, progress, full=settings.entity_full_vector
                )
                if old.get("calibration"):  # the same embedder's vectors: its calibration record still holds
                    backend.set_collection_meta("entities", "calibration", old["calibration"])
                return out
            entities = list(old_store.iter_entities())
            corpus_payloads = (
                list(old_store.corpus.scroll()) if backend.collection_info("corpus") is not None else []
            )
            kb = KnowledgeBase.__new__(KnowledgeBase)
            kb.embedder, kb.embed_batch = embedder, settings.embedder_batch_size

            def entity_batches() -> Iterator[list[PointRecord]]:
                for start in range(0, len(entities), kb.embed_batch):
                    chunk = entities[start : start + kb.embed_batch]
                    spec = entity_spec(info, full=settings.entity_full_vector)
                    dense, sparse = kb.embed_entities(chunk, spec)
                    yield [
                        PointRecord(
                            id=e.id,
                            dense={n: dense[n][i] for n in spec.dense if dense[n][i] is not None},
                            sparse={n: sparse[n][i] for n in spec.sparse},
                            payload=e.to_payload(),
                        )
                        for i, e in enumerate(chunk)
                    ]
                    if progress:
                        progress(len(chunk))

            backend.replace_collection(
                entity_spec(info, full=settings.entity_full_vector), info, entity_batches(), expected_points=len(entities)
            )
            if corpus_payloads:
                backend.replace_collection(
                    corpus_spec(info),
                    info,
                    corpus_batches(embedder, corpus_payloads, kb.embed_batch),
                    expected_points=len(corpus_payloads),
                )
            return {
                "entities": len(entities),
                "corpus_chunks": len(corpus_payloads),
                "from": old_info.describe(),
                "to": info.describe(),
                "reused_vectors": False,
            }
        finally:
            backend.close()

    def close(self) -> None:
        route = getattr(self, "_image_route", None)
        if route is not None:
            route.close()
        self.store.close()

    def __enter__(self) -> "KnowledgeBase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _reindex_reusing_vectors(
    backend: Any, old_store: CultureBaseStore, info: EmbedderInfo, batch: int, progress: Progress | None, full: bool = False
) -> dict[str, Any]:
    """Copy every point with its stored vectors into new collections with the current layout (an
    older KB's unsearched ``full`` vectors are left behind unless ``full``, and so are its ``visual``
    vectors of entities without a visual description and ``usage`` copies of entities without
    cultural usage: see :meth:`Entity.route_texts`)."""
    counts: dict[str, int] = {}
    for name, spec in (("entities", entity_spec(info, full=full)), ("corpus", corpus_spec(info))):
        if backend.collection_info(name) is None:
            counts[name] = 0
            continue
        source = old_store.entities if name == "entities" else old_store.corpus
        total = source.count()
        counts[name] = total

        def batches(src: Any = source, what: str = name) -> Iterator[list[PointRecord]]:
            buf: list[PointRecord] = []
            for point in src.scroll_points(batch=batch):
                if what == "corpus" and not point.sparse.get(CORPUS_LEXICAL):  # a corpus built before the lexical vector
                    point.sparse[CORPUS_LEXICAL] = encode_document(corpus_lexical_text(point.payload))
                if what == "entities":  # a KB built before issue 31.2: no vector on a route the entity does not describe
                    if not point.payload.get("visual_desc"):
                        point.dense.pop("visual", None)
                    if not point.payload.get("cultural_usage"):
                        point.dense.pop("usage", None)
                buf.append(point)
                if len(buf) >= batch:
                    yield buf
                    if progress and what == "entities":
                        progress(len(buf))
                    buf = []
            if buf:
                yield buf
                if progress and what == "entities":
                    progress(len(buf))

        backend.replace_collection(spec, info, batches(), expected_points=total)
    return {
        "entities": counts["entities"],
        "corpus_chunks": counts["corpus"],
        "from": info.describe(),
        "to": info.describe(),
        "reused_vectors": True,
    }


def corpus_lexical_text(payload: dict[str, Any]) -> str:
    """What a corpus chunk is indexed by lexically: its page title and its text."""
    return f"{payload.get('title') or ''}\n{payload.get('text') or ''}"


def corpus_batches(
    embedder: Embedder, payloads: Iterable[dict[str, Any]], batch: int, lexical: bool = True
) -> Iterator[list[PointRecord]]:
    """Corpus chunks (payloads with ``_id`` and ``text``) embedded as point batches (with the BM25
    ``lexical`` vector of title and text unless ``lexical`` is False)."""
    items = list(payloads)
    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        emb = embedder.encode_documents([p.get("text", "") for p in chunk])
        out = []
        for i, p in enumerate(chunk):
            sparse = {"text_sparse": emb.sparse[i]} if emb.sparse is not None else {}
            if lexical:
                sparse[CORPUS_LEXICAL] = encode_document(corpus_lexical_text(p))
            out.append(PointRecord(id=p["_id"], dense={"text": emb.dense[i]}, sparse=sparse, payload={k: v for k, v in p.items() if k != "_id"}))
        yield out
