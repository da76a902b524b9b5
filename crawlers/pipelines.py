"""Item pipelines: normalize pages into CultureBase entities, merge duplicates, embed and upsert in batches.

``NormalizePipeline`` turns a :class:`~crawlers.items.PageItem` into a validated
:class:`~culturebase.entity.Entity` or drops it with a counted reason
(``kar/dropped/<reason>``).  ``CultureBasePipeline`` joins records that are one entity by the
identity rules of :mod:`culturebase.identity` (same canonical URL; same name + source work on
different sites; a page the site declares to be the record), within the crawl and against records
already in the store, records every join by rule (``kar/merged/<rule>``, the job's ``merges``),
keeps apart a record whose name is only another entity's alias (``kar/kept_apart``), takes out
of a stored entity a page these rules no longer join to it (``kar/split``), then embeds and upserts them
in batches on a worker thread (the crawl keeps downloading meanwhile), stores each page's
cleaned text as corpus chunks, and records the page state that incremental re-crawls and
resumed jobs rely on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from scrapy.exceptions import DropItem

from culturebase.entity import Entity, canonical_url, make_entity_id
from culturebase.identity import (
    DECLARED, KEPT_APART, TWO_PAGES, IdentityIndex, JoinEvent, JoinLog, Signature, alias_collision, dissolved, event, join, join_rule,
    repair,
)
from culturebase.importers.crawl import MIN_CONTENT_CHARS, item_to_entity  # the one mapping, shared with `kar kb import --format crawl`
from crawlers.runner import crawl_db_of, job_id_of, kar_settings_of
from crawlers.text import chunk_text

log = logging.getLogger(__name__)
__all__ = ["MIN_CONTENT_CHARS", "CultureBasePipeline", "NormalizePipeline", "item_to_entity"]


def drop(crawler: Any, item: Any, reason: str) -> DropItem:
    """Count a dropped item under its reason (and mark its page done for a resumed job)."""
    crawler.stats.inc_value(f"kar/dropped/{reason}")
    job_id = job_id_of(crawler)
    key = item.get("page_key") if hasattr(item, "get") else None
    if job_id and key:
        crawl_db_of(crawler).mark_pages(job_id, [key], f"dropped: {reason}")
    return DropItem(f"{reason}: {item.get('url') if hasattr(item, 'get') else item!r}")


def _short_validation_reason(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"] if not isinstance(x, int)) or "record"
    return f"invalid {loc}"


class NormalizePipeline:
    """Validate a page item and attach its ``Entity``; invalid items are dropped with a counted reason."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Any) -> "NormalizePipeline":
        return cls(crawler)

    def process_item(self, item: Any) -> Any:
        if item.get("drop_reason"):
            raise drop(self.crawler, item, item["drop_reason"])
        try:
            item["entity"] = item_to_entity(item)
        except ValidationError as exc:
            raise drop(self.crawler, item, _short_validation_reason(exc)) from None
        except ValueError as exc:
            raise drop(self.crawler, item, str(exc)) from None
        return item


