"""Hybrid corpus search: dense and BM25 lexical, fused, with a relevance floor, results per page.

Each query is searched on two routes over the ``corpus`` collection:

- ``dense``: the embedder's query vector against each chunk's ``text`` vector (cosine);
- ``lexical``: our zh/en tokens (:mod:`retrieval.text.lexical`) against each chunk's BM25 ``lexical``
  vector (the engine applies the IDF), read as a share of every query token matched as a token
  found once in the corpus sample (:func:`~retrieval.websearch.sample.lexical_scale`: the same at any corpus size).

The tuned values named below (``q_background``, ``w_lexical``, ``title_min_coverage`` …) are the fields of
:class:`~retrieval.websearch.params.HybridParams` (each with the bench command that chose it); the shipped ones
are :data:`~retrieval.websearch.params.PARAMS`.

**Heights, not raw scores.**  A cosine that separates well among 500 pages lets noise through
among 50,000 (the best of many unrelated chunks rises with their number).  So each route's
score is read against the query's own *background*: the score that the best ``q_background``
of a fixed sample of the corpus reach (:class:`~retrieval.websearch.sample.CorpusSample`; dense per script group, lexical with
the sample's IDF estimate; chunks naming the query left out), a quantile whose meaning does not
change with the corpus's size.  A page's height on a route is its best chunk's score minus that
background, floored at 0 (lexical: as a share of :func:`~retrieval.websearch.sample.lexical_scale`).  Without a sample (unit
tests of the fusion) the ``k_background``-th best candidate page not naming the query stands in.

**Fusion.**  ``sum`` (the default, a calibrated sum)::

    relevance = height_dense + w_lexical · height_lexical

ranks pages by relevance.  ``rrf`` ranks them by reciprocal rank fusion of the two routes'
page ranks (1/(60+r)); the floor is read on the same relevance either way (RRF's scale says
nothing about relevance: its best is 2/61 for any query).  ``bench/evidence.py`` measures both.

**The floor.**  A page is *above floor* when ``relevance ≥ floor``.  The floor reads the embedder's
score scale, so it is data: ``corpus_floor`` of the calibration record (:mod:`retrieval.calibration`,
fitted by ``kar calibrate --corpus`` from the corpus's own titles and descriptions against ordinary
captions; the bundled embedder's by ``bench/evidence.py``).

**The title rule.**  A page whose title stands in the query as whole words and covers at least
``title_min_coverage`` of its words (KAR's template words left out) ranks before the others, the one
covering more first (:func:`~retrieval.websearch.titles.title_coverage`): for ``"Despacito meme origin meaning"`` the page "Despacito",
not "Despacito 2" nor a page quoting the song more often.  It orders pages only; the floor is read on the
relevance.  A description or a caption names no title (a title covers a small share of its words).

**The name rule.**  KAR's query for a grounded entity holds its source work as well
(``"Doge Photo of Kabosu meme origin meaning"``: "Doge" covers a quarter of its words, and the title rule
above does not fire).  So a page whose title *is* one of the grounded entity's names (``names``: its name
and aliases, given by the caller) ranks before all others, compared word-aware as the title rule compares
(:func:`~retrieval.websearch.titles.title_names`).  Without names, the names are read off the query when it has the form of KAR's
entity query (``"{name} {source} {template words}"``, :func:`~retrieval.websearch.titles.lead_names`): a title equal to the query's
leading words, before the template, stands for the name (the longer such title first).  Like the title rule
it orders pages only; the floor is read on the relevance.

**Lexical alone.**  A page the dense route does not find above its background is above the floor only when it
also holds every distinctive word of the query (``lexical_alone_needs_words``): ordinary words shared
with a page ("call me when you can") are no evidence on their own, as for the web backends.

**Ordinary words** (``ordinary_words_rule``).  A page that the query does not name (neither the title nor
the name rule fires for it) and that holds no distinctive word of the query (no ordinary word, outside KAR's
template: :func:`~retrieval.websearch.relevance.distinctive_words`) in its returned chunks is above the floor
only at a second, higher floor (the record's ``corpus_ordinary_floor``): "when the bus driver waits for you" is made of
ordinary words, and a page on bus drivers close to it is weak evidence; "a dog sitting in a burning room says
everything is okay" is ordinary words too, and "This Is Fine" clears the higher floor with room to spare.
A page holding at least ``ordinary_shared_words`` of the query's content words (function words left out)
counts as holding a distinctive one: a description written without the meme's name shares several words with
the page it describes, where an ordinary caption shares one or two with a page on the same subject.  The
web backends' floor is stricter: every web result must hold all the query's distinctive words
(:func:`~retrieval.websearch.relevance.web_above_floor`).

**Per page.**  A result is one page: its best chunk, plus its second-best chunk when that one is
above the floor too (at most two chunks of one page), joined in page order (adjacent chunks
back to back, others with an ellipsis).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from retrieval.calibration.record import CONSERVATIVE
from retrieval.text import lexical as lex
from retrieval.text.scripts import script_group
from retrieval.websearch.params import PARAMS, HybridParams
from retrieval.websearch.relevance import content_words, distinctive_words, holds_any_word, holds_many_words, holds_words
from retrieval.websearch.sample import corpus_sample, lexical_scale
from retrieval.websearch.titles import lead_names, name_keys_of, text_words, title_coverage, title_names

#: the payload keys the route searches read (the page, its URL, its script group); the title and text of
#: only the pages returned are read afterwards (turning every candidate's text into a Python dict was most
#: of a search's cost)
LEAN_KEYS = ("page", "url", "script", "title")

#: full payloads of chunk ids (``Collection.retrieve`` as ``{id: payload}``)
Fetch = Callable[[Sequence[str]], dict[str, dict[str, Any]]]


@dataclass
class ChunkScore:
    """One candidate chunk: its payload and its score on each route (None: the route did not find it)."""

    payload: dict[str, Any]
    dense: float | None = None
    lexical: float | None = None
    relevance: float = 0.0
    id: str = ""


@dataclass
class PageHit:
    """One page of the corpus as a search result."""

    url: str
    title: str
    site: str
    text: str
    relevance: float
    dense_height: float
    lexical_height: float
    above_floor: bool
    chunks: list[int] = field(default_factory=list)
    entity_id: str | None = None
    rank_dense: int | None = None
    rank_lexical: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "title": self.title,
            "site": self.site,
            "text": self.text,
            "relevance": round(self.relevance, 4),
            "dense_height": round(self.dense_height, 4),
            "lexical_height": round(self.lexical_height, 4),
            "above_floor": self.above_floor,
            "chunks": self.chunks,
            "entity_id": self.entity_id,
        }


def page_key(payload: dict[str, Any]) -> str:
    """The page a chunk belongs to: its canonical page URL (older chunks: their URL)."""
    return str(payload.get("page") or payload.get("url") or payload.get("_id") or "")


def _background(page_best: dict[str, float], named: frozenset[str] | set[str] = frozenset(), k_background: int = PARAMS.k_background) -> float:
    """The score of the ``k_background``-th best page that does not name the query (its distinctive words);
    with fewer such pages among the candidates, the lowest of them (or of all pages when every one names
    the query): an upper bound of the true background, since every page outside the candidates scores lower."""
    if not page_best:
        return 0.0
    ranked = sorted((v for k, v in page_best.items() if k not in named), reverse=True)
    if not ranked:
        return min(page_best.values())
    return ranked[min(k_background, len(ranked)) - 1]


def _parts_text(parts: Sequence[dict[str, Any]]) -> str:
    """The chunks' titles and texts, as the floor's word tests read them."""
    return " ".join(f"{p.get('title') or ''} {p.get('text') or ''}" for p in parts)


def _naming(parts: Sequence[dict[str, Any]], distinctive: Sequence[str]) -> bool:
    """Whether the query has distinctive words and the chunks' titles and texts hold every one."""
    return holds_words(distinctive, _parts_text(parts))


