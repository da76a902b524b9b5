"""KnowledgeBase: CultureBase plus the embedder that built it — add, import, export, reindex.

Everything that writes entities goes through :meth:`KnowledgeBase.add`, which embeds the
route texts of each record (``full``, ``identity``, ``visual``, ``usage``; sparse lexical
weights too for bge-m3) in batches, computes the embedder-independent BM25 ``lexical``
vector (:mod:`retrieval.lexical`), and upserts them.  Imports validate every line first,
report the rejected ones with line numbers, and store the valid ones.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
from pydantic import ValidationError

from culturebase.entity import Entity
from culturebase.importers.report import ImportReport, Rejected, format_validation_error
from culturebase.settings import Settings
from culturebase.store import CollectionSpec, CultureBaseStore, EmbedderInfo, PointRecord, open_backend
from culturebase.store.culturebase import ENTITY_LEXICAL, corpus_spec, entity_spec
from retrieval.embedders import Embedder, build_embedder, embedder_info
from retrieval.lexical import encode_documents, lexical_text

log = logging.getLogger(__name__)
_COUNTS = threading.Lock()
Progress = Callable[[int], None]


# the report and its pieces live with the importers (culturebase/importers); re-exported here
__all__ = ["ImportFileError", "ImportReport", "KnowledgeBase", "Rejected", "format_validation_error"]


class ImportFileError(ValueError):
    """The import file as a whole cannot be read (missing, unreadable, not JSON/JSONL)."""


def parse_records(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """Yield ``(line_number, record, error)`` from our JSONL or the release's ``kb_entries.json`` (a JSON list)."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise ImportFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ImportFileError(f"{path}: is a directory, expected a .jsonl or .json file") from None
    except PermissionError:
        raise ImportFileError(f"{path}: permission denied") from None
    except UnicodeDecodeError as exc:
        raise ImportFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ImportFileError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        for i, rec in enumerate(data, start=1):
            if isinstance(rec, dict):
                yield i, rec, None
            else:
                yield i, None, f"record {i} is {type(rec).__name__}, expected a JSON object"
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            yield lineno, None, f"invalid JSON at column {exc.colno}: {exc.msg}"
            continue
        if not isinstance(rec, dict):
            yield lineno, None, f"expected a JSON object, got {type(rec).__name__}"
            continue
        yield lineno, rec, None


