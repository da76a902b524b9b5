"""A local HTTP server on 127.0.0.1 that mirrors KnowYourMeme pages and Moegirl's api.php from fixtures.

KYM: ``/memes`` (listing, ``rel=next`` → ``/memes/page/2``), ``/memes/<slug>`` (entries, with ETag /
Last-Modified and 304 on a matching conditional request), ``/search?q=doge``, ``/robots.txt``,
``/synthetic/page/<n>`` + ``/memes/synth-<i>`` (generated entries for the benchmark and the
kill/resume test), and block pages (``/memes/cf-protected``, ``/memes/login-wall``, ``/captcha``).

Moegirl: ``/api.php`` answers ``list=categorymembers`` (with ``cmcontinue``), ``prop=info|redirects``
(with ``rdcontinue``, ``redirects=1``) and ``action=parse`` (formatversion=2 JSON) from
``fixtures/moegirl/site.json`` and ``fixtures/moegirl/pages/<title>.wiki``.

memegen: ``/templates/`` answers ``server.memegen_templates`` (the API's list shape; URLs are
rewritten to this server: ``blank`` → ``/images/<id>.jpg``, ``_self`` → ``/templates/<id>``, and a
``source`` whose slug is in ``server.kym_sources`` → ``/memes/<slug>``); ``/images/<id>.jpg``
serves ``server.memegen_images[id]`` (bytes) or ``server.memegen_image_dir/<id>.jpg``.  KYM entry
images (``https://i.kym-cdn.com/...`` in the pages) are served from ``/kym-cdn/...`` as generated JPEGs.
Bad images for the media pipeline: ``/bad/html``, ``/bad/empty``, ``/bad/truncated``, ``/bad/bomb``,
``/bad/huge`` (declares 50 MB), ``/bad/svg``, ``/bad/redirect-private`` (302 to a private address),
``/bad/redirect-localhost`` (302 to another host name of this machine), ``/bad/missing`` (404).

Faults for tests: ``server.add_fault(match, status=429, headers={"Retry-After": "1"}, times=1)`` or
``kind="maxlag"``; ``server.delay_s``/``server.delay_match`` slow down matching requests.  Every
request is logged in ``server.log`` as ``(path_with_query, status)``.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LAST_MODIFIED = "Wed, 05 Jun 2024 10:00:00 GMT"

_WORDS = (
    "cat dog frog wojak pepe doge stonks chad rage troll smug anime shrek wizard bird owl crab moth "
    "sandwich banana potato coffee pizza taco bread cheese galaxy brain moon sun rocket cloud tree"
).split()
_VERBS = "yells dances sings cries laughs points stares jumps waves shrugs".split()


def synthetic_entry(i: int) -> str:
    """A generated KYM entry page (same structure as the hand-written fixtures), deterministic in ``i``."""
    rng = random.Random(i)
    a, b = rng.choice(_WORDS).title(), rng.choice(_WORDS).title()
    title = f"{a} {b} {i}"
    template = (FIXTURES / "kym" / "entry_template.html").read_text("utf-8")

    def para(n: int) -> str:
        return " ".join(
            f"The {rng.choice(_WORDS)} {rng.choice(_VERBS)} at the {rng.choice(_WORDS)} while the {rng.choice(_WORDS)} {rng.choice(_VERBS)}."
            for _ in range(n)
        )

    body = (
        f'<h2 id="about">About</h2>\n<p><strong>{title}</strong>, also known as "{b} {a} {i}", is an image macro series. {para(3)}</p>\n'
        f'<h2 id="origin">Origin</h2>\n<p>{para(4)}</p>\n<p>{para(3)}</p>\n'
        f'<h2 id="spread">Spread</h2>\n<p>{para(5)}</p>\n<ul><li>{para(1)}</li><li>{para(1)}</li></ul>\n'
        f'<h2 id="various-examples">Various Examples</h2>\n<p>{para(2)}</p>\n'
    )
    tags = ", ".join(f'<a href="/search?q={w}">{w}</a>' for w in rng.sample(_WORDS, 4))
    return template.format(
        title=title, og_title=title, og_description=f"{title} meme", slug=f"synth-{i}", canonical=f"/memes/synth-{i}",
        entry_id=100000 + i, icon="00/001", series="", status="Confirmed", status_lc="confirmed",
        types='<a href="/types/image-macro">Image Macro</a>', year=str(2000 + i % 24), origin="Reddit", origin_lc="reddit",
        region="Worldwide", region_lc="worldwide", tags=tags, body=body,
    )


def generated_jpeg(key: str, size: tuple[int, int] = (240, 180)) -> bytes:
    """A deterministic JPEG of random rectangles (different keys look unrelated)."""
    import io

    from PIL import Image, ImageDraw

    rng = random.Random(key)
    img = Image.new("RGB", size, tuple(rng.randint(0, 255) for _ in range(3)))
    d = ImageDraw.Draw(img)
    for _ in range(8):
        x0, y0 = rng.randint(0, size[0]), rng.randint(0, size[1])
        d.rectangle([x0, y0, x0 + rng.randint(20, 120), y0 + rng.randint(20, 90)], fill=tuple(rng.randint(0, 255) for _ in range(3)))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=85)
    return buf.getvalue()


def synthetic_listing(page: int, total: int, per_page: int = 20) -> str:
    start = (page - 1) * per_page
    links = "".join(
        f'<tr><td><a class="photo" href="/memes/synth-{i}"><img src="data:,"></a><h2><a href="/memes/synth-{i}">Entry {i}</a></h2></td></tr>'
        for i in range(start, min(total, start + per_page))
    )
    nxt = f'<a rel="next" class="next_page" href="/synthetic/page/{page + 1}">Next</a>' if start + per_page < total else ""
    return (
        f'<!DOCTYPE html><html><head><title>Meme Database - Page {page} | Know Your Meme</title></head><body>'
        f'<div id="content"><div id="entries"><table class="entry_list"><tbody>{links}</tbody></table></div>'
        f'<div id="pagination">{nxt}</div></div></body></html>'
    )


class FixtureServer:
    """The fixture site; ``with FixtureServer() as srv: srv.url``."""

    def __init__(self, synthetic_entries: int = 0) -> None:
        self.synthetic_entries = synthetic_entries
        self.site = json.loads((FIXTURES / "moegirl" / "site.json").read_text("utf-8"))
        self.wikitext_override: dict[str, str] = {}
        self.faults: list[dict[str, Any]] = []
        self.delay_s = 0.0
        self.delay_match = ""
        self.log: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self._synth_cache: dict[int, bytes] = {}
        self.memegen_templates: list[dict[str, Any]] = []
        self.memegen_images: dict[str, bytes] = {}
        self.memegen_image_dir: Path | None = None
        self.kym_sources: set[str] = set()
        self.entry_override: dict[str, str] = {}  # KYM slug -> page HTML (a test's own entry page)
        self.files: dict[str, tuple[str, bytes]] = {}  # /files/<name> -> (content type, bytes) or ("redirect", location)
        self._bad_cache: dict[str, bytes] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                status, headers, body = server.handle(self.path, {k.lower(): v for k, v in self.headers.items()})
                with server.lock:
                    server.log.append((self.path, status))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body:
                    try:
                        self.wfile.write(body)
                    except (BrokenPipeError, ConnectionResetError):  # the client gave up (e.g. over its size limit)
                        pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> "FixtureServer":
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "FixtureServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- test helpers ---------------------------------------------------------------------------
    def add_fault(self, match: str, status: int = 429, headers: dict[str, str] | None = None, times: int = 1, kind: str = "") -> None:
        self.faults.append({"match": match, "status": status, "headers": headers or {}, "times": times, "kind": kind})

    def requests(self, contains: str) -> list[tuple[str, int]]:
        with self.lock:
            return [(p, s) for p, s in self.log if contains in unquote(p)]

    def clear_log(self) -> None:
        with self.lock:
            self.log.clear()

    # -- routing --------------------------------------------------------------------------------
    def handle(self, raw_path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if self.delay_s and self.delay_match and self.delay_match in raw_path:
            time.sleep(self.delay_s)
        with self.lock:
            for fault in self.faults:
                if fault["times"] > 0 and fault["match"] in unquote(raw_path):
                    fault["times"] -= 1
                    if fault["kind"] == "maxlag":
                        return self._api_error("maxlag", "Waiting for 10.64.16.8: 7 seconds lagged.", {"Retry-After": "1", "X-Database-Lag": "7"}, lag=7)
                    return fault["status"], {"Content-Type": "text/html; charset=utf-8", **fault["headers"]}, b"<html><body>Too Many Requests</body></html>"
        parts = urlsplit(raw_path)
        path, query = unquote(parts.path), parse_qs(parts.query)
        html = {"Content-Type": "text/html; charset=utf-8"}
        if path == "/templates/" or path == "/templates":
            return 200, {"Content-Type": "application/json"}, json.dumps(self.memegen_list()).encode()
        if path.startswith("/images/"):
            tid = path[len("/images/") :].rsplit(".", 1)[0]
            data = self.memegen_images.get(tid)
            if data is None and self.memegen_image_dir is not None and (self.memegen_image_dir / f"{tid}.jpg").is_file():
                data = (self.memegen_image_dir / f"{tid}.jpg").read_bytes()
            return (200, {"Content-Type": "image/jpeg"}, data) if data is not None else (404, html, b"<html><body>no such image</body></html>")
        if path.startswith("/files/"):
            name = path[len("/files/") :]
            if self.files.get(name, ("",))[0] == "redirect":
                return 302, {"Location": self.files[name][1].decode()}, b""
            if name in self.files:
                ctype, data = self.files[name]
                return 200, {"Content-Type": ctype}, data
            return 404, html, b"<html><body>no such file</body></html>"
        if path.startswith("/Special:FilePath/") and path[len("/Special:FilePath/") :].replace("_", " ") in self.files:
            return 302, {"Location": "/files/" + quote(path[len("/Special:FilePath/") :].replace("_", " "))}, b""
        if path.startswith("/Special:FilePath/"):  # MediaWiki: a redirect to the file itself
            return 302, {"Location": "/kym-cdn/moegirl/" + quote(path[len("/Special:FilePath/") :])}, b""
        if path.startswith("/kym-cdn/"):
            return 200, {"Content-Type": "image/jpeg"}, generated_jpeg(path)
        if path.startswith("/bad/"):
            return self.bad_image(path[len("/bad/") :])
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, (FIXTURES / "kym" / "robots.txt").read_bytes()
        if path == "/api.php":
            return self.api({k: v[0] for k, v in query.items()})
        if path in ("/memes", "/memes/confirmed"):
            return 200, html, (FIXTURES / "kym" / "listing" / "memes-page-1.html").read_bytes()
        if path == "/memes/page/2":
            return 200, html, (FIXTURES / "kym" / "listing" / "memes-page-2.html").read_bytes()
        if path == "/search":
            f = FIXTURES / "kym" / "search" / f"{query.get('q', [''])[0]}.html"
            return (200, html, f.read_bytes()) if f.exists() else (404, html, b"<html><body>No results</body></html>")
        if path.startswith("/synthetic/page/"):
            return 200, html, synthetic_listing(int(path.rsplit("/", 1)[1]), self.synthetic_entries).encode()
        if path == "/memes/cf-protected":
            return 403, {**html, "Server": "cloudflare", "CF-RAY": "8f1c2d3e4f5a6b7c-AMS"}, (FIXTURES / "blocks" / "cloudflare.html").read_bytes()
        if path == "/memes/login-wall":
            return 302, {"Location": "/users/sign_in?redirect_to=%2Fmemes%2Flogin-wall"}, b""
        if path == "/users/sign_in":
            return 200, html, (FIXTURES / "blocks" / "login.html").read_bytes()
        if path == "/captcha":
            return 200, html, (FIXTURES / "blocks" / "moegirl-captcha.html").read_bytes()
        if path.startswith("/memes/"):
            slug = path[len("/memes/") :].strip("/")
            body = self._entry(slug)
            if body is None:
                return 404, html, b"<html><head><title>Page Not Found</title></head><body><h1>404</h1></body></html>"
            etag = '"' + hashlib.sha1(body).hexdigest()[:16] + '"'
            out_headers = {**html, "ETag": etag, "Last-Modified": LAST_MODIFIED, "Cache-Control": "max-age=0, private"}
            if headers.get("if-none-match") == etag or (
                "if-none-match" not in headers and headers.get("if-modified-since") == LAST_MODIFIED
            ):
                return 304, {"ETag": etag, "Last-Modified": LAST_MODIFIED}, b""
            return 200, out_headers, body
        return 404, html, b"<html><body><h1>Not Found</h1></body></html>"

    def _entry(self, slug: str) -> bytes | None:
        if slug in self.entry_override:
            return self.entry_override[slug].replace("https://i.kym-cdn.com/", f"{self.url}/kym-cdn/").encode()
        if slug.startswith("synth-") and slug[6:].isdigit() and int(slug[6:]) < self.synthetic_entries:
            i = int(slug[6:])
            if i not in self._synth_cache:
                self._synth_cache[i] = synthetic_entry(i).encode().replace(b"https://i.kym-cdn.com/", f"{self.url}/kym-cdn/".encode())
            return self._synth_cache[i]
        f = FIXTURES / "kym" / "memes" / f"{slug}.html"
        if not f.exists() or "/" in slug:
            return None
        return f.read_bytes().replace(b"https://i.kym-cdn.com/", f"{self.url}/kym-cdn/".encode())

    # -- memegen and images ------------------------------------------------------------------------
    def memegen_list(self) -> list[dict[str, Any]]:
        out = []
        for t in self.memegen_templates:
            t = json.loads(json.dumps(t))
            tid = t.get("id")
            blank = t.get("blank") or ""
            t["blank"] = f"{self.url}{blank}" if blank.startswith("/") else f"{self.url}/images/{tid}.jpg"
            t["_self"] = f"{self.url}/templates/{tid}"
            if isinstance(t.get("example"), dict):
                t["example"]["url"] = f"{self.url}/images/{tid}.jpg"
            slug = urlsplit(t.get("source") or "").path.rstrip("/").rsplit("/", 1)[-1]
            if slug and slug in self.kym_sources:
                t["source"] = f"{self.url}/memes/{slug}"
            out.append(t)
        return out

    def bad_image(self, kind: str) -> tuple[int, dict[str, str], bytes]:
        jpeg = {"Content-Type": "image/jpeg"}
        if kind == "html":
            return 200, jpeg, b"<!DOCTYPE html><html><head><title>Error</title></head><body>Not an image</body></html>"
        if kind == "empty":
            return 200, jpeg, b""
        if kind == "truncated":
            data = generated_jpeg("/truncated")
            return 200, jpeg, data[: len(data) // 2]
        if kind == "bomb":
            if "bomb" not in self._bad_cache:
                import io

                from PIL import Image

                buf = io.BytesIO()
                Image.new("L", (10_000, 10_000)).save(buf, "PNG", optimize=True)  # ~100 KB, 100 Mpx
                self._bad_cache["bomb"] = buf.getvalue()
            return 200, {"Content-Type": "image/png"}, self._bad_cache["bomb"]
        if kind == "huge":
            if "huge" not in self._bad_cache:
                self._bad_cache["huge"] = b"\xff\xd8\xff" + bytes(50 * 1024 * 1024)
            return 200, jpeg, self._bad_cache["huge"]
        if kind == "svg":
            return 200, {"Content-Type": "image/svg+xml"}, b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>'
        if kind == "redirect-private":
            return 302, {"Location": "http://10.255.255.1/latest/meta-data/x.jpg"}, b""
        if kind == "redirect-localhost":
            return 302, {"Location": f"http://localhost:{self.httpd.server_address[1]}/kym-cdn/x.jpg"}, b""
        return 404, {"Content-Type": "text/html"}, b"<html><body>Not Found</body></html>"

    # -- MediaWiki API --------------------------------------------------------------------------
    def _json(self, data: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        return 200, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, json.dumps(data, ensure_ascii=False).encode()

    def _api_error(self, code: str, info: str, headers: dict[str, str] | None = None, **extra: Any) -> tuple[int, dict[str, str], bytes]:
        data = {"error": {"code": code, "info": info, "docref": "See https://zh.moegirl.org.cn/api.php for API usage.", **extra}, "servedby": "mw-api-1"}
        return self._json(data, {"MediaWiki-API-Error": code, **(headers or {})})

    def _page(self, title: str) -> dict[str, Any] | None:
        return self.site["pages"].get(title)

    def api(self, q: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if q.get("format") != "json":
            return self._api_error("badformat", "Only format=json is mirrored here.")
        size = int(self.site.get("page_size", 50))
        if q.get("action") == "query" and q.get("list") == "categorymembers":
            members = self.site["categories"].get(q.get("cmtitle", ""))
            if members is None:
                return self._json({"batchcomplete": True, "query": {"categorymembers": []}})
            limit = min(int(q.get("cmlimit", "10")), size)
            offset = int(q.get("cmcontinue", "page|0|0").rsplit("|", 1)[1])
            chunk = members[offset : offset + limit]
            out = []
            for title in chunk:
                if title.startswith("Category:"):
                    out.append({"pageid": 9000 + len(title), "ns": 14, "title": title})
                else:
                    out.append({"pageid": self.site["pages"][title]["pageid"], "ns": 0, "title": title})
            data: dict[str, Any] = {"batchcomplete": True, "query": {"categorymembers": out}}
            if offset + limit < len(members):
                data["continue"] = {"cmcontinue": f"page|{hashlib.md5(str(offset).encode()).hexdigest()[:8]}|{offset + limit}", "continue": "-||"}
            return self._json(data)
        if q.get("action") == "query" and "info" in q.get("prop", ""):
            titles: list[str] = []
            redirects_out = []
            if "pageids" in q:
                by_id = {p["pageid"]: t for t, p in self.site["pages"].items()}
                titles = [by_id.get(int(pid), f"#missing{pid}") for pid in q["pageids"].split("|")]
            for t in q.get("titles", "").split("|") if q.get("titles") else []:
                target = next((pt for pt, p in self.site["pages"].items() if t in p.get("redirects", [])), None)
                if target and q.get("redirects"):
                    redirects_out.append({"from": t, "to": target})
                    titles.append(target)
                else:
                    titles.append(t)
            pages = []
            all_redirects: list[tuple[int, dict[str, Any]]] = []
            for t in dict.fromkeys(titles):
                p = self._page(t)
                if p is None or "parse_error" in p and "pageids" not in q:
                    pages.append({"ns": 0, "title": t.lstrip("#"), "missing": True})
                    continue
                pages.append({
                    "pageid": p["pageid"], "ns": 0, "title": t, "contentmodel": "wikitext", "pagelanguage": "zh-cn",
                    "pagelanguagehtmlcode": "zh-CN", "pagelanguagedir": "ltr", "touched": "2024-06-05T10:00:00Z",
                    "lastrevid": p["revid"], "length": 4096,
                })
                for r in p.get("redirects", []):
                    all_redirects.append((len(pages) - 1, {"pageid": 20000 + len(all_redirects), "ns": 0, "title": r}))
            offset = int(q.get("rdcontinue", "0"))
            for idx, r in all_redirects[offset : offset + size]:
                pages[idx].setdefault("redirects", []).append(r)
            data = {"query": {"pages": pages}}
            if redirects_out:
                data["query"]["redirects"] = redirects_out
            if offset + size < len(all_redirects):
                data["continue"] = {"rdcontinue": str(offset + size), "continue": "||"}
            else:
                data["batchcomplete"] = True
            return self._json(data)
        if q.get("action") == "parse":
            if "pageid" in q:
                title = next((t for t, p in self.site["pages"].items() if str(p["pageid"]) == q["pageid"]), None)
            else:
                title = q.get("page")
            p = self._page(title or "")
            if p is None:
                return self._api_error("nosuchpageid", f"There is no page with ID {q.get('pageid')}.")
            if "parse_error" in p:
                return self._api_error(*p["parse_error"])
            wikitext = self.wikitext_override.get(title) or (FIXTURES / "moegirl" / "pages" / f"{title}.wiki").read_text("utf-8")
            hidden = set(p.get("hidden_categories", []))
            return self._json({
                "parse": {
                    "title": title, "pageid": p["pageid"], "revid": p["revid"], "displaytitle": p.get("displaytitle", title),
                    "categories": [{"sortkey": "", "category": c, **({"hidden": True} if c in hidden else {})} for c in p.get("categories", [])],
                    "wikitext": wikitext,
                }
            })
        return self._api_error("unknown_action", f"Unrecognized value for parameter \"action\": {q.get('action')}.")


if __name__ == "__main__":  # python tests/crawlers/crawl_fixture_server.py [N]: serve until Ctrl-C
    import sys

    srv = FixtureServer(synthetic_entries=int(sys.argv[1]) if len(sys.argv) > 1 else 100).start()
    print(srv.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()
