"""Streaming import of a dump into CultureBase: read, validate, merge, embed and write in chunks.

The dump is read entry by entry (:mod:`culturebase.importers`), so memory does not grow with its
size: a chunk of ``KAR_IMPORT_CHUNK`` entities is held, embedded in one call (distinct texts
only, see :meth:`KnowledgeBase.embed_entities`) and written through the bulk writer, while the
next chunk is read and validated on another thread and the previous one is written while this one is
embedded (the embedder works while the dump is parsed and the store writes).
What grows is the set of ids already written and, for dumps keyed by title, title → id (tens
of bytes an entity), used to merge a duplicate that comes after its first copy was written.

It is the one import path: ``kar kb import``, ``POST /v1/entities/import``,
:meth:`KnowledgeBase.import_dump` and :func:`read_dump` (validate and merge without storing: tests,
benches, ``--dry-run``) all read through :mod:`culturebase.importers`.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from culturebase.entity import Entity
from culturebase.identity import KEPT_APART, TWO_PAGES, IdentityIndex, Signature, alias_collision, dissolved, event, join, join_rule, repair
from culturebase.importers import DumpEntry, DumpError, ImportReport, Rejected, format_validation_error, open_dump
from culturebase.importers.base import first_bytes, ijson_module, open_binary
from culturebase.importers.kymkb import find_kymkb_file
from culturebase.importers.moegirl import CHAR2SUBJECT

__all__ = ["ImportFileError", "count_entries", "import_dump", "read_dump", "record_to_entity"]

log = logging.getLogger(__name__)
Progress = Callable[[int], None]
#: stores a record's images and sound clips (record, entry index) and returns the record that names them
Resolver = Callable[[dict[str, Any], int], dict[str, Any]]
#: formats whose images are the operator's own (paths, stored forms, URLs): fetched unless told not to
OWN_FORMATS = ("jsonl", "release")
#: formats counted by line (the rest by entry index)
LINE_FORMATS = ("jsonl", "kymkb", "crawl")


class ImportFileError(ValueError):
    """The import file as a whole cannot be read (missing, unreadable, not a format we read)."""


def record_to_entity(record: dict[str, Any]) -> Entity:
    """Our record format, or the release's (``source`` instead of ``source_work``)."""
    if "source" in record and "source_work" not in record:
        return Entity.from_release(record)
    return Entity.model_validate(record)


