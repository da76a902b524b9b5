"""Downloader middlewares: block/challenge pages, Retry-After and maxlag, incremental and resumed crawls."""

from __future__ import annotations

import logging
import re
import time
from email.utils import parsedate_to_datetime
from typing import Any

from scrapy import Request, Spider
from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.response import response_status_message

from crawlers.runner import crawl_db_of, job_id_of, kar_settings_of

log = logging.getLogger(__name__)

PAGE_KEY = "kar_page_key"  # request meta: the page's resume/incremental key (set by spiders on entity pages)
REVID = "kar_revid"  # request meta: the revision the spider saw listed (MediaWiki)

# -- block and challenge pages ----------------------------------------------------------------
_CHALLENGE_MARKERS = (
    ("cloudflare challenge", re.compile(r"<title>\s*just a moment\.*\s*</title>|cf-browser-verification|/cdn-cgi/challenge-platform/|cf_chl_opt|challenges\.cloudflare\.com", re.I)),
    ("cloudflare block", re.compile(r"<title>\s*attention required!? \| cloudflare\s*</title>|cf-error-details", re.I)),
    ("captcha (人机验证)", re.compile(r"人机验证|请完成(?:安全)?验证|g-recaptcha|h-captcha|hcaptcha\.com|are you a robot|verify you are human", re.I)),
    ("unauthorized (未授权操作)", re.compile(r"未授权操作|<title>\s*(?:access denied|403 forbidden)\s*</title>", re.I)),
)
_LOGIN_URL = re.compile(r"/(?:login|signin|sign_in|users/sign_in|session/new)\b|Special:(?:UserLogin|用户登录|使用者登入)|特殊:用户登录", re.I)
_LOGIN_PAGE = re.compile(r"<title>[^<]*(?:log ?in|sign ?in|登录|登入)[^<]*</title>", re.I)
_PASSWORD_INPUT = re.compile(r"<input[^>]+type=[\"']?password", re.I)
_API_LOGIN_CODES = ("readapidenied", "permissiondenied", "blocked", "autoblocked")


def detect_block(response: Response) -> str | None:
    """Why a response is a block, challenge or login wall instead of content; None when it looks like content."""
    headers = response.headers
    if (headers.get(b"cf-mitigated") or b"").lower() == b"challenge":
        return "cloudflare challenge (cf-mitigated header)"
    redirected = response.meta.get("redirect_urls") if response.request is not None else None
    if redirected and _LOGIN_URL.search(response.url):
        return f"login wall (redirected to {response.url})"
    body = response.body[:60_000]
    try:
        text = body.decode(getattr(response, "encoding", None) or "utf-8", errors="replace")
    except LookupError:
        text = body.decode("utf-8", errors="replace")
    ctype = (headers.get(b"Content-Type") or b"").decode("latin-1").lower()
    if "json" in ctype:
        api_error = headers.get(b"MediaWiki-API-Error")
        code = api_error.decode("latin-1") if api_error else ""
        if not code:
            m = re.search(r'"error"\s*:\s*\{\s*"code"\s*:\s*"([^"]+)"', text)
            code = m.group(1) if m else ""
        if code in _API_LOGIN_CODES:
            return f"login wall / no read permission (MediaWiki API error {code})"
        return None
    for reason, marker in _CHALLENGE_MARKERS:
        if marker.search(text):
            return reason
    if _LOGIN_PAGE.search(text) and _PASSWORD_INPUT.search(text) and "bodycopy" not in text:
        return "login wall (login form instead of content)"
    return None


