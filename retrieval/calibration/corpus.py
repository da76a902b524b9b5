"""Fitting the local corpus search's floors from the corpus's own pages (``kar calibrate --corpus``).

Positives: for pages drawn by hash of their URL (a bottom-k sketch: bounded memory at any corpus size), the
page title, and its first chunk's text with the title's words taken out (a description written without the
name); the right answer is that page.  Negatives: the packaged ordinary captions, which must get no evidence.

Each probe is searched once (:func:`retrieval.websearch.hybrid.candidates`) and its pages fused twice with a
zero floor, with the ordinary-words floor off (∞) and at 0: a page is then above the floors ``(f, o)`` when
``relevance ≥ f`` and (it is above with the ordinary floor at ∞, or above at 0 and ``relevance ≥ o``).  The
floors are chosen as grounding's rule is (:mod:`retrieval.calibration.fit`: Learn then Test with a fixed
sequence): a sequence of floor pairs fixed from the positives alone (:func:`floor_path`: the floor from the
highest down, each with the ordinary floor that lets most positives find their own page first), tested on the
calibration split's captions in that order until one pair's Clopper-Pearson bound of captions given evidence
exceeds the target.  Titles and first chunks are easy positives: a plateau of certified floors keeps them all,
and the lowest floor of that plateau is taken.  The bound already holds there (the guarantee needs no margin on
top of it), and a floor stricter than these easy probes need drops the pages of harder queries: a description a
person writes without the name shares few words with the page.  The ordinary-words floor at each floor stays the
middle of its own plateau: it is what keeps caption-like queries from ordinary pages.  The guarantee is
grounding's: with 95 % confidence every certified pair, the one kept too, gives evidence to at most the target
share of captions.
"""

from __future__ import annotations

import copy
import hashlib
import heapq
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from culturebase.entity import canonical_url

from retrieval.calibration.fit import clopper_pearson_upper, fixed_sequence, certifiable_rate
from retrieval.calibration.probes import MAX_PROBE_CHARS, Probe, caption_probes, split_of
from retrieval.calibration.record import Thresholds

__all__ = ["CorpusFeatures", "choose_floors", "corpus_features", "corpus_figures", "floor_path", "page_probes"]

#: pages of each probe kept (best first)
TOP_PAGES = 5
FLOOR_GRID = np.round(np.arange(0.0, 0.3001, 0.0025), 4)
#: 2.0 stands for "off": no relevance reaches it (a height of at most 1 plus half a lexical height of at most 1)
ORDINARY_GRID = np.concatenate([np.round(np.arange(0.0, 0.5001, 0.005), 4), [2.0]])


def page_probes(store: Any, max_pages: int) -> list[Probe]:
    """Title and description probes of at most ``max_pages`` pages (the smallest sha1(url) values)."""
    heap: list[tuple[int, str, str, str]] = []
    seen: set[str] = set()
    for p in store.corpus.scroll():
        url = str(p.get("url") or "")
        if not url or url in seen:
            continue
        h = -int(hashlib.sha1(url.encode("utf-8")).hexdigest()[:12], 16)
        item = (h, url, str(p.get("title") or ""), str(p.get("text") or ""))
        if len(heap) < max_pages:
            heapq.heappush(heap, item)
            seen.add(url)
        elif h > heap[0][0]:
            seen.discard(heapq.heapreplace(heap, item)[1])
            seen.add(url)
    out: list[Probe] = []
    for _, url, title, text in sorted(heap):
        split = split_of(url)
        if title.strip():
            out.append(Probe(title.strip()[:MAX_PROBE_CHARS], "page-title", "und", url, "search", split))
        words = [w for w in re.split(r"\W+", title) if len(w) >= 2]
        described = text
        for w in sorted(words, key=len, reverse=True):
            described = re.sub(re.escape(w), " ", described, flags=re.IGNORECASE)
        described = re.sub(r"\s+", " ", described).strip()[:MAX_PROBE_CHARS]
        if len(described) >= 24:
            out.append(Probe(described, "page-description", "und", url, "search", split))
    return out


@dataclass
class CorpusFeatures:
    """Each probe's best pages: relevance, above at (0, ∞), above at (0, 0), is the expected page."""

    probes: list[Probe]
    rel: np.ndarray
    above_inf: np.ndarray
    above_zero: np.ndarray
    right: np.ndarray

    def subset(self, split: str) -> "CorpusFeatures":
        idx = [i for i, p in enumerate(self.probes) if p.split == split]
        return CorpusFeatures([self.probes[i] for i in idx], self.rel[idx], self.above_inf[idx], self.above_zero[idx], self.right[idx])


