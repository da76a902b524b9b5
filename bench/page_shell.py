"""The evidence bench's pages inside a realistic page shell, for ``bench/evidence.py --shell``.

Each page is rendered as HTML in one of two layouts (chosen by its URL's hash, half each):

- ``wordpress``: a WordPress-style theme: a cookie banner, a site header with its navigation menu, the
  article inside ``<main>`` (``h1``, ``<time datetime>``, paragraphs, its category line), then, still inside
  ``<main>``, the previous/next post links and a "Related posts" list, then a sidebar (newsletter, popular
  posts, tags) and the site footer;
- ``divs``: a site with no ``<main>`` or ``<article>``: the same parts as ``<div>``s, the date in JSON-LD
  (``datePublished``) and as text, the cookie banner last.

The previous/next links, the related posts and the sidebar's popular posts are titles of OTHER pages of
the corpus (what makes a page's chunks look like evidence for another page's name).  The shell's strings
are kept per page, to read each chunk against them (:func:`shell_share`).
"""

from __future__ import annotations

import hashlib
import html
import random
import re
from dataclasses import dataclass
from typing import Any

SITE = "Meme Notes"
NAV = ("Home", "Memes", "Trending", "Submit a meme", "Forums", "Newsletter", "About us", "Contact", "Log in", "Sign up")
COOKIE = (
    "We use cookies and similar technologies to personalise content and ads, to provide social media features "
    "and to analyse our traffic. We also share information about your use of our site with our advertising and "
    "analytics partners.",
    "Accept all",
    "Manage preferences",
    "Reject non-essential",
)
SIDEBAR = (
    "Newsletter",
    "Get the week's best memes and internet culture stories in your inbox every Friday.",
    "Subscribe",
    "Popular this week",
    "Tags",
    "reaction images",
    "image macros",
    "viral videos",
    "catchphrases",
    "Advertisement",
)
FOOTER = (
    "About",
    "Careers",
    "Advertise with us",
    "Privacy policy",
    "Terms of service",
    "Cookie settings",
    "Follow us on Twitter, Facebook and Instagram",
    f"© 2024 {SITE} Media. All rights reserved.",
)
ARTICLE_CHROME = ("Posted on", "by", "Posted in Memes", "Previous post", "Next post", "Related posts", "Internet culture, explained", SITE)
AUTHORS = ("Ana Ruiz", "Tom Becker", "Mei Lin", "Sam Okafor")
#: titles of other pages in the related list, the sidebar's popular list, and the previous/next links
N_RELATED, N_POPULAR = 6, 5
#: a chunk is boilerplate when more than this share of its characters are shell strings
BOILERPLATE_SHARE = 0.5
#: shell strings shorter than this are matched as whole words only ("by" is no shell string inside "baby");
#: longer ones anywhere (inline links run together: "Accept allManage preferences")
WHOLE_WORDS_BELOW = 5


@dataclass
class ShellPage:
    """One page rendered in a shell: its HTML, layout, the date written into it, its article lines and the
    shell's strings (menus, banner, sidebar, footer, the other pages' titles)."""

    url: str
    title: str
    html: str
    layout: str
    date: str
    article: list[str]
    shell: list[str]


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def _seed(url: str) -> int:
    return int(hashlib.sha256(f"page-shell:{url}".encode()).hexdigest(), 16)


def _links(titles: list[str]) -> str:
    return "\n".join(f'<li><a href="/{_slug(t)}/">{html.escape(t)}</a></li>' for t in titles)


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.casefold()).strip("-")[:60] or "post"


