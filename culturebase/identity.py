"""When two records are one entity: the identity rules every crawl and every dump import applies.

Two records are joined into one entity only when one of these rules holds (:func:`join_rule`):

* ``same_url``: they have the same canonical source URL (a re-crawl of a page, the same page twice in
  a dump, a page of a record already joined into the entity);
* ``same_name_and_work``: they have the same normalised name and the same normalised source work, and
  are not two different pages of one site (a site keeps two entities on two pages; only a redirect
  of its own says two of its pages are one);
* ``same_id``: they carry the same id and no page (records of our own format name their id);
* ``declared``: the site itself says one record is the other: the record names the page it is
  (``same_as``), as a memegen template's KnowYourMeme page fetched for that template does.

Sharing an alias, a tag, a keyword, a franchise or a category is never enough.  A record whose name
is another entity's alias, with no rule joining them, is kept apart and reported (:func:`alias_collision`).

Every join is recorded on the entity (:attr:`~culturebase.entity.Entity.constituents`: each joined
record as it was, with the rule that joined it), so it can be listed (``kar kb merges``) and undone
(:func:`split`, ``kar kb split``); :func:`repair` takes apart what an older knowledge base joined that
these rules no longer join.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from culturebase.entity import Constituent, Entity, canonical_url, make_entity_id, normalize_text

SAME_URL = "same_url"
SAME_NAME_AND_WORK = "same_name_and_work"
SAME_ID = "same_id"
DECLARED = "declared"
FIRST = "first"


class SplitError(ValueError):
    """A split that cannot be made (no such source, the entity's own page, no merge record); the message says why."""


@dataclass(frozen=True)
class Signature:
    """What the rules read of a record or a stored entity (small enough to keep for every entity of an import)."""

    id: str
    name: str
    work_key: str
    #: (canonical URL, site) of every page joined into it, its own first
    pages: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, entity: Entity) -> "Signature":
        """The signature of a record or a stored entity (with the pages of every record joined into it)."""
        pages: dict[str, str] = {}
        for c in entity.constituents:
            if c.url:
                pages.setdefault(c.url, c.site)
        if entity.sources and not entity.constituents:
            pages.setdefault(canonical_url(entity.sources[0].url), entity.sources[0].site)
        return cls(entity.id, entity.name, normalize_text(entity.source_work), tuple(pages.items()))

    @property
    def name_key(self) -> str:
        return normalize_text(self.name)

    def with_pages(self, other: "Signature") -> "Signature":
        """This signature with ``other``'s pages joined in."""
        pages = dict(self.pages)
        for url, site in other.pages:
            pages.setdefault(url, site)
        return Signature(self.id, self.name, self.work_key, tuple(pages.items()))

    @property
    def url(self) -> str | None:
        """The canonical URL of its own page."""
        return self.pages[0][0] if self.pages else None

    @property
    def site(self) -> str:
        return self.pages[0][1] if self.pages else ""


def join_rule(new: Signature, old: Signature, same_as: str | None = None) -> str | None:
    """The rule under which ``new`` is one entity with ``old``, or None (they stay apart)."""
    urls = {u for u, _ in old.pages}
    if new.id == old.id or (new.url is not None and new.url in urls):
        if new.url is not None or old.url is not None:
            return SAME_URL
        return SAME_NAME_AND_WORK if (new.name_key, new.work_key) == (old.name_key, old.work_key) else SAME_ID
    if same_as and canonical_url(same_as) in urls:
        return DECLARED
    if new.name_key != old.name_key or new.work_key != old.work_key:
        return None
    if new.url is not None and any(site == new.site and url != new.url for url, site in old.pages):
        return None  # two pages of one site are two entities
    return SAME_NAME_AND_WORK


def alias_collision(new: Entity, old: Entity) -> bool:
    """Whether ``new``'s name is one of ``old``'s aliases (not its name): kept apart unless a rule joins them."""
    key = normalize_text(new.name)
    return key != normalize_text(old.name) and key in {normalize_text(a) for a in old.aliases}


@dataclass
class JoinEvent:
    """One join (or a record kept apart, or a split), as the import report and the crawl job record it."""

    kind: str  # "merge" | "kept_apart" | "split"
    rule: str
    id: str
    name: str
    source: str | None
    into_id: str
    into_name: str
    into_source: str | None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v != "" or k != "detail"}