def corpus_features(kb: Any, probes: list[Probe], progress: Callable[[int, int], None] | None = None) -> CorpusFeatures:
    """Search every probe once and fuse its pages at both ordinary floors (module docstring)."""
    from retrieval.websearch.hybrid import PageFloors, candidates, fuse_pages

    store = kb.store
    n = len(probes)
    rel = np.full((n, TOP_PAGES), np.nan)
    a_inf = np.zeros((n, TOP_PAGES), bool)
    a_zero = np.zeros((n, TOP_PAGES), bool)
    right = np.zeros((n, TOP_PAGES), bool)

    def fetch(ids: Any) -> dict[str, dict[str, Any]]:
        return {str(p["_id"]): p for p in store.corpus.retrieve(list(ids))}

    step = 64
    for start in range(0, n, step):
        part = probes[start : start + step]
        vectors = kb.embedder.encode_queries([p.text for p in part]).dense
        for j, (probe, vec) in enumerate(zip(part, vectors)):
            i = start + j
            found = candidates(store, vec, probe.text)
            if not found.chunks:
                continue
            off = fuse_pages(copy.deepcopy(found), PageFloors(0.0, math.inf), k=TOP_PAGES, fetch=fetch)
            on = {h.url: h.above_floor for h in fuse_pages(copy.deepcopy(found), PageFloors(0.0, 0.0), k=TOP_PAGES, fetch=fetch)}
            for c, hit in enumerate(off[:TOP_PAGES]):
                rel[i, c], a_inf[i, c], a_zero[i, c] = hit.relevance, hit.above_floor, on.get(hit.url, hit.above_floor)
                right[i, c] = probe.expected is not None and canonical_url(hit.url) == canonical_url(probe.expected)
            if progress:
                progress(i + 1, n)
    return CorpusFeatures(list(probes), rel, a_inf, a_zero, right)


def _first_above(f: CorpusFeatures, floor: float, ordinary: float) -> tuple[np.ndarray, np.ndarray]:
    """Per probe: whether any page is above ``(floor, ordinary)``, and whether the first such is the expected page."""
    rel = np.nan_to_num(f.rel, nan=-np.inf)
    above = (rel >= floor) & (f.above_inf | (f.above_zero & (rel >= ordinary)))
    has = above.any(axis=1)
    first = np.argmax(above, axis=1)
    return has, has & f.right[np.arange(len(first)), first]


def corpus_figures(f: CorpusFeatures, t: Thresholds) -> dict[str, Any]:
    """Captions given evidence and positives' own page first, under ``t``'s corpus floors."""
    has, right = _first_above(f, t.corpus_floor, t.corpus_ordinary_floor)
    neg = np.array([p.expected is None for p in f.probes], bool)
    k, n = int((has & neg).sum()), int(neg.sum())
    pos = int((~neg).sum())
    return {
        "captions": n, "captions_given_evidence": k, "captions_given_evidence_rate": round(k / n, 4) if n else 0.0,
        "captions_given_evidence_upper": round(clopper_pearson_upper(k, n), 4), "pages": pos,
        "own_page_first": round(int((right & ~neg).sum()) / pos, 4) if pos else 0.0,
    }


def floor_path(cal: CorpusFeatures) -> list[tuple[float, float, int]]:
    """The floors the test walks, strictest first: the floor from the top of :data:`FLOOR_GRID` down, each with the
    middle of the ordinary floors that give the *positives* the most own pages first at it; and that count.  The
    captions are not read, so the order is fixed before they test it."""
    pos = np.array([p.expected is not None for p in cal.probes], bool)
    out = []
    for fl in FLOOR_GRID[::-1]:
        goods = [int((_first_above(cal, float(fl), float(o))[1] & pos).sum()) for o in ORDINARY_GRID]
        best = [float(o) for o, g in zip(ORDINARY_GRID, goods) if g == max(goods)]
        out.append((float(fl), best[len(best) // 2], max(goods)))
    return out


def choose_floors(cal: CorpusFeatures, target: float, base: Thresholds) -> tuple[Thresholds, bool]:
    """Floors by the fixed-sequence test of :mod:`retrieval.calibration.fit` on the captions: of the certified
    floors with the most positives finding their own page first, the lowest (module docstring); False when none
    is certified (the strictest floors are kept)."""
    neg = np.array([p.expected is None for p in cal.probes], bool)
    path = floor_path(cal)
    false = (int((_first_above(cal, fl, o)[0] & neg).sum()) for fl, o, _ in path)
    certified = fixed_sequence(false, int(neg.sum()), certifiable_rate(target, int(neg.sum())))
    if not certified:
        return base.model_copy(update={"corpus_floor": path[0][0], "corpus_ordinary_floor": path[0][1]}), False
    top = max(good for _, _, good in path[:certified])
    plateau = [(fl, o) for fl, o, good in path[:certified] if good == top]
    floor, ordinary = plateau[-1]  # the path runs strictest first
    return base.model_copy(update={"corpus_floor": floor, "corpus_ordinary_floor": ordinary}), True


def corpus_probes(store: Any, languages: list[str], max_pages: int) -> list[Probe]:
    """Page probes and the captions of ``languages``."""
    return page_probes(store, max_pages) + list(caption_probes(languages))
