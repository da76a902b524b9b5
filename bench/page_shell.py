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