def render(page: dict[str, Any], titles: list[str]) -> ShellPage:
    """``page`` (url, title, text) in its shell; ``titles``: every page title of the corpus (others are drawn
    from it by the page's URL hash)."""
    seed = _seed(page["url"])
    rng = random.Random(seed)
    others = [t for t in rng.sample(titles, min(len(titles), N_RELATED + N_POPULAR + 3)) if t != page["title"]]
    prev_next, related, popular = others[:2], others[2 : 2 + N_RELATED], others[2 + N_RELATED : 2 + N_RELATED + N_POPULAR]
    year, month, day = 2010 + seed % 11, 1 + (seed >> 8) % 12, 1 + (seed >> 16) % 28
    date = f"{year:04d}-{month:02d}-{day:02d}"
    author = AUTHORS[seed % len(AUTHORS)]
    article = [line for line in page["text"].split("\n") if line.strip()]
    paragraphs = "\n".join(f"<p>{html.escape(line)}</p>" for line in article)
    title = html.escape(page["title"])
    layout = "wordpress" if seed % 2 == 0 else "divs"
    parts = _wordpress if layout == "wordpress" else _divs
    body = parts(title, date, author, paragraphs, prev_next, related, popular)
    head = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>{title} | {SITE}</title>\n'
        f'<meta property="og:title" content="{title}">\n<meta property="og:site_name" content="{SITE}">\n'
    )
    if layout == "wordpress":
        head += f'<meta property="article:published_time" content="{date}T09:30:00+00:00">\n'
    else:
        head += f'<script type="application/ld+json">{{"@context":"https://schema.org","@type":"Article","headline":{_json(page["title"])},"datePublished":"{date}"}}</script>\n'
    shell = [*NAV, *COOKIE, *SIDEBAR, *FOOTER, *ARTICLE_CHROME, author, date, *prev_next, *related, *popular]
    return ShellPage(page["url"], page["title"], head + "</head>\n" + body + "\n</html>\n", layout, date, article, shell)


def _json(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False).replace("</", "<\\/")


def _cookie() -> str:
    return (
        f'<div id="cookie-notice" class="cookie-consent" role="dialog">\n<p>{html.escape(COOKIE[0])}</p>\n'
        f'<button class="accept">{COOKIE[1]}</button> <button class="settings">{COOKIE[2]}</button> <button>{COOKIE[3]}</button>\n</div>'
    )


def _nav() -> str:
    return '<nav class="main-navigation" aria-label="Primary">\n<ul class="menu">\n' + "\n".join(f'<li class="menu-item"><a href="/{_slug(n)}/">{n}</a></li>' for n in NAV) + "\n</ul>\n</nav>"


def _sidebar(popular: list[str], tag: str) -> str:
    return (
        f'<{tag} id="secondary" class="widget-area sidebar">\n<section class="widget widget_newsletter"><h2 class="widget-title">{SIDEBAR[0]}</h2>\n'
        f'<p>{html.escape(SIDEBAR[1])}</p>\n<form><input type="email" placeholder="you@example.com"><button>{SIDEBAR[2]}</button></form></section>\n'
        f'<section class="widget widget_popular"><h2 class="widget-title">{SIDEBAR[3]}</h2>\n<ul>\n{_links(popular)}\n</ul></section>\n'
        f'<section class="widget widget_tag_cloud"><h2 class="widget-title">{SIDEBAR[4]}</h2>\n<div class="tagcloud">'
        + " ".join(f'<a href="/tag/{_slug(t)}/" class="tag-cloud-link">{t}</a>' for t in SIDEBAR[5:9])
        + f'</div></section>\n<div class="ad-slot"><span>{SIDEBAR[9]}</span></div>\n</{tag}>'
    )


def _footer(tag: str) -> str:
    links = "\n".join(f'<li><a href="/{_slug(f)}/">{html.escape(f)}</a></li>' for f in FOOTER[:6])
    return f'<{tag} id="colophon" class="site-footer">\n<ul class="footer-menu">\n{links}\n</ul>\n<p class="social">{FOOTER[6]}</p>\n<p class="site-info">{html.escape(FOOTER[7])}</p>\n</{tag}>'


