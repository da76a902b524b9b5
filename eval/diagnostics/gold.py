"""What a benchmark item says should be found: its gold identity entities and its knowledge units.

* Gold entities come from the ``identity`` layer.  The release writes it as an object
  (``{"entities": [{"eid", "name", "source_work", ...}]}``): every entity's ``name`` (and its
  ``aliases``/``alias``, when the file has them) is a gold entity.  A layer written as free text
  (``examples/bench_sample.json``) names no entity field: the gold entities are then the
  CultureBase entities whose name or an alias occurs in that text (whole words), so without a
  knowledge base such an item has no gold entity (``gold_source`` says which way it went).
* Knowledge units are the ``knowledge`` layer's statements: every string leaf of an object or a
  list, or the sentences of a free-text layer.

Names are compared with the grounder's normalisation (:func:`culturebase.entity.normalize_text`:
NFKC, case-folded, single spaces).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, NamedTuple
from urllib.parse import unquote

from culturebase.entity import normalize_text

#: the grounder's normalisation of a name, memoised (a gold name is normalised to look it up, to key it and to
#: compare it with the KB entity found; the same entities are grounded for many items)
normalized_name = lru_cache(maxsize=65536)(normalize_text)

ENTITY_LIST_KEYS = ("entities", "entity", "characters", "figures", "references")
NAME_KEYS = ("name", "names")
ALIAS_KEYS = ("aliases", "alias")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_SENTENCE = re.compile(r"(?<=[。！？!?；;])|(?<=\.)\s+")


@dataclass(frozen=True)
class GoldEntity:
    """One gold entity: the names it goes by (normalised keys) and the KB entity it matched, if any."""

    name: str
    keys: frozenset[str]
    kb_id: str | None = None
    kb_name: str | None = None


@dataclass
class Gold:
    """An item's gold entities and knowledge units; ``gold_source``: ``identity`` (named in the layer),
    ``identity_text`` (KB names found in a free-text layer) or ``none``."""

    entities: list[GoldEntity] = field(default_factory=list)
    knowledge: list[str] = field(default_factory=list)
    gold_source: str = "none"

    @cached_property
    def keys(self) -> frozenset[str]:
        """Every normalised name and alias of every gold entity (computed once: every condition's rows ask)."""
        return frozenset(k for e in self.entities for k in e.keys)

    @cached_property
    def kb_ids(self) -> frozenset[str]:
        return frozenset(e.kb_id for e in self.entities if e.kb_id)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value.strip()] if value.strip() else []
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def named_entities(identity: Any) -> list[tuple[str, list[str]]]:
    """``(name, aliases)`` of the entities an ``identity`` layer names in fields (none for free text)."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for v in node:
                visit(v)
        elif isinstance(node, dict):
            names = [s for k in NAME_KEYS for s in _strings(node.get(k))]
            if names:
                aliases = [s for k in ALIAS_KEYS for s in _strings(node.get(k))]
                found.append((names[0], names[1:] + aliases))
            for key in ENTITY_LIST_KEYS:
                if key in node:
                    visit(node[key])

    visit(identity)
    return found


def knowledge_units(knowledge: Any) -> list[str]:
    """The statements of a ``knowledge`` layer: string leaves of an object/list, sentences of a text."""
    units: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, str):
            text = node.strip()
            if text:
                units.append(text)
        elif isinstance(node, list):
            for v in node:
                visit(v)
        elif isinstance(node, dict):
            for v in node.values():
                visit(v)

    if isinstance(knowledge, str):
        return [s.strip() for s in _SENTENCE.split(knowledge) if s and s.strip() and len(s.strip()) > 1]
    visit(knowledge)
    return units


def fold(text: str) -> str:
    """NFKC, case-folded (ASCII text directly: NFKC leaves it as it is, and it case-folds to lower case)."""
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFKC", text).casefold()


@lru_cache(maxsize=8192)
def _whole_word(key: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w]){re.escape(key)}(?![\w])")


def name_in_text(key: str, text_key: str) -> bool:
    """A normalised name inside a normalised text: CJK names (≥ 2 characters) as substrings,
    others (≥ 3 characters) as whole words."""
    if not key or not text_key:
        return False
    if _CJK.search(key):
        return len(key) >= 2 and key in text_key
    if len(key) < 3 or key not in text_key:
        return False
    return _whole_word(key).search(text_key) is not None


def text_key(text: str) -> str:
    """A page's text as names are compared with it: a URL's escapes decoded, NFKC, case-folded, its whitespace
    runs read as one space."""
    text = text or ""
    if "%" in text:
        text = unquote(text)
    key = fold(text)
    if "  " in key or "\n" in key or "\t" in key:
        key = " ".join(key.split())
    return key


def mentions(keys: Iterable[str], text: str) -> bool:
    """Whether ``text`` (a page's title, URL and content; a URL's escapes decoded) names any of ``keys``
    (normalised as names are, its whitespace runs read as one space)."""
    key = text_key(text)
    for k in keys:
        if k in key and name_in_text(k, key):
            return True
    return False


class NameRecord(NamedTuple):
    """What the diagnostics read of a CultureBase entity: its id, name and aliases."""

    id: str
    name: str
    aliases: list[str]


class KBNames:
    """Name/alias lookups in CultureBase, with the grounder's normalisation (``find_by_name``).

    ``store`` is a :class:`culturebase.store.culturebase.CultureBaseStore` (or anything with
    ``find_by_name`` and ``iter_entities``); ``None`` means no knowledge base: every lookup is
    unknown."""

    def __init__(self, store: Any | None, unavailable: str | None = None) -> None:
        self.store = store
        self.unavailable = unavailable if store is None else None
        self._names: list[tuple[str, Any]] | None = None
        self._found: dict[str, list[Any]] = {}

    @property
    def available(self) -> bool:
        return self.store is not None

    def prefetch(self, names: Iterable[str], batch: int = 512) -> None:
        """Look many names up at once (one filtered scroll per ``batch`` names); :meth:`find` then answers from memory."""
        if self.store is None:
            return
        keys = sorted({key for n in names if (key := normalized_name(n))} - set(self._found))
        for start in range(0, len(keys), batch):
            chunk = keys[start:start + batch]
            for key in chunk:
                self._found[key] = []
            wanted = set(chunk)
            for entity in self._named(chunk):
                for key in _entity_keys(entity) & wanted:
                    self._found[key].append(entity)

    def _named(self, keys: list[str]) -> list[Any]:
        """The entities named by ``keys`` (normalised): :class:`NameRecord` s read straight from the stored payloads
        when the store is a CultureBase (the records were validated when written; only names are needed here),
        else its ``find_by_name``."""
        collection = getattr(self.store, "entities", None)
        if not hasattr(collection, "scroll"):
            return list(self.store.find_by_name(keys))
        from culturebase.store.base import PayloadFilter

        found = []
        for payload in collection.scroll(batch=256, flt=PayloadFilter.of(match_keys=keys)):
            if payload.get("id") and payload.get("name"):
                found.append(NameRecord(str(payload["id"]), str(payload["name"]), [a for a in payload.get("aliases") or [] if isinstance(a, str)]))
        return found

    def find(self, names: Sequence[str]) -> list[Any]:
        """KB entities whose name or an alias equals one of ``names`` (normalised)."""
        if self.store is None or not names:
            return []
        keys = [key for n in names if (key := normalized_name(n))]
        if all(k in self._found for k in keys):
            seen: dict[str, Any] = {}
            for key in keys:
                for entity in self._found[key]:
                    seen.setdefault(entity.id, entity)
            return list(seen.values())
        return list(self.store.find_by_name(names))

    def in_text(self, text: str) -> list[Any]:
        """KB entities whose name or an alias occurs in ``text`` (whole words; read once, then from memory)."""
        if self.store is None:
            return []
        if self._names is None:
            self._names = [(normalized_name(n), e) for e in self.store.iter_entities() for n in (e.name, *e.aliases) if n]
        text_key = normalize_text(text)
        seen: dict[str, Any] = {}
        for key, entity in self._names:
            if entity.id not in seen and name_in_text(key, text_key):
                seen[entity.id] = entity
        return list(seen.values())


def _entity_keys(entity: Any) -> set[str]:
    return {key for n in (entity.name, *entity.aliases) if n and (key := normalized_name(n))}


def gold_of(item: Any, kb: KBNames) -> tuple[Gold, bool | None]:
    """An item's gold (entities matched against the KB) and ``gold_in_kb``: True when every gold entity
    is in CultureBase, False when one is not, None when it cannot be told (no KB, or no gold entity)."""
    gold = Gold(knowledge=knowledge_units(item.knowledge))
    named = named_entities(item.identity)
    if named:
        gold.gold_source = "identity"
        in_kb: list[bool] = []
        for name, aliases in named:
            keys = {key for n in (name, *aliases) if (key := normalized_name(n))}
            found = kb.find([name, *aliases])
            entity = found[0] if found else None
            if entity is not None:
                keys |= _entity_keys(entity)
            gold.entities.append(GoldEntity(name, frozenset(keys), entity.id if entity else None, entity.name if entity else None))
            in_kb.append(entity is not None)
        return gold, (all(in_kb) if kb.available else None)
    text = " ".join(_strings(item.identity)) if isinstance(item.identity, (str, list)) else ""
    if text and kb.available:
        for entity in kb.in_text(text):
            gold.entities.append(GoldEntity(entity.name, frozenset(_entity_keys(entity)), entity.id, entity.name))
        gold.gold_source = "identity_text" if gold.entities else "none"
        return gold, (True if gold.entities else None)
    return gold, None