def _ranks(page_best: dict[str, float]) -> dict[str, int]:
    return {k: i for i, (k, _) in enumerate(sorted(page_best.items(), key=lambda kv: -kv[1]), start=1)}


def join_chunks(parts: Sequence[dict[str, Any]]) -> str:
    """Chunks of one page in page order: adjacent ones back to back, others with an ellipsis between."""
    ordered = sorted(parts, key=lambda p: int(p.get("chunk") or 0))
    out = ""
    prev: int | None = None
    for p in ordered:
        text = str(p.get("text") or "").strip()
        n = int(p.get("chunk") or 0)
        if not out:
            out = text
        elif prev is not None and n == prev + 1:
            out = f"{out} {text}"
        else:
            out = f"{out} … {text}"
        prev = n
    return out


@dataclass(frozen=True)
class PageFloors:
    """The two floors a page's relevance is read against.  Both read the embedder's score scale, so they are
    the calibration record's (:mod:`retrieval.calibration`): ``floor`` its ``corpus_floor`` (or
    ``KAR_EVIDENCE_FLOOR``), ``ordinary`` its ``corpus_ordinary_floor`` (None: the conservative value,
    :data:`retrieval.calibration.record.CONSERVATIVE`)."""

    floor: float
    ordinary: float | None = None