#: join events kept in full by a report or a crawl job (all are counted)
MAX_EVENTS = 2000


@dataclass
class JoinLog:
    """Joins, records kept apart and splits: counted by rule, the first :data:`MAX_EVENTS` kept in full."""

    events: list[JoinEvent] = field(default_factory=list)
    merged_by_rule: dict[str, int] = field(default_factory=dict)
    kept_apart: int = 0
    split: int = 0

    def add(self, event: JoinEvent) -> None:
        """Count an event (and keep it while there is room)."""
        if event.kind == "merge":
            self.merged_by_rule[event.rule] = self.merged_by_rule.get(event.rule, 0) + 1
        elif event.kind == "kept_apart":
            self.kept_apart += 1
        else:
            self.split += 1
        if len(self.events) < MAX_EVENTS:
            self.events.append(event)

    @property
    def merged(self) -> int:
        return sum(self.merged_by_rule.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "merged": self.merged,
            "merged_by_rule": dict(sorted(self.merged_by_rule.items())),
            "kept_apart": self.kept_apart,
            "split": self.split,
            "events": [e.to_dict() for e in self.events],
        }


def event(kind: str, rule: str, record: Entity | Signature, into: Entity | Signature, detail: str = "") -> JoinEvent:
    """A join event between a record and the entity it was joined into (or kept apart from, or split from)."""
    a = record if isinstance(record, Signature) else Signature.of(record)
    b = into if isinstance(into, Signature) else Signature.of(into)
    return JoinEvent(kind, rule, a.id, a.name, a.url, b.id, b.name, b.url, detail)


KEPT_APART = "its name is only an alias of the other, and no rule joins them"
TWO_PAGES = "the same name and source work, on two pages of one site"


class IdentityIndex:
    """The entities a crawl or an import has seen so far, by what the rules read (ids, names + works,
    pages, alias keys: tens of bytes an entity): which of them a new record is one with, and whose
    alias its name is."""

    def __init__(self) -> None:
        self.by_id: dict[str, Signature] = {}
        self.by_name: dict[tuple[str, str], list[str]] = {}
        self.by_alias: dict[str, str] = {}
        #: a page a seen record declared it is one with (canonical URL) -> (that record's id, the URL as declared)
        self.declared: dict[str, tuple[str, str]] = {}

    def match(self, entity: Entity, same_as: str | None = None) -> tuple[Signature | None, str | None]:
        """The seen entity ``entity`` is one with and the rule that says so, or ``(None, None)``; a record whose
        page a seen record declared is found too (:meth:`declared_by`), whichever of the two came first."""
        new = Signature.of(entity)
        ids = [entity.id]
        if same_as:
            ids.append(make_entity_id("", url=same_as))
        ids += self.by_name.get((new.name_key, new.work_key), [])
        for eid in dict.fromkeys(ids):
            old = self.by_id.get(eid)
            rule = join_rule(new, old, same_as) if old is not None else None
            if rule:
                return old, rule
        old = self.declared_by(entity)
        return (old, DECLARED) if old is not None else (None, None)

    def declared_by(self, entity: Entity) -> Signature | None:
        """The seen entity that declared it is one with ``entity``'s page (None: none did)."""
        new = Signature.of(entity)
        declarer, declared = self.declared.get(new.url or "", ("", ""))
        old = self.by_id.get(declarer)
        if old is None or old.id == new.id or join_rule(old, new, declared) != DECLARED:
            return None
        return old

    def namesake(self, entity: Entity) -> Signature | None:
        """A seen entity with ``entity``'s name and source work that the rules keep apart (two pages of one site)."""
        new = Signature.of(entity)
        for eid in self.by_name.get((new.name_key, new.work_key), []):
            if eid != entity.id:
                return self.by_id[eid]
        return None

    def alias_owner(self, entity: Entity) -> Signature | None:
        """The seen entity whose alias (not name) ``entity``'s name is."""
        owner = self.by_id.get(self.by_alias.get(normalize_text(entity.name), ""))
        if owner is None or owner.id == entity.id or owner.name_key == normalize_text(entity.name):
            return None
        return owner

    def add(self, entity: Entity, replaces: str | None = None, same_as: str | None = None) -> None:
        """Remember ``entity`` (a record, or an entity a join made; ``replaces``: the id it was seen under;
        ``same_as``: the page it declares it is one with)."""
        sig = Signature.of(entity)
        if same_as:
            self.declared.setdefault(canonical_url(same_as), (entity.id, same_as))
        if replaces and replaces != entity.id and self.declared:
            for page, (eid, url) in list(self.declared.items()):
                if eid == replaces:
                    self.declared[page] = (entity.id, url)
        if replaces and replaces != entity.id and replaces in self.by_id:
            sig = sig.with_pages(self.by_id.pop(replaces))
        elif entity.id in self.by_id:
            sig = self.by_id[entity.id].with_pages(sig)
        self.by_id[entity.id] = sig
        ids = self.by_name.setdefault((sig.name_key, sig.work_key), [])
        if entity.id not in ids:
            ids.append(entity.id)
        for alias in entity.aliases:
            self.by_alias.setdefault(normalize_text(alias), entity.id)

    def joined(self, target: str, record: Entity) -> None:
        """``record`` was joined into seen entity ``target`` (its page is now one of the target's)."""
        self.by_id[target] = self.by_id[target].with_pages(Signature.of(record))