def _wordpress(title: str, date: str, author: str, paragraphs: str, prev_next: list[str], related: list[str], popular: list[str]) -> str:
    pn = prev_next + ["", ""]
    return (
        f'<body class="post-template-default single single-post">\n{_cookie()}\n<div id="page" class="site">\n'
        f'<header id="masthead" class="site-header">\n<div class="site-branding"><p class="site-title"><a href="/">{SITE}</a></p>\n'
        f'<p class="site-description">{ARTICLE_CHROME[6]}</p></div>\n{_nav()}\n</header>\n'
        '<div id="content" class="site-content">\n<div id="primary" class="content-area">\n<main id="main" class="site-main">\n'
        f'<article class="post type-post status-publish hentry">\n<header class="entry-header">\n<h1 class="entry-title">{title}</h1>\n'
        f'<div class="entry-meta"><span class="posted-on">Posted on <time class="entry-date published" datetime="{date}T09:30:00+00:00">{date}</time></span>\n'
        f'<span class="byline"> by <span class="author vcard"><a href="/author/">{author}</a></span></span></div>\n</header>\n'
        f'<div class="entry-content">\n{paragraphs}\n</div>\n<footer class="entry-footer"><span class="cat-links">Posted in Memes</span></footer>\n</article>\n'
        f'<nav class="navigation post-navigation" aria-label="Posts">\n<div class="nav-previous"><a href="/{_slug(pn[0])}/" rel="prev"><span class="meta-nav">Previous post</span>\n'
        f'<span class="post-title">{html.escape(pn[0])}</span></a></div>\n<div class="nav-next"><a href="/{_slug(pn[1])}/" rel="next"><span class="meta-nav">Next post</span>\n'
        f'<span class="post-title">{html.escape(pn[1])}</span></a></div>\n</nav>\n'
        f'<section class="related-posts">\n<h2>Related posts</h2>\n<ul>\n{_links(related)}\n</ul>\n</section>\n</main>\n</div>\n'
        f'{_sidebar(popular, "aside")}\n</div>\n{_footer("footer")}\n</div>\n</body>'
    )


def _divs(title: str, date: str, author: str, paragraphs: str, prev_next: list[str], related: list[str], popular: list[str]) -> str:
    menu = "\n".join(f'<div class="menu-item"><a href="/{_slug(n)}/">{n}</a></div>' for n in NAV)
    pn = prev_next + ["", ""]
    return (
        f'<body>\n<div class="wrapper">\n<div class="top-bar">\n<div class="logo"><a href="/">{SITE}</a></div>\n<div class="menu">\n{menu}\n</div>\n</div>\n'
        '<div class="container">\n<div class="col-main">\n'
        f'<div class="post">\n<h1 class="post-title">{title}</h1>\n<div class="post-info">Posted on {date} by {author}</div>\n'
        f'<div class="post-body">\n{paragraphs}\n</div>\n<div class="post-tags">Posted in Memes</div>\n</div>\n'
        f'<div class="post-nav"><a href="/{_slug(pn[0])}/">Previous post</a>\n<a href="/{_slug(pn[0])}/">{html.escape(pn[0])}</a>\n'
        f'<a href="/{_slug(pn[1])}/">Next post</a>\n<a href="/{_slug(pn[1])}/">{html.escape(pn[1])}</a></div>\n'
        f'<div class="related">\n<h3>Related posts</h3>\n<ul>\n{_links(related)}\n</ul>\n</div>\n</div>\n'
        f'{_sidebar(popular, "div")}\n</div>\n{_footer("div")}\n</div>\n'
        f'<div class="cc-window cc-banner">\n<span class="cc-message">{html.escape(COOKIE[0])}</span>\n'
        f'<a class="cc-btn cc-allow">{COOKIE[1]}</a> <a class="cc-btn">{COOKIE[2]}</a> <a class="cc-btn cc-deny">{COOKIE[3]}</a>\n</div>\n</body>'
    )


