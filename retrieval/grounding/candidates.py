"""What every grounding route shares: the query it reads, the hits it returns, the candidate pool.

A route (:class:`retrieval.grounding.route.Route`) reads a :class:`RouteQuery` (the cues and what is
computed once from them) and the :class:`CandidatePool` (the entities found so far), and returns a
:class:`RouteRun`: the entities it scored (each a :class:`RouteHit` with its score, the cue it matched
and why), the entities it only brings as candidates, the media matches it made (each a :class:`Match`),
and one status line per route name for the trace ("ran", "skipped: why").  It never fuses: the
grounder records the hits in the pool and fuses them (:mod:`retrieval.grounding.fusion`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from culturebase.entity import Entity

from retrieval.grounding.cues import GroundingCues

if TYPE_CHECKING:
    from culturebase.store import CultureBaseStore
    from retrieval.embedders.base import EmbeddingBatch


@dataclass(frozen=True)
class DenseQuery:
    """One dense query: the route it serves (``ocr``, ``visual``, ``name``), its text, its confidence factor."""

    route: str
    text: str
    factor: float


@dataclass
class RouteQuery:
    """What the routes read: the cues, their dense queries embedded once, and the search's bounds."""

    cues: GroundingCues
    store: CultureBaseStore
    dense: list[DenseQuery]
    batch: EmbeddingBatch | None
    n_entities: int
    #: how many candidates each search brings
    limit: int
    #: restrict entities to one language (None: all)
    language: str | None = None
    #: the grounder's image route (``retrieval.images.route.ImageRoute``; None: no image index)
    image_route: Any = None
    #: the grounder's sound store (``retrieval.sounds.route.SoundStore``; None: no sound index)
    sound_store: Any = None
    #: the cross-lingual pass of the dense routes (:class:`retrieval.grounding.crosslingual.CrossLingualPass`; None: off)
    crosslingual: Any = None
    #: what a route keeps between its phases of this one query (route name → value)
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class RouteHit:
    """One entity scored by one route: the score (in [0, 1] for evidence routes, a cosine for dense ones),
    the cue text it matched (None: the route records none), its height over the query's background
    (dense routes) and the route's reason (the matched alias, the matched caption line ...)."""

    route: str
    entity: Entity
    score: float
    cue: str | None = None
    height: float | None = None
    reason: Any = None


@dataclass
class Match:
    """One entity matched by a media route (an image, a clip's frames, a sound) outside the candidate pool.

    ``evidence`` is in (0, 1] for an accepted match and None for one that is only traced; ``fields`` are
    the trace fields it sets on the grounded entity (``{"image": {...}, "image_distance": 12}``)."""

    entity_id: str
    evidence: float | None
    cue: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class RouteRun:
    """What one route returns: its hits, the entities it brings without a score, its media matches and its
    trace status."""

    hits: list[RouteHit] = field(default_factory=list)
    found: list[Entity] = field(default_factory=list)
    matches: list[Match] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)


class EntityCache:
    """Entities rebuilt from store payloads, and what the routes derive from each (its catchphrases), kept
    across queries: grounding rebuilt a hundred candidates a query, most of them seen before.

    An entry is keyed by entity id and holds the payload object it was built from; it serves a hit only
    while the store returns that same object (the embedded store's payload cache,
    :mod:`culturebase.store.payload_cache`, hands out one object per point until the point is written), so
    a written entity is rebuilt, and a store that builds new payloads on every read (the server backend)
    never reuses one.  At most ``size`` entities, the least recently used dropped first; thread-safe."""

    def __init__(self, size: int = 65_536) -> None:
        self.size = size
        self._items: OrderedDict[str, list[Any]] = OrderedDict()  # id → [payload, entity, {derived name: value}]
        self._lock = threading.Lock()

    def entity(self, hit: Any) -> Entity:
        """The entity of a store hit (``id``, ``payload``), rebuilt from the store's own payload (no
        re-validation) unless built from that very payload before."""
        with self._lock:
            entry = self._items.get(hit.id)
            if entry is not None and entry[0] is hit.payload:
                self._items.move_to_end(hit.id)
                return entry[1]
        ent = Entity.from_payload(hit.payload, trusted=True)
        with self._lock:
            self._items[hit.id] = [hit.payload, ent, {}]
            self._items.move_to_end(hit.id)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return ent

    def derived(self, ent: Entity, name: str, compute: Callable[[Entity], Any]) -> Any:
        """``compute(ent)``, computed once per cached entity (an entity not built here is computed each time)."""
        entry = self._items.get(ent.id)
        if entry is None or entry[1] is not ent:
            return compute(ent)
        values = entry[2]
        if name not in values:
            values[name] = compute(ent)
        return values[name]


#: the process's cache of candidate entities (every grounder shares it: entries are checked against the payload)
ENTITIES = EntityCache()


class CandidatePool:
    """The candidate entities (in the order they were found) and each route's best score for each."""

    def __init__(self) -> None:
        self.entities: dict[str, Entity] = {}
        self.scores: dict[str, dict[str, float]] = {}
        self.cues: dict[str, dict[str, str]] = {}
        self.heights: dict[str, dict[str, float]] = {}
        self.reasons: dict[str, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.entities)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.entities)

    def entity_of(self, hit: Any) -> Entity:
        """A store hit's entity, built once per id (from the store's own payload: no re-validation; kept across
        queries in :data:`ENTITIES`)."""
        ent = self.entities.get(hit.id)
        return ent if ent is not None else ENTITIES.entity(hit)

    def add(self, entity: Entity) -> None:
        """An entity becomes a candidate (with no score yet)."""
        self.entities.setdefault(entity.id, entity)

    def record(self, hit: RouteHit) -> None:
        """Keep each route's best score per entity (its cue and reason with it) and the best height."""
        eid = hit.entity.id
        self.entities.setdefault(eid, hit.entity)
        scores = self.scores.setdefault(eid, {})
        if hit.score > scores.get(hit.route, -1.0):
            scores[hit.route] = hit.score
            if hit.cue is not None:
                self.cues.setdefault(eid, {})[hit.route] = hit.cue
            if hit.reason is not None:
                self.reasons.setdefault(eid, {})[hit.route] = hit.reason
        if hit.height is not None and hit.height > self.heights.setdefault(eid, {}).get(hit.route, -9.0):
            self.heights[eid][hit.route] = hit.height

    def apply(self, run: RouteRun) -> RouteRun:
        """Record a route's run: its found entities, then its hits; returns the run."""
        for ent in run.found:
            self.add(ent)
        for hit in run.hits:
            self.record(hit)
        return run