def count_entries(path: Path, fmt: str) -> int | None:
    """How many entries a dump holds, counted without converting them (for the progress bar's ETA and
    the storage layout); None when it cannot be counted cheaply."""
    ijson = ijson_module()
    try:
        if fmt == "moegirl":
            target = path if path.is_file() else path / CHAR2SUBJECT
            with open_binary(target) as fh:
                return sum(1 for _ in ijson.kvitems(fh, ""))
        if fmt == "kymkb":
            target = path if path.is_file() else find_kymkb_file(path)
            if target is None:
                return sum(1 for _ in path.glob("*/metadata.json"))
        else:
            target = path
        if first_bytes(target, 4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
            with open_binary(target) as fh:
                return sum(1 for _ in ijson.items(fh, "item", multiple_values=True))
        with open_binary(target) as fh:
            return sum(1 for line in fh if line.strip())
    except Exception:  # a cut or broken dump: the import itself reports where
        return None


def _validated(
    entries: Iterator[DumpEntry],
    report: ImportReport,
    categories: set[str] | None,
    resolve: Resolver | None,
    drop_images: bool,
) -> Iterator[tuple[DumpEntry, Entity]]:
    """Valid entities of the dump; rejections, category skips, notes and the stop go into the report."""
    for entry in entries:
        if entry.stopped:
            report.stopped = entry.error
            return
        report.read += 1
        if entry.error is not None:
            report.rejected.append(Rejected(entry.where, entry.error))
            continue
        if categories is not None and (entry.category or "").casefold() not in categories:
            key = entry.category or "(none)"
            report.skipped_category[key] = report.skipped_category.get(key, 0) + 1
            continue
        record = dict(entry.record or {})
        try:
            if drop_images:
                if record.pop("image", None):
                    report.images_not_fetched += 1
                record.pop("audio", None)  # a dry run stores no sound
            elif resolve is not None:
                record = resolve(record, entry.where)
            entity = record_to_entity(record)
        except ValidationError as exc:
            report.rejected.append(Rejected(entry.where, format_validation_error(exc)))
            continue
        except ValueError as exc:
            report.rejected.append(Rejected(entry.where, str(exc)))
            continue
        for field_name, why in entry.notes:
            report.note(entry.where, field_name, why)
        yield entry, entity


Joins = list[tuple[str, Entity, str]]  # (id of an entity handed out in an earlier chunk, record, rule)


def _chunks(
    validated: Iterator[tuple[DumpEntry, Entity]], report: ImportReport, chunk: int
) -> Iterator[tuple[list[Entity], Joins]]:
    """Chunks of distinct entities and the records to join into entities of earlier chunks, by the
    identity rules (:mod:`culturebase.identity`): records of this chunk are joined here, those of an
    earlier chunk by the writer (into the stored copy).  Every join, and every record kept apart from
    an entity whose alias is its name, goes into the report."""
    seen = IdentityIndex()
    pending: dict[str, Entity] = {}
    later: Joins = []
    for entry, entity in validated:
        target, rule = seen.match(entity, entry.same_as)
        if target is None or rule is None:
            namesake = seen.namesake(entity)
            owner = seen.alias_owner(entity)
            if namesake is not None:
                report.joins.add(event("kept_apart", "two_pages", entity, namesake, TWO_PAGES))
            elif owner is not None:
                report.joins.add(event("kept_apart", "alias_only", entity, owner, KEPT_APART))
            seen.add(entity)
            pending[entity.id] = entity
        else:
            report.joins.add(event("merge", rule, entity, target))
            seen.joined(target.id, entity)
            if target.id in pending:
                pending[target.id] = join(pending[target.id], entity, rule)
            else:
                later.append((target.id, entity, rule))
        if len(pending) >= chunk:
            yield list(pending.values()), later
            pending, later = {}, []
    if pending or later:
        yield list(pending.values()), later


def _prefetched(source: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """Items of ``source`` produced on a thread, ``depth`` ahead of the consumer (parsing overlaps embedding)."""
    q: queue.Queue[Any] = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def run() -> None:
        try:
            for item in source:
                while not stop.is_set():
                    try:
                        q.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(("done", done))
        except BaseException as exc:  # handed to the consumer
            q.put(("error", exc))

    thread = threading.Thread(target=run, name="kar-import-reader", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "done":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join(timeout=5)


def _against_store(kb: Any, entities: list[Entity], report: ImportReport) -> tuple[list[Entity], list[str]]:
    """Entities of a chunk joined with what the KB held before this import, by the identity rules: a
    stored page read again refreshes its part (keeping stored images a record without any would drop),
    a record one with a stored entity is joined into it, a stored entity holding a page these rules no
    longer join to it is repaired (the page taken out).  Returns what to write and the ids to delete."""
    stored = {e.id: e for e in kb.store.get_many([e.id for e in entities])}
    named: dict[str, list[str]] = {}  # name or alias key -> ids of stored entities holding it
    for cand in kb.store.find_by_name(sorted({n for e in entities for n in e.names})):
        stored.setdefault(cand.id, cand)
        for key in cand.match_keys:
            named.setdefault(key, []).append(cand.id)
    out: dict[str, Entity] = {}
    gone: list[str] = []
    for entity in entities:
        new = Signature.of(entity)
        match: tuple[Entity | None, str | None] = (None, None)
        for cand in [stored[entity.id]] if entity.id in stored else []:
            match = (out.get(cand.id, cand), join_rule(new, Signature.of(cand)))
        for cid in dict.fromkeys(i for key in entity.match_keys for i in named.get(key, ())):
            if cid == entity.id or cid not in stored:
                continue
            cand = out.get(cid, stored[cid])
            left = repair(cand, entity)
            if left is not None:
                report.joins.add(event("split", "repair", entity, cand, "an older join these rules no longer make"))
                out[left.id] = stored[left.id] = cand = left
                kb.drop_media([left.id])
            rule = join_rule(new, Signature.of(cand))
            if rule and match[0] is None:
                match = (cand, rule)
                report.joins.add(event("merge", rule, entity, cand))
            elif not rule and alias_collision(entity, cand):
                report.joins.add(event("kept_apart", "alias_only", entity, cand, KEPT_APART))
        target, rule = match
        if target is None or rule is None:
            out[entity.id] = entity
            continue
        joined = join(target, entity, rule, refresh=True)
        for split_event in dissolved(target, joined):
            report.joins.add(split_event)
        if joined.id != target.id:
            gone.append(target.id)
            out.pop(target.id, None)
            stored.pop(target.id, None)
        out[joined.id] = stored[joined.id] = joined
    return list(out.values()), [g for g in gone if g not in out]


def _pipeline(
    kb: Any,
    writer: Any,
    chunks: Iterator[tuple[list[Entity], list[Entity]]],
    written: set[str],
    report: ImportReport,
    ahead: int = 2,
    had_entities: bool = False,
) -> None:
    """Embed up to ``ahead`` chunks on worker threads while the oldest embedded one is written (store
    upserts, image route), so that the embedder never waits for the store and a remote embedder's
    requests of two chunks fill each other's last round; chunks are written in order."""
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    pending: deque[tuple[list[Entity], Future[Any]]] = deque()
    with ThreadPoolExecutor(ahead, thread_name_prefix="kar-import-embed") as pool:
        for new, again in chunks:
            if again:  # records one with an entity of an earlier chunk: joined into the stored copy (or the one on its way)
                waiting = {e.id: e for chunk, _ in pending for e in chunk}
                targets = {e.id: e for e in kb.store.get_many([t for t, _, _ in again if t not in waiting])}
                targets.update(waiting)
                for target, record, rule in again:
                    if target in targets:
                        targets[target] = join(targets[target], record, rule)
                new = new + [targets[t] for t in dict.fromkeys(t for t, _, _ in again) if t in targets]
            if had_entities:
                new, gone = _against_store(kb, new, report)
                if gone:
                    kb.drop_media(gone)
                    kb.store.delete(gone)
            pending.append((new, pool.submit(kb.embed_entities, new)))
            if len(pending) > ahead:
                _write(kb, writer, pending.popleft(), written, report)
        while pending:
            _write(kb, writer, pending.popleft(), written, report)


def _write(kb: Any, writer: Any, pending: tuple[list[Entity], Any], written: set[str], report: ImportReport) -> None:
    entities, future = pending
    kb.write_chunk(writer, entities, future.result())
    written.update(e.id for e in entities)
    report.images += sum(len(e.images) for e in entities)


def _media_resolver(
    path: Path,
    fmt: str,
    images: Any,
    sounds: Any,
    fetcher: Callable[[str], bytes] | None,
    fetch_images: bool,
    report: ImportReport,
) -> Resolver:
    """What stores a record's images (and sound clips, with ``sounds``) and fills the report with their problems.

    Remote media are fetched only with ``fetch_images``, by ``fetcher`` (None: the default one for ``fmt``)."""
    from retrieval.images.importing import guarded_fetcher, http_fetcher, resolve_images

    if fetcher is None:  # the operator's own file may name any host; a published dump's URLs must be public
        fetcher = (http_fetcher if fmt in OWN_FORMATS else guarded_fetcher)(images.max_bytes)
    base_dir = path.parent if path.is_file() else path
    fetch = fetcher if fetch_images else None

    def resolve(record: dict[str, Any], where: int) -> dict[str, Any]:
        record, problems = resolve_images(record, where, base_dir, images, fetch)
        report.image_problems.extend(problems)
        if record.get("audio"):  # entity sound clips: stored and fingerprinted (retrieval/sounds/importing.py)
            from retrieval.sounds.importing import resolve_audio

            if sounds is not None:
                record, problems = resolve_audio(record, where, base_dir, sounds, fetch)
                report.image_problems.extend(problems)
        return record

    return resolve


def _open_dump(
    path: Path,
    fmt: str | None,
    images: Any,
    fetch_images: bool | None,
    fetcher: Callable[[str], bytes] | None,
    categories: Sequence[str] | None,
    dry_run: bool,
    sounds: Any = None,
) -> tuple[str, Iterator[tuple[DumpEntry, Entity]], ImportReport]:
    """The format, the stream of valid entities and the report they fill (see :func:`import_dump`)."""
    try:
        fmt, entries = open_dump(path, fmt)
    except DumpError as exc:
        raise ImportFileError(str(exc)) from None
    unit = "line" if fmt in LINE_FORMATS else "entry"
    if fmt == "crawl" and path.is_file() and first_bytes(path, 4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
        unit = "entry"  # `scrapy crawl -o items.json`: a JSON array
    report = ImportReport(path=str(path), format=fmt, unit=unit, dry_run=dry_run)
    fetch_images = fmt in OWN_FORMATS if fetch_images is None else fetch_images
    resolve = None if images is None else _media_resolver(path, fmt, images, sounds, fetcher, fetch_images, report)
    cats = {c.strip().casefold() for c in categories if c.strip()} if categories else None
    drop_images = dry_run or (fmt not in OWN_FORMATS and (not fetch_images or resolve is None))  # a dump's image URL: fetched or counted
    return fmt, _validated(entries, report, cats, resolve, drop_images=drop_images), report


def read_dump(
    path: Path,
    fmt: str | None = None,
    images: Any = None,
    fetch_images: bool | None = None,
    fetcher: Callable[[str], bytes] | None = None,
    categories: Sequence[str] | None = None,
    sounds: Any = None,
) -> tuple[list[Entity], ImportReport]:
    """Every valid entity of a dump, duplicates merged, without embedding or storing them, and the report.

    The same reader, validation and merge as :func:`import_dump` (the list is held whole: for tests,
    benches and small files).  With ``images`` (an :class:`~culturebase.images.ImageStore`) image
    fields are resolved and stored there as an import would; without, they are counted as not fetched."""
    path = Path(path)
    fmt, validated, report = _open_dump(path, fmt, images, fetch_images, fetcher, categories, dry_run=images is None, sounds=sounds)
    report.dry_run = False
    by_id: dict[str, Entity] = {}
    try:
        for new, again in _chunks(validated, report, 1 << 30):
            by_id.update((e.id, e) for e in new)
            for target, record, rule in again:
                by_id[target] = join(by_id[target], record, rule)
    except DumpError as exc:
        raise ImportFileError(str(exc)) from None
    report.images = sum(len(e.images) for e in by_id.values())
    return list(by_id.values()), report


def import_dump(
    kb: Any,
    path: Path,
    fmt: str | None = None,
    categories: Sequence[str] | None = None,
    fetch_images: bool | None = None,
    fetcher: Callable[[str], bytes] | None = None,
    progress: Progress | None = None,
    total: Callable[[int | None], None] | None = None,
    chunk: int = 256,
    dry_run: bool = False,
) -> ImportReport:
    """Import a dump (format given or detected) into ``kb`` (a :class:`~retrieval.knowledge_base.KnowledgeBase`);
    returns the report by reason.

    ``fetch_images`` (default: yes for our JSONL / the release, no for the published dumps) fetches
    image URLs with ``fetcher`` (default: any host for our JSONL and the release, as before; only public
    addresses, every redirect hop checked, for a published dump) through the image store's checks; ``total`` is told the entry count once
    known (progress bar); ``progress`` is called with the number of entities written.  ``dry_run`` reads,
    validates and merges the whole dump and reports what would be stored, without embedding or storing
    anything (no image is fetched or stored: image fields count as not fetched)."""
    path = Path(path)
    images = None if dry_run else kb.image_store
    sounds = None if dry_run else getattr(kb, "sound_store", None)
    fmt, validated, report = _open_dump(path, fmt, images, fetch_images, fetcher, categories, dry_run, sounds=sounds)
    count = count_entries(path, fmt)
    if total is not None:
        total(count)
    written: set[str] = set()
    if dry_run:
        try:
            for new, _ in _chunks(validated, report, chunk):
                written.update(e.id for e in new)
        except DumpError as exc:
            raise ImportFileError(str(exc)) from None
        report.stored = len(written)
        return report
    try:
        before = kb.store.count()
        kb.store.prepare_layout(before + (count or 0))
        with kb.store.bulk_writer(total=count, progress=progress, min_free_bytes=kb.min_free_bytes) as writer:
            _pipeline(kb, writer, _prefetched(_chunks(validated, report, chunk)), written, report, had_entities=before > 0)
    except DumpError as exc:
        raise ImportFileError(str(exc)) from None
    report.stored = len(written)
    return report
