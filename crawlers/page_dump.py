"""Page dumps into the search corpus: JSONL pages, WARC / WARC.gz, ``scrapy crawl -o`` output.

``kar corpus import FILE|DIR`` and ``POST /v1/corpus/import`` read pages here and store them as the
crawl pipeline does (:func:`crawlers.text.chunk_text`, :meth:`KnowledgeBase.replace_page`):

- **JSONL**: one page per line, ``url``, ``title``, ``text``, optional ``site`` and ``entity`` (an
  entity id, or a name or alias of one, to link the page to);
- **scrapy -o**: JSON Lines (``.jl``) or the JSON array Scrapy writes (one item per line between
  ``[`` and ``]``, two arrays back to back when a run appended); an item's text is ``page_text``
  (our spiders), ``text``, or its ``content`` sections (``{section: {text: [...]}}``);
- **WARC / WARC.gz** (read with warcio): ``response`` records whose HTTP content type is HTML.

HTML (a WARC response, or a JSONL / scrapy record with ``html`` and no text) is read as
:func:`html_page` says: a KnowYourMeme entry body by its sections (the spider's selectors), any other
page by its main text (:mod:`crawlers.main_text`: trafilatura, menus, banners, sidebars, footers and
"related" lists left out), with its title and, where the page's markup gives one, its date (ISO,
stored on each chunk as ``date``); a page with no main text is read as its visible text and counted
(``fallback`` in the report).

Streamed: one page at a time, stored in batches; a JSONL line is read up to
:data:`MAX_LINE_BYTES` and a longer one is skipped to its end without being held in memory.
Idempotent by URL: a page imported again replaces its chunks.  A record that cannot be a page
(bad JSON, no URL, no text, an empty or binary page, a WARC record that is not HTML) is skipped
and named by its line (or WARC record number) with its reason; nothing else is lost.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from crawlers.main_text import PageText, extract_page, page_title
from crawlers.text import chunk_text, clean_ws
from culturebase.importers.base import json_line
from retrieval.knowledge_base import ImportFileError

#: a JSONL line longer than this is skipped (named, read to its end without keeping it)
MAX_LINE_BYTES = 16 * 2**20
#: a page's text is cut here before chunking (a KnowYourMeme entry body is ~3,000 characters)
MAX_PAGE_CHARS = 200_000
#: pages embedded and stored together
BATCH_PAGES = 32
SUFFIXES = (".jsonl", ".jl", ".json", ".ndjson", ".jsonl.gz", ".jl.gz", ".json.gz", ".warc", ".warc.gz", ".arc.gz")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f]")


class PageDumpError(ImportFileError):
    """The dump as a whole cannot be read (missing, a folder with nothing to import, unknown format)."""


@dataclass
class Page:
    """One page to store: where it was read (``where``: ``line 12`` / ``record 3``) and its fields."""

    where: str
    url: str
    title: str
    text: str
    site: str
    entity: str | None = None
    #: the page's date (``YYYY-MM-DD``) where its HTML gives one
    date: str | None = None
    #: how the text was read: ``text`` (given), ``sections`` (a KnowYourMeme entry), ``main`` (main text),
    #: ``visible`` (no main text found: the page's visible text)
    extraction: str = "text"


@dataclass
class Skipped:
    file: str
    where: str
    reason: str


@dataclass
class CorpusImportReport:
    """What an import did: pages read, stored (chunks), skipped with their reasons."""

    paths: list[str] = field(default_factory=list)
    read: int = 0
    pages: int = 0
    chunks: int = 0
    linked: int = 0
    #: pages read from HTML where no main text was found, stored with their visible text instead
    fallback: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    dry_run: bool = False
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.skipped

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["complete"] = self.complete
        return d


def dump_format(path: Path) -> str:
    """``warc``, ``json`` (a JSON array: scrapy -o) or ``jsonl`` by the file's name and first bytes."""
    name = path.name.lower()
    if name.endswith((".warc", ".warc.gz", ".arc.gz")):
        return "warc"
    with open_text_or_gz(path) as fh:
        head = fh.read(64).lstrip()
    if head.startswith(b"WARC/"):
        return "warc"
    return "json" if head.startswith(b"[") else "jsonl"


def open_text_or_gz(path: Path) -> IO[bytes]:
    """The file's bytes (gunzipped when it is gzip)."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise PageDumpError(f"{path}: no such file") from None
    except PermissionError:
        raise PageDumpError(f"{path}: permission denied") from None
    if fh.read(2) == b"\x1f\x8b":
        fh.close()
        return gzip.open(path, "rb")  # type: ignore[return-value]
    fh.seek(0)
    return fh


def dump_files(path: Path) -> list[Path]:
    """The file itself, or every dump file under a folder (sorted)."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(SUFFIXES))
        if not files:
            raise PageDumpError(f"{path}: no page dump in this folder (looked for {', '.join(SUFFIXES)})")
        return files
    if not path.exists():
        raise PageDumpError(f"{path}: no such file or folder")
    return [path]


