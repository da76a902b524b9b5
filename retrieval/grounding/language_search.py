"""One dense search split by entity language, instead of one language-filtered search per language.

Grounding needs each query's best ``limit`` entities *per entity language* (the per-language
background: :mod:`retrieval.grounding.routes.dense`).  A search filtered on ``language`` costs the engine a
payload-index check on every graph node it visits: on the 39,814-name bench KB (39,678 Chinese
names) a Chinese-filtered ``identity`` search cost about 3× an unfiltered one, and a filtered search
of a vector that few entities carry (``usage``, ``visual``: 172 of them) about 15×, because the
engine then walks the language's 39,678 points instead of the vector's 172 (``bench/grounding_precision.py``,
docs/grounding.md).  So :func:`search_by_language` searches once without the language filter for
``limit × languages`` hits and splits them by language; only a language that got fewer than
``limit`` of them while the unfiltered list was full (it may have more further down) is searched
again with its filter, which for the small languages of a large KB is an exact scan of few points.
The best ``limit`` of a language inside the unfiltered list are its best ``limit`` overall.
"""

from __future__ import annotations

from typing import Any

from culturebase.store import PayloadFilter


def language_filter(language: str, lacks: tuple[str, ...] = ()) -> PayloadFilter:
    """``language`` equal to one value, and none of ``lacks`` on the point."""
    return PayloadFilter(equals=(("language", (language,)),), lacks_vectors=tuple(lacks))


def search_by_language(
    coll: Any, vector_name: str, vector: Any, limit: int, languages: list[str], lacks: tuple[str, ...] = ()
) -> tuple[dict[str, list[Any]], list[Any]]:
    """The best ``limit`` hits of each of ``languages`` on ``vector_name`` (points carrying none of
    ``lacks``), and the best ``limit`` hits of any language (for entities outside ``languages``).

    ``coll`` is a store collection (:meth:`~culturebase.store.base.Collection.search`); hits are its
    :class:`~culturebase.store.base.ScoredRecord`, best first."""
    base = PayloadFilter.without_vectors(None, *lacks) if lacks else None
    width = limit * max(1, len(languages))
    hits = coll.search(vector_name, vector, width, base)
    full = len(hits) >= width
    out: dict[str, list[Any]] = {}
    for lg in languages:
        mine = [h for h in hits if h.payload.get("language") == lg][:limit]
        if len(mine) < limit and full:  # this language may have better points below the unfiltered list
            mine = coll.search(vector_name, vector, limit, language_filter(lg, lacks))
        out[lg] = mine
    return out, hits[:limit]