def shell_share(chunk: str, page: ShellPage) -> float:
    """The share of a chunk's characters (spaces left out) that are shell strings: each line of the chunk that
    is not a piece of the page's own title or article has every shell string in it taken out, longest first
    (one shorter than WHOLE_WORDS_BELOW as a whole word only); what is taken out is shell, the rest article."""
    article = _norm("\n".join([page.title, *page.article]))
    strings = sorted({_norm(s) for s in page.shell if s.strip()}, key=len, reverse=True)
    patterns = [re.compile(re.escape(s) if len(s) >= WHOLE_WORDS_BELOW else r"(?<![^\W_])" + re.escape(s) + r"(?![^\W_])") for s in strings]
    total = shell = 0
    for line in chunk.split("\n"):
        n = _norm(line)
        size = len(n.replace(" ", ""))
        total += size
        if not size or n in article:
            continue
        rest = n
        for pattern in patterns:
            rest = pattern.sub(" ", rest)
        shell += size - len(rest.replace(" ", ""))
    return shell / total if total else 0.0


def article_kept(text: str, page: ShellPage) -> float:
    """The share of the page's article characters whose line is found in the extracted ``text``."""
    got = _norm(text)
    sizes = [(len(_norm(a)), _norm(a) in got) for a in page.article]
    total = sum(s for s, _ in sizes)
    return sum(s for s, kept in sizes if kept) / total if total else 0.0


def other_titles_kept(text: str, page: ShellPage, titles_of_others: list[str]) -> int:
    """How many of the other pages' titles placed in the shell stand as a line of the extracted ``text``."""
    lines = {_norm(line) for line in text.split("\n")}
    return sum(1 for t in titles_of_others if _norm(t) in lines)


# -- the bench step ---------------------------------------------------------------------------------
#: trafilatura settings compared under ``extraction`` (the first is the one the import uses)
VARIANTS = {
    "precision_fast": {},
    "precision_with_fallbacks": {"fast": False},
    "balanced_fast": {"favor_precision": False},
    "balanced_with_fallbacks": {"favor_precision": False, "fast": False},
}
BOILERPLATE_NOTE = (
    "a chunk is boilerplate when more than BOILERPLATE_SHARE (0.5) of its characters (spaces left out) are shell "
    "strings: each line of the chunk that is not part of the page's own title or article text has every string the "
    "shell put on that page (menu items, cookie banner, sidebar widgets, footer links, byline, date, the previous/next, "
    "related and popular titles of OTHER pages) taken out, longest first, strings under 5 characters as whole words "
    "only; what was taken out is shell"
)


def extraction_figures(pages: list[ShellPage]) -> dict[str, Any]:
    """Per extraction (visible text, then each trafilatura setting): article kept, shell kept, boilerplate
    chunks, other pages' titles standing as a line, title and date read right, pages with no main text."""
    from crawlers.main_text import MainTextParams, extract_page, visible_text
    from crawlers.text import chunk_text

    out: dict[str, Any] = {}
    ways: dict[str, Any] = {"visible_text (before)": None, **{f"trafilatura_{k}": MainTextParams(**v) for k, v in VARIANTS.items()}}
    for name, params in ways.items():
        kept, shell, boiler, chunks, titles, dates, fallback, other = [], [], 0, 0, 0, 0, 0, 0
        for sp in pages:
            if params is None:
                title, text, date = (*visible_text(sp.html, sp.url), None)
            else:
                got = extract_page(sp.html, sp.url, params=params)
                title, text, date, fallback = got.title, got.text, got.date, fallback + (got.method == "visible")
            kept.append(article_kept(text, sp))
            shell.append(shell_share(text, sp))
            cs = chunk_text(text)
            chunks += len(cs)
            boiler += sum(1 for c in cs if shell_share(c, sp) > BOILERPLATE_SHARE)
            titles += title.split() == sp.title.split()  # the extractors collapse runs of spaces
            dates += date == sp.date
            other += other_titles_kept(text, sp, sp.shell[-(N_RELATED + N_POPULAR + 2) :])
        out[name] = {
            "article_kept": round(sum(kept) / len(kept), 4), "article_kept_min": round(min(kept), 4),
            "shell_share_of_text": round(sum(shell) / len(shell), 4), "chunks": chunks, "boilerplate_chunks": boiler,
            "boilerplate_chunk_share": round(boiler / chunks, 4) if chunks else None,
            "other_pages_titles_as_lines": other, "title_right": titles, "date_right": dates, "no_main_text_fallback": fallback,
        }
    return out