@dataclass
class _PagePool:
    """The candidate chunks grouped by page: each page's chunks, best score per route, script group, and the
    pages naming the query (holding all its distinctive words)."""

    members: dict[str, list[ChunkScore]] = field(default_factory=dict)
    dense_best: dict[str, float] = field(default_factory=dict)
    lex_best: dict[str, float] = field(default_factory=dict)
    group_of: dict[str, str] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)


def _sampled(background: dict[str, float]) -> bool:
    """Whether both backgrounds were read on the corpus sample (else they are read on the candidates)."""
    return "all" in background and "lexical" in background


def _fill_payloads(chunks: dict[str, ChunkScore], fetch: Fetch) -> None:
    """Read the full payloads of lean candidates (the background on the candidates needs their text)."""
    lean = [cid for cid, c in chunks.items() if "text" not in c.payload]
    if lean:
        full = fetch(lean)
        for cid in lean:
            if cid in full:
                chunks[cid].payload = full[cid]


def _gather_pages(chunks: dict[str, ChunkScore], distinctive: Sequence[str], need_named: bool) -> _PagePool:
    """One pass over the chunks: each page's chunks, best score per route, script group, naming the query."""
    pool = _PagePool()
    for c in chunks.values():
        key = page_key(c.payload)
        items = pool.members.get(key)
        if items is None:
            pool.members[key] = items = []
            pool.group_of[key] = script_group(c.payload)
        items.append(c)
        if c.dense is not None and c.dense > pool.dense_best.get(key, float("-inf")):
            pool.dense_best[key] = c.dense
        if c.lexical is not None and c.lexical > pool.lex_best.get(key, float("-inf")):
            pool.lex_best[key] = c.lexical
        if need_named and key not in pool.named and _naming([c.payload], distinctive):
            pool.named.add(key)
    return pool


def _backgrounds(pool: _PagePool, background: dict[str, float], k_background: int) -> tuple[float, dict[str, float], float]:
    """The dense background, the dense background per script group, and the lexical background: read on the
    corpus sample when given (:class:`~retrieval.websearch.sample.CorpusSample`), else on the candidates (the ``k_background``-th page not
    naming the query; per script group where the group has that many)."""
    named = pool.named
    bg_lex = background["lexical"] if "lexical" in background else _background(pool.lex_best, named, k_background)
    bg_group: dict[str, float] = {}
    groups = set(pool.group_of.values())
    if "all" in background:
        bg_dense = background["all"]
        bg_group = {g: v for g, v in background.items() if g in ("cjk", "latin")}
    else:
        bg_dense = _background(pool.dense_best, named, k_background)
    if len(groups) > 1 and "all" not in background:
        for g in groups:
            in_group = {key: v for key, v in pool.dense_best.items() if pool.group_of[key] == g}
            if sum(1 for key in in_group if key not in named) >= k_background:
                bg_group[g] = _background(in_group, named, k_background)
    return bg_dense, bg_group, bg_lex


#: one scored page: (order key, relevance, dense height, lexical height, page)
Scored = tuple[float, float, float, float, str]


def _score_pages(pool: _PagePool, backgrounds: tuple[float, dict[str, float], float], idf_norm: float, w_lexical: float) -> list[Scored]:
    """Each chunk's relevance (its heights over the backgrounds, summed); each page at its best chunk's."""
    bg_dense, bg_group, bg_lex = backgrounds
    scored: list[Scored] = []
    for key, items in pool.members.items():
        bg = bg_group.get(pool.group_of[key], bg_dense)
        best = (float("-inf"), 0.0, 0.0)
        for c in items:
            hd = c.dense - bg if c.dense is not None and c.dense > bg else 0.0
            hl = (c.lexical - bg_lex) / idf_norm if c.lexical is not None and c.lexical > bg_lex else 0.0
            c.relevance = hd + w_lexical * hl
            if c.relevance > best[0]:
                best = (c.relevance, hd, hl)
        scored.append((best[0], *best, key))
    return scored


def _title_of(pool: _PagePool, key: str) -> str:
    return str(pool.members[key][0].payload.get("title") or "")


