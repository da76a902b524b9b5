"""Entity images through Scrapy's media pipeline (``FilesPipeline``).

Spiders put image URLs in ``item["image_urls"]`` (the KnowYourMeme entry image, memegen's
blank template).  The pipeline downloads them with Scrapy's media machinery — one download
per URL per crawl however many items share it, retries and Retry-After through the
downloader middlewares, redirects followed (each hop checked by
:class:`crawlers.netpolicy.AddressPolicyMiddleware`), the byte limit ``KAR_IMAGE_MAX_MB``
enforced while downloading (``download_maxsize``) — then judges the bytes themselves
(:func:`culturebase.images.check_image_bytes`: content sniffed, pixel-bomb and truncation
checks) and stores them by content hash under ``KAR_DATA_DIR/images``.

An image that fails leaves its entity without it; the reason is counted per image as
``kar/images_failed/<reason>`` (``http_404``, ``html``, ``svg``, ``empty``, ``corrupt``,
``too_many_pixels``, ``too_large``, ``forbidden_address``, ``unreachable`` ...) and the job goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.pipelines.files import FilesPipeline
from scrapy.pipelines.media import FileException
from scrapy.http.request import NO_CALLBACK

from culturebase.bounded_image import megapixels_to_decode
from culturebase.images import ImageRejected, check_image_bytes
from crawlers.runner import kar_settings_of

log = logging.getLogger(__name__)
MEDIA = "kar_media"  # request meta marking an image download (block-page detection skips it)


class MediaRejected(FileException):
    """A downloaded file judged unfit (its ``reason`` is counted)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class EntityMediaPipeline(FilesPipeline):
    """What the image and the sound pipelines share: the item's ``FILES_URLS_FIELD`` links (http(s) only, each
    once, only for an item with an entity), one bounded request each, and the reason a download failed
    (``failed``: url -> reason, also set by a subclass's ``media_downloaded``)."""

    max_bytes: int
    failed: dict[str, str]

    def _urls(self, item: Any) -> list[str]:
        if not item.get("entity"):
            return []
        links = item.get(self.FILES_URLS_FIELD) or []
        return [u for u in dict.fromkeys(links) if isinstance(u, str) and u.startswith(("http://", "https://"))]

    def get_media_requests(self, item: Any, info: Any) -> list[Request]:
        return [
            Request(u, callback=NO_CALLBACK, meta={MEDIA: True, "download_maxsize": self.max_bytes, "download_warnsize": 0})
            for u in self._urls(item)
        ]

    def media_failed(self, failure: Any, request: Request, info: Any) -> Any:
        exc = failure.value
        name = type(exc).__name__
        if isinstance(exc, FileException) and request.url in self.failed:
            pass  # judged in media_downloaded (HTTP status, bytes)
        elif isinstance(exc, IgnoreRequest) and str(exc).startswith("forbidden_address"):
            self.failed[request.url] = "forbidden_address"
        elif "Cancel" in name or "maxsize" in str(exc).lower():
            self.failed[request.url] = "too_large"
        elif isinstance(exc, IgnoreRequest):
            self.failed.setdefault(request.url, "filtered")
        else:
            self.failed.setdefault(request.url, "unreachable")
        return super().media_failed(failure, request, info)

    def check_status(self, response: Any, request: Request) -> None:
        """A download that did not answer 200 is failed as ``http_{status}``."""
        if response.status != 200:
            self.failed[request.url] = f"http_{response.status}"
            raise FileException(f"http_{response.status}")


class EntityImagesPipeline(EntityMediaPipeline):
    """Download ``image_urls`` into the content-addressed image folder and attach them to the item's entity."""

    FILES_URLS_FIELD = "image_urls"
    FILES_RESULT_FIELD = "image_results"

    @classmethod
    def from_crawler(cls, crawler: Any) -> "EntityImagesPipeline":
        if not crawler.settings.getbool("KAR_STORE", True):
            raise NotConfigured("parse-only crawl (KAR_STORE=False): no images are downloaded")
        settings = kar_settings_of(crawler)
        pipe = cls(str(settings.images_dir.expanduser().resolve()), crawler=crawler)
        pipe.max_bytes = int(settings.image_max_mb * 1024 * 1024)
        pipe.max_pixels = settings.max_image_pixels
        pipe.images_dir = settings.images_dir
        pipe.checked: dict[str, Any] = {}  # url -> CheckedImage, until stored
        pipe.stored: dict[str, Any] = {}  # url -> EntityImage (a URL shared by several items is downloaded once)
        pipe.failed: dict[str, str] = {}
        return pipe

    def file_path(self, request: Request, response: Any = None, info: Any = None, *, item: Any = None) -> str:
        if request.url in self.stored:
            return self.stored[request.url].path
        checked = self.checked.get(request.url)
        if checked is not None:
            return f"{checked.sha256[:2]}/{checked.sha256}.{checked.ext}"
        import hashlib

        return "by-url/" + hashlib.sha1(request.url.encode()).hexdigest()  # never stored: forces a download

    # -- results ----------------------------------------------------------------------------
    async def media_downloaded(self, response: Any, request: Request, info: Any, *, item: Any = None) -> Any:
        self.check_status(response, request)
        from culturebase.cpu import cpu_pool

        try:  # the decode is CPU work: in the process-wide pool (bounded with everything else), off the reactor
            megapixels = megapixels_to_decode(response.body)  # held from the decode budget while it runs
            self.checked[request.url] = await cpu_pool().run_decode(megapixels, check_image_bytes, response.body, self.max_bytes, self.max_pixels)
        except ImageRejected as exc:
            self.failed[request.url] = exc.reason
            raise MediaRejected(exc.reason, str(exc)) from None
        return await super().media_downloaded(response, request, info, item=item)

    async def file_downloaded(self, response: Any, request: Request, info: Any, *, item: Any = None) -> str:
        from culturebase.images import ImageStore

        checked = self.checked[request.url]
        self.stored[request.url] = ImageStore(self.images_dir).put_checked(checked, url=request.url)
        del self.checked[request.url]  # keep the record, not the bytes
        return checked.sha256

    def item_completed(self, results: list[tuple[bool, Any]], item: Any, info: Any) -> Any:
        entity = item.get("entity")
        if entity is None:
            return item
        urls = self._urls(item)
        images = list(entity.images)
        stats = self.crawler.stats
        for url, (ok, value) in zip(urls, results):
            if ok and url in self.stored:
                images.append(self.stored[url].model_copy(update={"kind": item.get("image_kind") or "template"}))
                stats.inc_value("kar/images_stored")
            else:
                reason = self.failed.get(url) or getattr(getattr(value, "value", None), "reason", None) or "unreachable"
                stats.inc_value(f"kar/images_failed/{reason}")
                log.info("entity %r stored without image %s (%s)", entity.name, url, reason)
        item["entity"] = entity.model_copy(update={"images": images})
        return item