@dataclass
class _Batch:
    entities: dict[str, Entity] = field(default_factory=dict)
    pages: list[tuple[str, str | None, str | None, int | None, str]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    replaced: set[str] = field(default_factory=set)  # ids of entities a join in this batch replaced


class CultureBasePipeline:
    """Merge duplicates and write entities (+ corpus chunks) to CultureBase in embedded batches."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        s = crawler.settings
        self.store_enabled = s.getbool("KAR_STORE", True)
        self.corpus_enabled = s.getbool("KAR_CORPUS", True)
        self.flush_every = max(1, s.getint("KAR_FLUSH_EVERY", 64))
        self.kb: Any = None
        self.db: Any = None
        self.kb_id = ""
        self.job_id = job_id_of(crawler)
        self.seen: dict[str, Entity] = {}  # id -> latest version within this crawl
        self.index = IdentityIndex()  # which of them a record is one with
        self.same_as: dict[str, str] = {}  # id -> the page the site declares the record to be
        self.joins = JoinLog()
        self.pages_of: dict[str, set[str]] = {}  # id -> page keys fetched for it in this crawl
        self._gone: set[str] = set()  # (worker thread) stored ids a join of the batch being written replaced
        self.batch = _Batch()
        self._pool: Any = None
        self._inflight: list[Any] = []
        self._closing = False
        self._writers: dict[str, Any] = {}  # "entities" / "corpus" -> BulkWriter held for the whole job

    @classmethod
    def from_crawler(cls, crawler: Any) -> "CultureBasePipeline":
        return cls(crawler)

    # -- lifecycle ------------------------------------------------------------------------
    def open_spider(self) -> None:
        if self.job_id or self.store_enabled:
            self.db = crawl_db_of(self.crawler)
        if not self.store_enabled:
            return
        from twisted.python.threadpool import ThreadPool

        from crawlers.jobs import kb_key
        from retrieval.knowledge_base import KnowledgeBase

        settings = kar_settings_of(self.crawler)
        factory = self.crawler.settings.get("KAR_EMBEDDER_FACTORY")  # "pkg.mod:callable(settings)"; tests
        try:
            embedder = None
            if factory:
                from scrapy.utils.misc import load_object

                embedder = load_object(factory.replace(":", "."))(settings)
            self.kb = KnowledgeBase.open(settings, embedder=embedder)
        except Exception as exc:
            self.stats.set_value("kar/fatal", f"cannot open CultureBase: {exc}")
            raise
        self.kb_id = kb_key(settings)
        if self.kb.store.count() == 0:
            cleared = self.db.clear_page_state(self.kb_id)
            if cleared:
                log.info("CultureBase is empty: forgot %d page states, every page is fetched again", cleared)
        self._open_writers()
        self._pool = ThreadPool(1, 1, name="kar-culturebase")
        self._pool.start()
        log.info("writing to CultureBase at %s (embedder %s)", self.kb_id, self.kb.embedder.name)

    async def close_spider(self) -> None:
        self._closing = True
        try:
            await self._flush()
            if self._inflight:  # writes queued by items still awaiting them
                from scrapy.utils.defer import maybe_deferred_to_future
                from twisted.internet.defer import DeferredList

                await maybe_deferred_to_future(DeferredList(list(self._inflight), consumeErrors=True))
        finally:
            if self._pool is not None:
                self._pool.stop()
            if self.kb is not None:
                try:
                    await self._close_writers()
                finally:
                    self.kb.close()

    def _open_writers(self) -> None:
        """The job writes like a bulk import: indexing deferred until the job ends (on a Qdrant
        server, ``indexing_threshold=0`` meanwhile), batches of ``KAR_UPSERT_BATCH_SIZE`` and the
        free-disk guard (``KAR_MIN_FREE_DISK_MB``): a disk filling up stops the job with the count
        stored so far instead of killing the process."""
        store, min_free = self.kb.store, self.kb.min_free_bytes
        self._writers["entities"] = store.bulk_writer(min_free_bytes=min_free).__enter__()
        if self.corpus_enabled:
            self._writers["corpus"] = store.bulk_writer(min_free_bytes=min_free, corpus=True).__enter__()

    async def _close_writers(self) -> None:
        """End the job's bulk writes: flush, then build the indexes once (off the reactor thread)."""
        from scrapy.utils.defer import maybe_deferred_to_future
        from twisted.internet import threads

        failed = self.stats.get_value("kar/fatal")

        def close_all() -> None:
            for writer in self._writers.values():
                if failed:  # what was stored stays stored and flushed; indexes are built by the next job or optimize
                    writer.__exit__(RuntimeError, RuntimeError(failed), None)
                else:
                    writer.__exit__(None, None, None)

        if self._writers:
            try:
                await maybe_deferred_to_future(threads.deferToThread(close_all))
            finally:
                self._writers = {}

    # -- items ----------------------------------------------------------------------------
    def _record(self, kind: str, rule: str, record: Entity | Signature, into: Entity | Signature, detail: str = "") -> None:
        """Count a join, a record kept apart or a split (``kar/merged/<rule>``, ``kar/kept_apart``,
        ``kar/split``) and keep it for the job's record."""
        self._record_event(event(kind, rule, record, into, detail))

    def _record_event(self, ev: JoinEvent) -> None:
        self.joins.add(ev)
        kind = ev.kind
        key = f"kar/merged/{ev.rule}" if kind == "merge" else f"kar/{kind}"
        self.stats.inc_value(key)
        if kind == "merge":
            self.stats.inc_value("kar/merged")
        self.stats.set_value("kar/joins", [e.to_dict() for e in self.joins.events])

    async def process_item(self, item: Any) -> Any:
        entity: Entity = item["entity"]
        self.stats.inc_value("kar/parsed")
        same_as = item.get("same_as") or None
        seen, rule = self.index.match(entity, same_as)
        replaces = None
        if seen is not None and rule is not None:
            previous, record = self.seen[seen.id], entity
            if self.index.declared_by(entity) is seen:  # the seen record declared this page: it joins into this one
                previous, record, rule = record, previous, DECLARED  # as it would have, had this page come first
            entity = join(previous, record, rule)
            page = item.get("page_key") or canonical_url(item["url"])
            if page not in self.pages_of.get(seen.id, ()):  # the same page fetched twice is no join
                self._record("merge", rule, record, previous)
            if entity.id != seen.id:
                self.batch.entities.pop(seen.id, None)
                self.batch.replaced.add(seen.id)  # already written by an earlier batch: deleted with this one
                self.seen.pop(seen.id, None)
                replaces = seen.id
        else:
            namesake, owner = self.index.namesake(entity), self.index.alias_owner(entity)
            if namesake is not None:
                self._record("kept_apart", "two_pages", entity, namesake, TWO_PAGES)
            elif owner is not None:
                self._record("kept_apart", "alias_only", entity, owner, KEPT_APART)
            if same_as:
                self.same_as[entity.id] = same_as
        self.index.add(entity, replaces, same_as)
        self.seen[entity.id] = entity
        pages = self.pages_of.setdefault(entity.id, set())
        pages.update(self.pages_of.pop(replaces, ()) if replaces else ())
        pages.add(item.get("page_key") or canonical_url(item["url"]))
        self.batch.entities[entity.id] = entity
        self.batch.pages.append(
            (item.get("page_key") or canonical_url(item["url"]), item.get("etag"), item.get("last_modified"), item.get("revid"), entity.id)
        )
        if self.corpus_enabled and item.get("page_text"):
            url = item["url"]
            for n, text in enumerate(chunk_text(item["page_text"])):
                self.batch.chunks.append(
                    {
                        "id": f"{canonical_url(url)}#{n}",
                        "text": text,
                        "url": url,
                        "title": item.get("title") or entity.name,
                        "site": item.get("site") or "web",
                        "entity_id": entity.id,
                        "chunk": n,
                    }
                )
        if len(self.batch.entities) >= self.flush_every:
            await self._flush()
        return item

    # -- writes ---------------------------------------------------------------------------
    async def _flush(self) -> None:
        batch, self.batch = self.batch, _Batch()
        if not batch.entities and not batch.pages:
            return
        if not self.store_enabled:
            self.stats.inc_value("kar/stored", len(batch.entities))
            self._pages_done(batch, {e: e for e in batch.entities})
            return
        from scrapy.utils.defer import maybe_deferred_to_future
        from twisted.internet import reactor, threads

        # the single worker thread runs writes one at a time, in the order they were queued
        d = threads.deferToThreadPool(reactor, self._pool, self._write, batch)
        self._inflight.append(d)
        try:
            final_ids = await maybe_deferred_to_future(d)
        except Exception as exc:  # the store or the embedder failed: stop instead of losing pages silently
            self.stats.inc_value("kar/errors")
            self.stats.set_value("kar/fatal", f"writing to CultureBase failed: {type(exc).__name__}: {exc}")
            log.error("writing to CultureBase failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
            from scrapy.utils.defer import deferred_from_coro

            if not self._closing:
                self._closing = True
                deferred_from_coro(self.crawler.engine.close_spider_async(reason="store_error"))
            return
        finally:
            self._inflight.remove(d)
        self._pages_done(batch, final_ids)

    def _pages_done(self, batch: _Batch, final_ids: dict[str, str]) -> None:
        rows = [(key, etag, lm, revid, final_ids.get(eid, eid)) for key, etag, lm, revid, eid in batch.pages]
        if self.store_enabled and self.db is not None:
            self.db.save_page_states(self.kb_id, rows)
        if self.job_id and self.db is not None:
            self.db.mark_pages(self.job_id, [r[0] for r in rows], "stored")

    def _stored_match(self, entity: Entity, store: Any, final: dict[str, Entity]) -> tuple[Entity | None, str | None]:
        """(worker thread) The stored entity the record is one with, and the rule; on the way, stored
        entities that hold the record's page but that the rules no longer join to it are repaired
        (the page taken out) and written again, and a record named like another's alias is reported."""
        same_as = self.same_as.get(entity.id)
        new = Signature.of(entity)
        ids = [entity.id] + ([make_entity_id("", url=same_as)] if same_as else [])
        candidates = {e.id: final.get(e.id, e) for e in store.get_many(ids)}
        for cand in store.find_by_name(entity.names):
            candidates.setdefault(cand.id, final.get(cand.id, cand))
        for gone in self._gone & set(candidates):  # replaced earlier in this batch
            del candidates[gone]
        match: tuple[Entity | None, str | None] = (None, None)
        checked: list[Entity] = []  # the candidates as repaired: a name an old join brought leaves with its page
        for cand in candidates.values():
            left = repair(cand, entity)
            if left is not None:
                self._record("split", "repair", entity, cand, "an older join these rules no longer make")
                self.kb.drop_media([cand.id])
                final[left.id] = left
                cand = left
            checked.append(cand)
            rule = join_rule(new, Signature.of(cand), same_as)
            if rule and match[0] is None:
                match = (cand, rule)
        if match[0] is None:
            for cand in checked:
                if alias_collision(entity, cand):
                    self._record("kept_apart", "alias_only", entity, cand, KEPT_APART)
        return match

    def _write(self, batch: _Batch) -> dict[str, str]:
        """(worker thread) join against the store, embed and upsert; returns crawl id -> stored id."""
        store = self.kb.store
        final: dict[str, Entity] = {}
        final_ids: dict[str, str] = {}
        gone = self._gone = set()
        for eid, entity in batch.entities.items():
            existing, rule = self._stored_match(entity, store, final)
            if existing is not None and rule is not None:
                record = entity
                entity = join(final.get(existing.id, existing), record, rule, refresh=True)
                if existing.id != eid and not set(Signature.of(record).pages) <= set(Signature.of(existing).pages):
                    self._record("merge", rule, record, existing)
                for split_event in dissolved(existing, entity):
                    self._record_event(split_event)
                if entity.id != existing.id:
                    gone.add(existing.id)
                    final.pop(existing.id, None)
            final[entity.id] = entity
            final_ids[eid] = entity.id
        gone |= batch.replaced
        gone -= set(final)
        if gone:
            self.kb.drop_media(sorted(gone))
            store.delete(sorted(gone))
        stored = self.kb.write_entities(self._writers["entities"], list(final.values()))
        chunks = batch.chunks
        if chunks:
            for c in chunks:
                c["entity_id"] = final_ids.get(c.get("entity_id", ""), c.get("entity_id"))
            self.kb.add_corpus_chunks(chunks, writer=self._writers.get("corpus"))
        for writer in self._writers.values():  # page states are saved next: what they name must be on disk
            writer.collection.flush()
        self.stats.inc_value("kar/stored", stored)
        self.stats.inc_value("kar/corpus_chunks", len(chunks))
        return final_ids