# -- joining and taking apart ---------------------------------------------------------------------
def _snapshot(entity: Entity, rule: str) -> Constituent:
    record = entity.model_dump(mode="json", exclude={"constituents"})
    return Constituent(id=entity.id, name=entity.name, url=entity.primary_url, site=entity.sources[0].site if entity.sources else "",
                       rule=rule, joined_at=datetime.now(timezone.utc), record=record)


def constituents_of(entity: Entity) -> list[Constituent]:
    """The records an entity is made of (a single record: itself, as ``first``)."""
    return list(entity.constituents) if entity.constituents else [_snapshot(entity, FIRST)]


def fold(parts: Sequence[Constituent]) -> Entity:
    """The entity made of these records: the first, with each later one joined in (the parts recorded)."""
    entity = Entity.model_validate(parts[0].record)
    for part in parts[1:]:
        entity = entity.merged_with(Entity.model_validate(part.record))
    if len(parts) == 1:
        return entity
    first = parts[0].model_copy(update={"rule": FIRST})
    return entity.model_copy(update={"constituents": [first, *parts[1:]]})


def join(existing: Entity, new: Entity, rule: str, refresh: bool = False) -> Entity:
    """``new`` joined into ``existing`` under ``rule``: a record of a page already part of it is united with
    that part (the same page twice in one crawl or dump: the first copy's fields first) or, with
    ``refresh`` (the page read again by a later crawl or import), replaces it; any other is added as a
    part; the fields are folded again from the parts."""
    parts = constituents_of(existing)
    incoming = constituents_of(new)
    for part in incoming:
        part = part.model_copy(update={"rule": rule if part.rule == FIRST else part.rule})
        same = next((i for i, p in enumerate(parts) if (part.url and p.url == part.url) or p.id == part.id), None)
        if same is None:
            parts.append(part)
        else:  # a page already joined, read again: its part is refreshed, its rule kept
            parts[same] = _refreshed(parts[same], part) if refresh else _united(parts[same], part)
    if len(parts) == 1:
        return Entity.model_validate(parts[0].record)
    return fold(parts)


def _refreshed(old: Constituent, new: Constituent) -> Constituent:
    """``new`` in place of ``old`` (the same page read again), keeping the stored images and sounds when
    the new read has none (a dump re-imported without fetching images)."""
    record = dict(new.record)
    for key in ("images", "audio"):
        if not record.get(key) and old.record.get(key):
            record[key] = old.record[key]
    return new.model_copy(update={"rule": old.rule, "record": record})


def _united(old: Constituent, new: Constituent) -> Constituent:
    """The same page read twice in one run: the first copy with the second's names, tags and media added."""
    record = Entity.model_validate(old.record).merged_with(Entity.model_validate(new.record))
    return old.model_copy(update={"record": record.model_dump(mode="json", exclude={"constituents"})})