# -- records → pages -----------------------------------------------------------------------------
def content_text(content: Any) -> str:
    """A KnowYourMeme ``content`` dict (``{section: {text: [...], subsections...}}``) as text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, dict):
        return ""
    out: list[str] = []
    for heading, section in content.items():
        if isinstance(section, dict):
            texts = [t for t in section.get("text") or [] if isinstance(t, str) and t.strip()]
            nested = content_text({k: v for k, v in section.items() if k not in ("text", "links", "images")})
            if texts or nested:
                out.append(f"{heading}\n" + "\n".join(texts) + (f"\n{nested}" if nested else ""))
        elif isinstance(section, list):
            texts = [t for t in section if isinstance(t, str) and t.strip()]
            if texts:
                out.append(f"{heading}\n" + "\n".join(texts))
    return "\n".join(out)


def _site(url: str, given: Any) -> str:
    if isinstance(given, str) and given.strip():
        return given.strip()
    host = (urlsplit(url).hostname or "web").lower()
    return host.removeprefix("www.")


def record_to_page(rec: Any, where: str) -> Page | str:
    """A page from a JSON record, or the reason it is none."""
    if not isinstance(rec, dict):
        return f"expected a JSON object, got {type(rec).__name__}"
    url = rec.get("url")
    if not isinstance(url, str) or not url.strip():
        return "field 'url' is missing or empty"
    url = url.strip()
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        return f"field 'url': {url[:120]!r} is not an http(s) URL"
    text: Any = rec.get("text") or rec.get("page_text")
    if not text and rec.get("content") is not None:
        text = content_text(rec.get("content"))
    read: PageText | None = None
    if not text and rec.get("html") is not None:
        if not isinstance(rec["html"], str):
            return f"field 'html' is {type(rec['html']).__name__}, expected a string"
        read = html_page(url, rec["html"].encode("utf-8"), "text/html; charset=utf-8")
        text = read.text
    if text is not None and not isinstance(text, str):
        return f"field 'text' is {type(text).__name__}, expected a string"
    text = clean_ws(_CONTROL.sub(" ", text or ""))
    if not text:
        return "empty page: no 'text' (nor 'page_text', 'content' or text in 'html')"
    title = rec.get("title")
    title = clean_ws(title) if isinstance(title, str) else ""
    title = title or (read.title if read else "") or text.splitlines()[0][:120]  # else named by its first line
    entity = rec.get("entity") or rec.get("entity_id")
    page = Page(where, url, title[:300], text[:MAX_PAGE_CHARS], _site(url, rec.get("site")), str(entity) if entity else None)
    if read is not None:
        page.date, page.extraction = read.date, read.method
    return page


def _json_lines(fh: IO[bytes], array: bool) -> Iterator[tuple[int, Any, str | None]]:
    """``(line, record, error)`` per line; an over-long line is named and skipped to its end."""
    lineno = 0
    while True:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        lineno += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            total = len(line)
            while True:  # read the rest of the line away, keeping none of it
                more = fh.readline(MAX_LINE_BYTES)
                total += len(more)
                if not more or more.endswith(b"\n"):
                    break
            limit = f"{MAX_LINE_BYTES // 2**20} MB" if MAX_LINE_BYTES >= 2**20 else f"{MAX_LINE_BYTES:,} bytes"
            yield lineno, None, f"line of {total:,} bytes is longer than the {limit} limit: skipped"
            continue
        raw = line.strip()
        if array:  # scrapy's JSON exporter: "[", one item per line followed by ",", "]"
            if not raw.strip(b"[], \t\r"):  # "[", "]", "][" (a second array appended), ","
                continue
            raw = raw.lstrip(b"[").strip().rstrip(b",").strip()
        if not raw:
            continue
        if b"\x00" in raw:
            yield lineno, None, "binary data (NUL bytes), not a JSON page"
            continue
        yield lineno, *json_line(raw, byte_of="")


def html_page(url: str, body: bytes, content_type: str) -> PageText:
    """Title, text and date of an HTML page: a KnowYourMeme entry body by its sections (the spider's own
    selectors, ``method`` "sections"), any other page by :func:`crawlers.main_text.extract_page` (its main
    text, else its visible text)."""
    from scrapy.http import HtmlResponse

    from crawlers.spiders.knowyourmeme import parse_sections

    response = HtmlResponse(url=url, body=body, headers={"Content-Type": content_type or "text/html"})
    sections = parse_sections(response)
    if sections:
        text = "\n".join(f"{h}\n{t}" if h else t for h, t in sections)
        return PageText(page_title(response), text, None, "sections")
    return extract_page(response.text, url, content_type)


def _warc_pages(fh: IO[bytes], name: str) -> Iterator[tuple[str, Page | None, str | None]]:
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    n = 0
    try:
        for record in ArchiveIterator(fh):
            n += 1
            where = f"record {n}"
            if record.rec_type != "response":
                continue  # request, metadata, warcinfo: not pages, nothing to report
            url = record.rec_headers.get_header("WARC-Target-URI") or ""
            ctype = (record.http_headers.get_header("Content-Type") if record.http_headers else "") or ""
            status = record.http_headers.get_statuscode() if record.http_headers else None
            if status and not str(status).startswith("2"):
                yield where, None, f"{url}: HTTP status {status}, not a page"
                continue
            if "html" not in ctype.lower():
                yield where, None, f"{url}: not HTML (content type {ctype or 'none'})"
                continue
            body = record.content_stream().read()
            if not body.strip():
                yield where, None, f"{url}: empty page"
                continue
            if b"\x00" in body[:65536]:
                yield where, None, f"{url}: binary data (NUL bytes) sent as {ctype}, not an HTML page"
                continue
            read = html_page(url, body, ctype)
            page = record_to_page({"url": url, "title": read.title, "text": read.text}, where)
            if isinstance(page, str):
                yield where, None, f"{url}: {page}"
            else:
                page.date, page.extraction = read.date, read.method
                yield where, page, None
    except ArchiveLoadFailed as exc:
        yield f"record {n + 1}", None, f"not a WARC record ({exc}): the rest of {name} is unreadable"


def read_pages(path: Path) -> Iterator[tuple[str, Page | None, str | None]]:
    """``(where, page, reason)`` for each record of one dump file (page None: skipped for ``reason``)."""
    fmt = dump_format(path)
    with open_text_or_gz(path) as fh:
        if fmt == "warc":
            yield from _warc_pages(fh, path.name)
            return
        for lineno, rec, error in _json_lines(fh, array=fmt == "json"):
            where = f"line {lineno}"
            if error is not None:
                yield where, None, error
                continue
            page = record_to_page(rec, where)
            if isinstance(page, str):
                yield where, None, page
            else:
                yield where, page, None


# -- storing -------------------------------------------------------------------------------------
def page_chunks(page: Page, entity_id: str | None) -> list[dict[str, Any]]:
    """The corpus chunks of a page, as the crawl pipeline writes them."""
    from culturebase.entity import canonical_url

    canon = canonical_url(page.url)
    out = []
    for n, text in enumerate(chunk_text(page.text)):
        chunk = {"id": f"{canon}#{n}", "text": text, "url": page.url, "title": page.title, "site": page.site, "chunk": n, "page": canon}
        if entity_id:
            chunk["entity_id"] = entity_id
        if page.date:
            chunk["date"] = page.date
        out.append(chunk)
    return out


def resolve_entity(kb: Any, ref: str | None, cache: dict[str, str | None]) -> str | None:
    """An entity id for a page's ``entity`` (an id, or a name or alias), or None when no entity has it."""
    if not ref:
        return None
    if ref not in cache:
        found = kb.store.get(ref) if kb.store.count() else None
        if found is not None:
            cache[ref] = found.id
        else:
            by_name = kb.store.find_by_name([ref]) if kb.store.count() else []
            cache[ref] = by_name[0].id if len(by_name) == 1 else None
    return cache[ref]