def write_warc(path: Any, pages: list[ShellPage]) -> None:
    """The shell pages as a gzipped WARC of HTTP responses (what ``kar corpus import crawl.warc.gz`` reads)."""
    import io

    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for sp in pages:
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(sp.url, "response", payload=io.BytesIO(sp.html.encode("utf-8")), http_headers=http))


def _stored_chunks(kb: Any, pages: list[ShellPage]) -> dict[str, Any]:
    """The boilerplate share of the chunks a corpus stored for the pages."""
    chunks = boiler = 0
    for sp in pages:
        for c in kb.store.page_chunks(sp.url):
            chunks += 1
            boiler += shell_share(c["text"], sp) > BOILERPLATE_SHARE
    return {"chunks": chunks, "boilerplate_chunks": boiler, "boilerplate_chunk_share": round(boiler / chunks, 4) if chunks else None}


def search_figures(kb: Any, pages: dict[str, ShellPage], queries: list[dict[str, Any]], captions: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """Search-CoT's evidence (the local hybrid search as the pipeline runs it, then ``select_evidence``) per
    query kind and split: evidence hit@1 (the first piece is the query's page), the right page among the pieces,
    the share of pieces from other pages and of boilerplate pieces; the ordinary captions given any evidence."""
    from agents.pipeline.evidence import select_evidence
    from culturebase.entity import canonical_url
    from retrieval.websearch.local import LocalCorpusSearch

    search = LocalCorpusSearch(kb)
    rows: dict[tuple[str, str], list[tuple[float, float, int, int, int]]] = {}
    for q in queries:
        pieces = select_evidence([(q["query"], "local", search.search_sync(q["query"], k))], None).pieces
        target = canonical_url(q["url"])
        urls = [canonical_url(p.url) for p in pieces]
        boiler = sum(1 for p in pieces if canonical_url(p.url) in pages and shell_share(p.content, pages[canonical_url(p.url)]) > BOILERPLATE_SHARE)
        row = (1.0 if urls[:1] == [target] else 0.0, 1.0 if target in urls else 0.0, sum(1 for u in urls if u != target), len(urls), boiler)
        for split in ("all", "held-out") if q["split"] == "held-out" else ("all",):
            rows.setdefault((q["kind"], split), []).append(row)
    out: dict[str, Any] = {}
    for (kind, split), rs in sorted(rows.items()):
        pieces = sum(r[3] for r in rs)
        out.setdefault(split, {})[kind] = {
            "n": len(rs), "evidence_hit@1": round(sum(r[0] for r in rs) / len(rs), 4), "right_page_in_evidence": round(sum(r[1] for r in rs) / len(rs), 4),
            "pieces": pieces, "other_pages_share": round(sum(r[2] for r in rs) / pieces, 4) if pieces else None,
            "boilerplate_pieces": sum(r[4] for r in rs),
        }
    given: dict[str, list[int]] = {}
    passed: dict[str, list[str]] = {}
    for c in captions:
        pieces = select_evidence([(c["query"], "local", search.search_sync(c["query"], k))], None).pieces
        given.setdefault(c["split"], []).append(1 if pieces else 0)
        if pieces:
            passed.setdefault(c["split"], []).append(f"{c['query']} -> {pieces[0].title}")
    out["ordinary_captions"] = {
        s: {"n": len(v), "given_evidence": sum(v), "share": round(sum(v) / len(v), 4), "passed": passed.get(s, [])[:20]} for s, v in sorted(given.items())
    }
    return out


def run(pages: list[dict[str, Any]], queries: list[dict[str, Any]], captions: list[dict[str, Any]], settings: Any, embedder: Any, tmp: Any, k: int) -> dict[str, Any]:
    """The shell step of ``bench/evidence.py --shell``: the extraction figures, then three corpora of the same
    pages searched by the same queries: the pages' own text (as the bench imports them), the shell pages
    read by their visible text (before), the shell pages imported as a WARC through ``kar corpus import``'s
    code (after: main text by trafilatura)."""
    import json
    from pathlib import Path

    from crawlers.main_text import visible_text
    from crawlers.page_dump import import_pages
    from culturebase.entity import canonical_url
    from retrieval.knowledge_base import KnowledgeBase
    from tests.fakes.pages import PAGES

    tmp = Path(tmp)
    titles = [p["title"] for p in pages]
    shell = [render(p, titles) for p in pages]
    by_url = {canonical_url(sp.url): sp for sp in shell}
    out: dict[str, Any] = {
        "layouts": {lay: sum(1 for sp in shell if sp.layout == lay) for lay in ("wordpress", "divs")},
        "shell": "a cookie banner, a site header and navigation menu, the article (title, date, byline, paragraphs), previous/next "
                 f"post links, a 'Related posts' list of {N_RELATED} and a sidebar 'Popular this week' list of {N_POPULAR} titles of OTHER "
                 "pages of the corpus, a newsletter widget, a tag cloud, a footer; layouts: 'wordpress' (article and related list inside "
                 "<main>), 'divs' (no <main> or <article>: the whole body is visible text)",
        "boilerplate_chunk": BOILERPLATE_NOTE,
        "extraction": {
            "bench_pages": extraction_figures(shell),
            "short_test_pages": extraction_figures([render(p, [x["title"] for x in PAGES]) for p in PAGES]),
            "note": "short_test_pages: the 14 pages of tests/fakes/pages.py (41 to 181 characters of text) in the same shell",
        },
    }
    dumps = {"text": tmp / "shell-text.jsonl", "shell_visible_text": tmp / "shell-visible.jsonl", "shell_main_text": tmp / "shell.warc.gz"}
    dumps["text"].write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pages), "utf-8")
    visible = [{"url": sp.url, "title": (v := visible_text(sp.html, sp.url))[0], "text": v[1]} for sp in shell]
    dumps["shell_visible_text"].write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in visible), "utf-8")
    write_warc(dumps["shell_main_text"], shell)
    out["corpora"] = {
        "text": "the pages' own text as JSONL (what the rest of the bench imports): no shell",
        "shell_visible_text": "the shell pages read as every HTML page was before: og:title, visible text of <main>, else <article>, else <body>",
        "shell_main_text": "the shell pages as a WARC through kar corpus import's code: trafilatura's main text, title and date",
    }
    for name, dump in dumps.items():
        with KnowledgeBase.open(settings.model_copy(update={"kb_path": tmp / f"kb-shell-{name}"}), embedder=embedder) as kb:
            report = import_pages(kb, dump)
            res: dict[str, Any] = {"import": {"pages": report.pages, "chunks": report.chunks, "skipped": len(report.skipped), "fallback": report.fallback}}
            res["stored_chunks"] = _stored_chunks(kb, shell)
            res["dated_chunks"] = sum(1 for sp in shell for c in kb.store.page_chunks(sp.url) if c.get("date") == sp.date)
            res.update(search_figures(kb, by_url, queries, captions, k))
            out[name] = res
    out["side_by_side"] = side_by_side(out, list(dumps))
    return out


def side_by_side(out: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The headline figures of each corpus next to each other (all pages)."""
    kinds = sorted(out[names[0]]["all"])
    table: dict[str, Any] = {"boilerplate_chunk_share": {n: out[n]["stored_chunks"]["boilerplate_chunk_share"] for n in names}}
    for kind in kinds:
        table[f"evidence_hit@1 {kind}"] = {n: out[n]["all"][kind]["evidence_hit@1"] for n in names}
        table[f"other_pages_share {kind}"] = {n: out[n]["all"][kind]["other_pages_share"] for n in names}
    for split in out[names[0]]["ordinary_captions"]:
        table[f"ordinary_captions_given_evidence {split}"] = {n: out[n]["ordinary_captions"][split]["share"] for n in names}
    return table