class BlockPageMiddleware:
    """Stops the crawl with reason ``blocked`` on a challenge, captcha or login wall (nothing is stored from it)."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Any) -> "BlockPageMiddleware":
        return cls(crawler)

    def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        if request.url.endswith("/robots.txt") or request.meta.get("kar_media"):
            return response  # an image URL answering HTML is a failed image (crawlers.images), not a blocked crawl
        reason = detect_block(response)
        if reason is None:
            return response
        self.block(f"blocked: {reason} at {response.url} (HTTP {response.status})")

    def block(self, message: str) -> None:
        stats = self.crawler.stats
        if not stats.get_value("kar/block_reason"):
            stats.set_value("kar/block_reason", message)
            log.error("%s; stopping the crawl", message)
            from scrapy.utils.defer import deferred_from_coro

            deferred_from_coro(self.crawler.engine.close_spider_async(reason="blocked"))
        raise IgnoreRequest(message)


class LoginRedirectMiddleware(BlockPageMiddleware):
    """A redirect to a login page is a login wall, even where robots.txt forbids fetching the login page."""

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        if request.meta.get("redirect_urls") and _LOGIN_URL.search(request.url):
            self.block(f"blocked: login wall (redirected from {request.meta['redirect_urls'][0]} to {request.url})")
        return None

    def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        return response


# -- Retry-After ----------------------------------------------------------------------------------
def retry_after_seconds(value: bytes | str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(text).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class RetryAfterMiddleware(RetryMiddleware):
    """Scrapy's retries, plus: 429/503 and MediaWiki ``maxlag`` errors wait for ``Retry-After`` first."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.max_wait = settings.getfloat("RETRY_AFTER_MAX_S", 120.0)
        self.retry_http_codes.update({429, 503})

    async def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Request | Response:  # type: ignore[override]
        if request.meta.get("dont_retry", False):
            return response
        maxlag = (response.headers.get(b"MediaWiki-API-Error") or b"") == b"maxlag" or (
            response.status == 200 and b'"code":"maxlag"' in response.body[:2000].replace(b" ", b"")
        )
        if response.status not in self.retry_http_codes and not maxlag:
            return response
        wait = retry_after_seconds(response.headers.get(b"Retry-After"))
        if maxlag and wait is None:
            wait = 5.0
        reason = "maxlag" if maxlag else response_status_message(response.status)
        stats = self.crawler.stats
        if wait:
            if wait > self.max_wait:
                stats.inc_value("kar/retry_after_too_long")
                log.warning("%s asks to wait %.0fs (> RETRY_AFTER_MAX_S=%.0f); giving up on it", request.url, wait, self.max_wait)
                return response
            stats.inc_value("kar/retry_after_waits")
            stats.inc_value("kar/retry_after_seconds", wait)
            log.info("%s: %s, waiting %.1fs (Retry-After) before retrying", request.url, reason, wait)
            from twisted.internet import reactor
            from twisted.internet.task import deferLater

            await maybe_deferred_to_future(deferLater(reactor, wait, lambda: None))
        retry = self._retry(request, reason)
        return retry or response


# -- incremental and resumed crawls -------------------------------------------------------------
class ResumeSkipMiddleware:
    """In a resumed job, pages the job already stored (or dropped) are not fetched again."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        job_id = job_id_of(crawler)
        if not job_id:
            raise NotConfigured
        self.done = crawl_db_of(crawler).done_pages(job_id)

    @classmethod
    def from_crawler(cls, crawler: Any) -> "ResumeSkipMiddleware":
        return cls(crawler)

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        key = request.meta.get(PAGE_KEY)
        if key and key in self.done:
            self.crawler.stats.inc_value("kar/skipped_done")
            raise IgnoreRequest(f"already stored by this job: {key}")
        return None


class IncrementalMiddleware:
    """Skip unchanged pages: conditional requests (ETag / Last-Modified → 304) and MediaWiki revision ids."""

    def __init__(self, crawler: Any) -> None:
        if not crawler.settings.getbool("KAR_INCREMENTAL", True) or not crawler.settings.getbool("KAR_STORE", True):
            raise NotConfigured
        from crawlers.jobs import kb_key

        self.crawler = crawler
        self.db = crawl_db_of(crawler)
        self.kb = kb_key(kar_settings_of(crawler))

    @classmethod
    def from_crawler(cls, crawler: Any) -> "IncrementalMiddleware":
        return cls(crawler)

    def _unchanged(self, request: Request) -> None:
        self.crawler.stats.inc_value("kar/skipped_unchanged")
        job_id = job_id_of(self.crawler)
        if job_id:
            self.db.mark_pages(job_id, [request.meta[PAGE_KEY]], "unchanged")
        raise IgnoreRequest(f"unchanged since the last crawl: {request.url}")

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        key = request.meta.get(PAGE_KEY)
        if not key or request.meta.get("kar_force"):
            return None
        state = self.db.page_state(self.kb, key)
        if state is None:
            return None
        revid = request.meta.get(REVID)
        if revid is not None and state["revid"] is not None:
            if int(revid) == int(state["revid"]):
                self._unchanged(request)
            return None
        if state["etag"]:
            request.headers.setdefault(b"If-None-Match", state["etag"].encode("latin-1"))
        if state["last_modified"]:
            request.headers.setdefault(b"If-Modified-Since", state["last_modified"].encode("latin-1"))
        return None

    def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        if response.status == 304 and request.meta.get(PAGE_KEY):
            self._unchanged(request)
        return response