def import_pages(kb: Any, path: Path, dry_run: bool = False, progress: Any = None) -> CorpusImportReport:
    """Import every page of a dump file or folder into ``kb``'s corpus (see the module doc)."""
    import time

    started = time.perf_counter()
    files = dump_files(path)
    report = CorpusImportReport(paths=[str(f) for f in files], dry_run=dry_run)
    entities: dict[str, str | None] = {}
    seen: set[str] = set()
    batch: list[dict[str, Any]] = []
    batch_pages: list[list[dict[str, Any]]] = []

    fresh = not kb.store.has_corpus or kb.store.corpus.count() == 0 if not dry_run else True

    def flush() -> None:
        if not fresh:  # a page imported again loses the chunks it no longer has
            for chunks in batch_pages:
                kb.drop_stale_chunks(chunks)
        report.chunks += kb.add_corpus_chunks(batch)  # one embedding batch for many pages
        batch_pages.clear()
        batch.clear()

    for f in files:
        for where, page, reason in read_pages(f):
            report.read += 1
            if page is None:
                report.skipped.append(Skipped(f.name, where, reason or "unreadable"))
                continue
            entity_id = resolve_entity(kb, page.entity, entities)
            chunks = page_chunks(page, entity_id)
            if not chunks:
                report.skipped.append(Skipped(f.name, where, "empty page after text extraction"))
                continue
            key = chunks[0]["page"]
            if key in seen and not dry_run:  # the same page twice in one dump: the later copy wins
                flush()
                kb.drop_stale_chunks(chunks)
            seen.add(key)
            report.pages += 1
            report.linked += 1 if entity_id else 0
            report.fallback += 1 if page.extraction == "visible" else 0
            if dry_run:
                report.chunks += len(chunks)
            else:
                batch_pages.append(chunks)
                batch.extend(chunks)
                if len(batch_pages) >= BATCH_PAGES:
                    flush()
            if progress is not None:
                progress(1)
    if not dry_run:
        flush()
        kb.store.corpus.flush()
    report.seconds = round(time.perf_counter() - started, 3)
    return report