def _title_rules(pool: _PagePool, query: str, names: Sequence[str] | None, params: HybridParams) -> tuple[dict[str, float], dict[str, int]]:
    """Per page: its title's coverage of the query where it reaches ``title_min_coverage`` (the title rule, else
    0), and the length of the grounded name its title is (the name rule: names given, or read off KAR's entity
    query; 0 when none)."""
    query_words = text_words(query) if query and params.title_min_coverage <= 1.0 else ()
    cover: dict[str, float] = {}
    if query_words:
        for key in pool.members:
            c = title_coverage(_title_of(pool, key), query_words, params.min_title_chars)
            cover[key] = c if c >= params.title_min_coverage else 0.0
    named_len: dict[str, int] = {}
    if params.name_rule:
        keys = name_keys_of(names, params.min_title_chars) if names else frozenset(lead_names(query_words if query_words else text_words(query)))
        if keys:
            named_len = {key: title_names(_title_of(pool, key), keys, params.min_title_chars) for key in pool.members}
    return cover, named_len


@dataclass
class _FloorRule:
    """Whether a page is above the floor: at least ``cut`` (the floor, and the relative floor under the query's
    best page), found by the dense route or holding the query's distinctive words, and, when the query does not
    name it, holding a distinctive word or enough content words or reaching the ordinary floor."""

    cut: float
    ordinary: float
    query: str
    distinctive: Sequence[str]
    params: HybridParams
    content: list[str] | None = None  # the query's content words, read when the ordinary-words rule needs them

    def above(self, rel: float, hd: float, named_by_query: bool, parts: Sequence[dict[str, Any]]) -> bool:
        p = self.params
        above = rel >= self.cut and (hd > 0 or not p.lexical_alone_needs_words or _naming(parts, self.distinctive))
        if above and p.ordinary_words_rule and not named_by_query:
            text = _parts_text(parts)
            above = rel >= self.ordinary or holds_any_word(self.distinctive, text)
            if not above and p.ordinary_shared_words:
                if self.content is None:
                    self.content = content_words(self.query)
                above = holds_many_words(self.content, text, p.ordinary_shared_words)
        return above


def _page_hit(parts: Sequence[dict[str, Any]], scored: Scored, above: bool, ranks: tuple[dict[str, int], dict[str, int]], params: HybridParams) -> PageHit:
    _, rel, hd, hl, key = scored
    p = parts[0]
    return PageHit(
        url=str(p.get("url") or ""),
        title=str(p.get("title") or p.get("url") or ""),
        site=str(p.get("site") or ""),
        text=join_chunks(parts)[: params.max_snippet_chars * params.max_chunks_per_page],
        relevance=rel,
        dense_height=hd,
        lexical_height=hl,
        above_floor=above,
        chunks=sorted(int(x.get("chunk") or 0) for x in parts),
        entity_id=str(p["entity_id"]) if p.get("entity_id") else None,
        rank_dense=ranks[0].get(key),
        rank_lexical=ranks[1].get(key),
    )


def fuse_pages(
    found: Candidates,
    floors: PageFloors,
    params: HybridParams = PARAMS,
    *,
    k: int | None = None,
    fetch: Fetch | None = None,
    names: Sequence[str] | None = None,
) -> list[PageHit]:
    """Pages of one query's candidate chunks (``found``: chunks, route scores, distinctive words, backgrounds,
    query text), best first, each with its relevance and whether it is above ``floors``; ``params``: the
    fusion, the rules and the results' size (:class:`~retrieval.websearch.params.HybridParams`); ``k``: only
    the best k pages are written out; ``fetch``: the full payloads of chunk ids, for candidates found with
    :data:`LEAN_KEYS` only (read for the pages written out); ``names``: the grounded entity's names and aliases
    for the name rule (None: read off the query, :func:`~retrieval.websearch.titles.lead_names`).  The title and name rules order pages;
    whether a page is above the floor is read on its relevance (and, with the ordinary-words rule, on whether
    the query names it or shares a distinctive word with it).  The chunks' relevance (and lean payloads) are
    written in place."""
    chunks, distinctive, query = found.chunks, found.distinctive, found.query
    background = found.background or {}
    if distinctive and fetch is not None and not _sampled(background):
        _fill_payloads(chunks, fetch)  # the background is read on the candidates, leaving out pages naming the query
    pool = _gather_pages(chunks, distinctive, bool(distinctive) and not _sampled(background))
    idf_norm = lexical_scale(found.query_tokens, found.n_chunks, params.sample_size)
    scored = _score_pages(pool, _backgrounds(pool, background, params.k_background), idf_norm, params.w_lexical)
    ranks = _ranks(pool.dense_best), _ranks(pool.lex_best)
    if params.fusion == "rrf":
        scored = [(sum(1.0 / (params.rrf_k + r) for r in (ranks[0].get(key), ranks[1].get(key)) if r is not None), rel, hd, hl, key) for _, rel, hd, hl, key in scored]
    title_rank, named_len = _title_rules(pool, query, names, params)
    # above the floor: at least the floor and at least relative_floor of the best page's relevance (a page far
    # below the query's best is not what the query is about, however many such pages the corpus holds)
    cut = max(floors.floor, params.relative_floor * max((t[1] for t in scored), default=0.0))
    first_url = {key: str(items[0].payload.get("url") or "") for key, items in pool.members.items()}
    scored.sort(key=lambda t: (-named_len.get(t[4], 0), -title_rank.get(t[4], 0.0), -t[0], -t[1], first_url[t[4]]))
    chosen: list[tuple[Scored, list[ChunkScore]]] = []
    for t in scored[: k if k is not None else len(scored)]:
        items = sorted(pool.members[t[4]], key=lambda c: -c.relevance)
        chosen.append((t, [items[0]] + [c for c in items[1 : params.max_chunks_per_page] if c.relevance >= cut]))
    need = [c.id for _, kept in chosen for c in kept if "text" not in c.payload] if fetch is not None else []
    full = fetch(need) if need and fetch is not None else {}
    ordinary = CONSERVATIVE.corpus_ordinary_floor if floors.ordinary is None else floors.ordinary
    rule = _FloorRule(cut, ordinary, query, distinctive, params)
    out: list[PageHit] = []
    for t, kept in chosen:
        parts = [full.get(c.id, c.payload) for c in kept]
        named_by_query = bool(named_len.get(t[4], 0) or title_rank.get(t[4], 0.0))
        out.append(_page_hit(parts, t, rule.above(t[1], t[2], named_by_query, parts), ranks, params))
    return out