def record_to_entity(rec: dict[str, Any]) -> Entity:
    """Our record format, or the release's (``source`` instead of ``source_work``)."""
    if "source" in rec and "source_work" not in rec:
        return Entity.from_release(rec)
    return Entity.model_validate(rec)


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
        """The image route (:class:`retrieval.image_route.ImageRoute`), built on first use; None without settings."""
        settings = getattr(self, "settings", None)  # reindex builds a bare instance
        if getattr(self, "_image_route", None) is None and settings is not None:
            from culturebase.images import image_store_for
            from retrieval.image_embedder import build_image_embedder
            from retrieval.image_route import ImageRoute

            s = settings
            self._image_route = ImageRoute(
                self.store, image_store_for(s.data_dir, s.image_max_mb, s.max_image_pixels), tau=s.image_tau, crops=s.image_crops,
                embedder=build_image_embedder(s), embed_tau=s.image_embed_tau,
            )
        return getattr(self, "_image_route", None)

    @property
    def sound_store(self) -> Any:
        """The entity sounds and their landmark index (:class:`retrieval.sound_route.SoundStore`,
        ``KAR_DATA_DIR/sounds``), built on first use; None without settings."""
        settings = getattr(self, "settings", None)
        if getattr(self, "_sound_store", None) is None and settings is not None:
            from retrieval.sound_route import SoundStore

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
        """Route vectors for the entities, from one encode call over the distinct texts.

        Only the vectors the collection holds are embedded (``full`` only where the KB stores it), a
        text that several routes or entities share is embedded once, and an empty route gets no
        vector (``None``), except ``usage``, which falls back to the identity vector (see
        :meth:`Entity.route_texts`)."""
        spec = spec or self.store.entities.spec
        texts = [e.route_texts() for e in entities]
        rows: dict[str, list[str]] = {}
        for name in spec.dense:
            rows[name] = [t[name] or (t["identity"] if name == "usage" else "") for t in texts]
        unique: dict[str, int] = {}
        for name in spec.dense:
            for text in rows[name]:
                if text and text not in unique:
                    unique[text] = len(unique)
        batch = self.embedder.encode_documents(list(unique)) if unique else None
        with _COUNTS:  # chunks of an import are embedded on two threads
            self.texts_embedded = getattr(self, "texts_embedded", 0) + len(unique)
            self.chars_embedded = getattr(self, "chars_embedded", 0) + sum(len(t) for t in unique)
        dense: dict[str, list[np.ndarray | None]] = {
            name: [batch.dense[unique[t]] if t and batch is not None else None for t in rows[name]] for name in spec.dense
        }
        sparse: dict[str, list[dict[int, float]]] = {}
        for name in spec.sparse:
            route = name.removesuffix("_sparse")
            if name == ENTITY_LEXICAL or route not in rows or batch is None or batch.sparse is None:
                continue
            sparse[name] = [batch.sparse[unique[t]] if t else {} for t in rows[route]]
        if ENTITY_LEXICAL in spec.sparse:
            sparse[ENTITY_LEXICAL] = encode_documents(lexical_text(e) for e in entities)
        return dense, sparse

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
        from retrieval.dump_import import import_dump

        options.setdefault("chunk", self.settings.import_chunk if self.settings is not None else 256)
        return import_dump(self, path, **options)

    def add_corpus_chunks(self, chunks: Sequence[dict[str, Any]], writer: Any = None) -> int:
        """Embed and upsert page-text chunks into the corpus collection.

        Each chunk is a payload dict with at least ``id`` (stable, e.g. ``{url}#{n}``), ``text``,
        ``url``, ``title`` and ``site``; ``entity_id`` and ``chunk`` are optional.  With ``writer``
        (a :class:`~culturebase.store.bulk.BulkWriter` on the corpus collection) the batches go
        through it: its disk guard applies and indexing waits for its end.
        """
        for i, c in enumerate(chunks):
            missing = [k for k in ("id", "text", "url", "title", "site") if not c.get(k)]
            if missing:
                raise ValueError(f"corpus chunk {i}: missing or empty field(s) {', '.join(missing)}")
        payloads = [{"_id": c["id"], **{k: v for k, v in c.items() if k != "id"}} for c in chunks]
        stored = 0
        for batch in corpus_batches(self.embedder, payloads, self.embed_batch):
            if writer is not None:
                writer.write(batch)
            else:
                self.store.corpus.upsert(batch)
            stored += len(batch)
        if writer is None:
            self.store.corpus.flush()
        return stored

    # -- import / export ----------------------------------------------------------------
    def validate_file(self, path: Path, fetch_images: bool = True) -> tuple[list[Entity], ImportReport]:
        """Parse and validate a file (images are stored in the image folder); duplicates within the file are merged."""
        from retrieval.image_import import http_fetcher, resolve_images

        report = ImportReport(path=str(path))
        images = self.image_store
        fetch = http_fetcher(images.max_bytes) if images is not None and fetch_images else None
        by_id: dict[str, Entity] = {}
        for lineno, rec, error in parse_records(path):
            report.read += 1
            if error is not None:
                report.rejected.append(Rejected(lineno, error))
                continue
            assert rec is not None
            try:
                if images is not None:
                    rec, problems = resolve_images(dict(rec), lineno, Path(path).parent, images, fetch)
                    report.image_problems.extend(problems)
                if rec.get("audio") and self.sound_store is not None:
                    from retrieval.sound_import import resolve_audio

                    rec, problems = resolve_audio(dict(rec), lineno, Path(path).parent, self.sound_store, fetch)
                    report.image_problems.extend(problems)
                entity = record_to_entity(rec)
            except ValidationError as exc:
                report.rejected.append(Rejected(lineno, format_validation_error(exc)))
                continue
            except ValueError as exc:
                report.rejected.append(Rejected(lineno, str(exc)))
                continue
            if entity.id in by_id:
                by_id[entity.id] = by_id[entity.id].merged_with(entity)
                report.merged_duplicates += 1
            else:
                by_id[entity.id] = entity
        report.images = sum(len(e.images) for e in by_id.values())
        return list(by_id.values()), report

    def import_file(self, path: Path, progress: Progress | None = None) -> ImportReport:
        """Import a JSONL / release JSON file: valid records are stored, rejected ones reported by line."""
        entities, report = self.validate_file(path)
        report.stored = self.bulk_add(entities, progress=progress)
        return report

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
                return _reindex_reusing_vectors(
                    backend, old_store, info, settings.upsert_batch_size, progress, full=settings.entity_full_vector
                )
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
        self.store.close()

    def __enter__(self) -> "KnowledgeBase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _reindex_reusing_vectors(
    backend: Any, old_store: CultureBaseStore, info: EmbedderInfo, batch: int, progress: Progress | None, full: bool = False
) -> dict[str, Any]:
    """Copy every point with its stored vectors into new collections with the current layout (an
    older KB's unsearched ``full`` vectors are left behind unless ``full``)."""
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


def corpus_batches(embedder: Embedder, payloads: Iterable[dict[str, Any]], batch: int) -> Iterator[list[PointRecord]]:
    """Corpus chunks (payloads with ``_id`` and ``text``) re-embedded as point batches."""
    items = list(payloads)
    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        emb = embedder.encode_documents([p.get("text", "") for p in chunk])
        yield [
            PointRecord(
                id=p["_id"],
                dense={"text": emb.dense[i]},
                sparse={"text_sparse": emb.sparse[i]} if emb.sparse is not None else {},
                payload={k: v for k, v in p.items() if k != "_id"},
            )
            for i, p in enumerate(chunk)
        ]