def split(entity: Entity, url: str) -> tuple[Entity, Entity]:
    """Take the record of page ``url`` back out of ``entity``: ``(what is left, the record on its own)``.

    Raises :class:`SplitError` when the page is the entity's own, is not one of its parts, or the entity
    has no merge record (joined before merges were recorded: see :func:`repair`)."""
    key = canonical_url(url)
    if not entity.constituents:
        if key in {canonical_url(s.url) for s in entity.sources[1:]}:
            raise SplitError(
                f"entity {entity.id} holds {url} but has no merge record (joined before merges were recorded): "
                "re-crawl or re-import that page to repair it"
            )
        raise SplitError(f"entity {entity.id} was not joined from other records: nothing to split")
    parts = list(entity.constituents)
    index = next((i for i, p in enumerate(parts) if p.url == key), None)
    if index is None:
        joined = ", ".join(p.url or p.name for p in parts)
        raise SplitError(f"{url} is not one of the pages joined into {entity.id} ({joined})")
    if index == 0:
        raise SplitError(f"{url} is the entity's own page; split the pages joined into it instead")
    out = parts.pop(index)
    kept = fold(parts) if len(parts) > 1 else Entity.model_validate(parts[0].record)
    return kept, Entity.model_validate(out.record)


def repair(stored: Entity, record: Entity) -> Entity | None:
    """``stored`` without ``record``'s page when it holds that page but the rules no longer join them
    (an entity an older knowledge base joined), else None.

    A recorded part is taken out as :func:`split` does; an entity joined before merges were recorded
    loses the page's source and what the record brought that it cannot have had from elsewhere: the
    record's name and aliases (not the entity's own name), its images and sounds.  Such an old join is
    told from a page the entity only links by the record's name among the entity's aliases (an old
    join added it there)."""
    url = record.primary_url
    if url is None or stored.id == record.id:
        return None
    if stored.constituents:
        rest = [p for p in stored.constituents if p.url != url]
        if len(rest) == len(stored.constituents) or not rest or stored.constituents[0].url == url:
            return None
        left = fold(rest) if len(rest) > 1 else Entity.model_validate(rest[0].record)
        return None if join_rule(Signature.of(record), Signature.of(left)) else left
    if url not in {canonical_url(s.url) for s in stored.sources[1:]}:
        return None
    if normalize_text(record.name) not in {normalize_text(a) for a in stored.aliases}:
        return None  # a page it links (a memegen template's KnowYourMeme page), not a record joined into it
    left = _strip(stored, record)
    return None if join_rule(Signature.of(record), Signature.of(left)) else left


def _strip(stored: Entity, record: Entity) -> Entity:
    """``stored`` without what ``record`` (joined into it with no record of the join) brought."""
    own = normalize_text(stored.name)
    names = {normalize_text(n) for n in record.names} - {own}
    urls = {canonical_url(s.url) for s in record.sources}
    images = {i.sha256 for i in record.images} | {i.url for i in record.images if i.url}
    sounds = {a.sha256 for a in record.audio} | {a.url for a in record.audio if a.url}
    return stored.model_copy(
        update={
            "aliases": [a for a in stored.aliases if normalize_text(a) not in names],
            "sources": [s for s in stored.sources if canonical_url(s.url) not in urls] or stored.sources[:1],
            "images": [i for i in stored.images if i.sha256 not in images and i.url not in images],
            "audio": [a for a in stored.audio if a.sha256 not in sounds and a.url not in sounds],
        }
    )


def dissolved(existing: Entity, joined: Entity) -> list[JoinEvent]:
    """Split events for the pages of ``existing``'s own site that ``joined`` (what a join made of it) no longer
    holds: an entity an older knowledge base joined from several pages of one site (which these rules never
    do), replaced by the record of its own page read again.  A page of another site is a link, not reported;
    a recorded join is taken apart by :func:`repair` instead."""
    if existing.constituents or not existing.sources:
        return []
    site = existing.sources[0].site
    kept = {canonical_url(s.url) for s in joined.sources}
    return [
        JoinEvent("split", "repair", "", url, url, existing.id, existing.name, existing.primary_url, "an older join these rules no longer make")
        for url in dict.fromkeys(canonical_url(s.url) for s in existing.sources[1:] if s.site == site)
        if url not in kept
    ]


def merged_entities(entities: Iterable[Entity]) -> Iterable[Entity]:
    """The entities joined from more than one record."""
    return (e for e in entities if e.constituents)