@dataclass
class Candidates:
    """What one query's two route searches found: the chunks with their route scores, the query's
    lexical token count and the corpus size (what :func:`fuse_pages` needs)."""

    chunks: dict[str, ChunkScore]
    query_tokens: int
    n_chunks: int
    distinctive: tuple[str, ...] = ()
    #: the query's backgrounds read on the corpus sample (dense "all"/"cjk"/"latin", "lexical")
    background: dict[str, float] | None = None
    #: the query's text (the title rule of :func:`fuse_pages`)
    query: str = ""


def candidates(store: Any, query_vector: Any, query: str, params: HybridParams = PARAMS, lean: bool = True) -> Candidates:
    """Search both routes of the store's corpus for a query (its dense vector given; ``params.pool`` chunks per
    route).  ``lean``: the candidates' payloads hold only :data:`LEAN_KEYS` (give :func:`fuse_pages` a
    ``fetch``); else whole."""
    pool = params.pool
    corpus = store.corpus
    chunks: dict[str, ChunkScore] = {}
    distinctive = tuple(distinctive_words(query))
    keys = LEAN_KEYS if lean else None
    if query_vector is not None:
        for h in corpus.search("text", query_vector, pool, payload_keys=keys):
            chunks.setdefault(h.id, ChunkScore(h.payload, id=h.id)).dense = float(h.score)
    qsparse: dict[int, float] = {}
    if store.corpus_has_lexical:
        qsparse = lex.encode_query(query)
        if qsparse:
            for h in corpus.search_sparse("lexical", qsparse, pool, payload_keys=keys):
                chunks.setdefault(h.id, ChunkScore(h.payload, id=h.id)).lexical = float(h.score)
    older = [cid for cid, c in chunks.items() if "script" not in c.payload and "text" not in c.payload]
    if older:  # chunks stored before the script group was: it is read from their title and text
        for p in corpus.retrieve(older):
            chunks[p["_id"]].payload = p
    if not chunks:
        return Candidates(chunks, len(qsparse), 0, distinctive, query=query)
    n = corpus.count()
    sample = corpus_sample(corpus, params.sample_size)
    background: dict[str, float] = {}
    if query_vector is not None:
        background.update(sample.background(query_vector, distinctive, params))
    lex_bg = sample.lexical_background(qsparse, n, distinctive, params) if qsparse else None
    if lex_bg is not None:
        background["lexical"] = lex_bg
    return Candidates(chunks, len(qsparse), n, distinctive, background or None, query)


def search_corpus(
    store: Any,
    query_vector: Any,
    query: str,
    k: int,
    floors: PageFloors,
    params: HybridParams = PARAMS,
    names: Sequence[str] | None = None,
) -> list[PageHit]:
    """The best ``k`` pages of the store's corpus for a query (its dense vector given), fused and floored;
    ``names``: the grounded entity's names and aliases when the query is about one (the name rule)."""
    found = candidates(store, query_vector, query, params)
    if not found.chunks:
        return []

    def fetch(ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        return {str(p["_id"]): p for p in store.corpus.retrieve(list(ids))}

    return fuse_pages(found, floors, params, k=k, fetch=fetch, names=names)
