"""Entity sounds through Scrapy's media pipeline (``FilesPipeline``), the way entity images go.

Spiders put the sound files a page links in ``item["audio_urls"]`` (a KnowYourMeme entry's
``<audio>``/``<source>`` or a link to an ``.mp3``/``.ogg``; a Moegirl page's ``[[File:x.ogg]]``
or an audio template's file, through ``Special:FilePath``).  The pipeline downloads them with
the image pipeline's discipline: one download per URL per crawl, retries and Retry-After,
redirects followed (each hop through :class:`crawlers.netpolicy.AddressPolicyMiddleware`),
the byte limit (the sound store's, 30 MB) enforced while downloading, ``DOWNLOAD_TIMEOUT`` per
request.  The bytes are then judged and stored by :meth:`retrieval.sounds.route.SoundStore.put`,
the call ``kar kb import`` and ``kar kb import-audio`` make (format sniffed from the bytes,
decoded to check it holds a sound, at most ``MAX_SECONDS`` decoded), under
``KAR_DATA_DIR/sounds``.  The entity is written by :class:`crawlers.pipelines.CultureBasePipeline`
through :meth:`retrieval.knowledge_base.KnowledgeBase.write_entities`, which fingerprints its
sounds into the sound route's index like an imported entity's.

A sound that fails leaves its entity without it; the reason is counted per sound as
``kar/sounds_failed/<reason>`` (``too_large``, ``not_audio``, ``no_audio``, ``empty``,
``http_404``, ``forbidden_address``, ``unreachable``, ``cannot_store`` ...), logged with the URL, and the job goes on.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.exceptions import NotConfigured

from crawlers.images import EntityMediaPipeline, MediaRejected
from crawlers.runner import kar_settings_of

log = logging.getLogger(__name__)
#: file names a page may link as a sound (the bytes decide what is stored)
AUDIO_FILE = re.compile(r"\.(?:mp3|ogg|oga|opus|wav|flac|m4a|aac|weba)$", re.I)
#: most sounds taken from one page
MAX_PAGE_SOUNDS = 10


def is_audio_link(url: str) -> bool:
    """A link whose path names an audio file (``.mp3``, ``.ogg``, ``.wav`` ...)."""
    return bool(AUDIO_FILE.search(urlsplit(url).path))


def rejection_reason(message: str) -> str:
    """The counted reason of a :class:`~retrieval.sounds.route.SoundRejected` message."""
    text = message.lower()
    if "over the limit" in text:
        return "too_large"
    if "no audio track" in text:
        return "no_audio"
    return "not_audio"


class EntitySoundsPipeline(EntityMediaPipeline):
    """Download ``audio_urls`` into the sound store and attach them to the item's entity."""

    FILES_URLS_FIELD = "audio_urls"
    FILES_RESULT_FIELD = "audio_results"

    @classmethod
    def from_crawler(cls, crawler: Any) -> "EntitySoundsPipeline":
        if not crawler.settings.getbool("KAR_STORE", True):
            raise NotConfigured("parse-only crawl (KAR_STORE=False): no sounds are downloaded")
        from retrieval.sounds.route import SoundStore

        settings = kar_settings_of(crawler)
        root = (settings.data_dir / "sounds").expanduser().resolve()  # where KnowledgeBase.sound_store keeps them
        pipe = cls(str(root), crawler=crawler)
        pipe.sounds = SoundStore(root)
        pipe.max_bytes = pipe.sounds.max_bytes
        pipe.stored: dict[str, Any] = {}  # url -> EntitySound (a URL shared by several items is downloaded once)
        pipe.failed: dict[str, str] = {}  # url -> reason
        return pipe

    def file_path(self, request: Request, response: Any = None, info: Any = None, *, item: Any = None) -> str:
        if request.url in self.stored:
            return self.stored[request.url].path
        import hashlib

        return "by-url/" + hashlib.sha1(request.url.encode()).hexdigest()  # never stored: forces a download

    # -- results ----------------------------------------------------------------------------
    async def media_downloaded(self, response: Any, request: Request, info: Any, *, item: Any = None) -> Any:
        self.check_status(response, request)
        if not response.body:
            self.failed[request.url] = "empty"
            raise MediaRejected("empty", "the sound file is empty")
        from culturebase.cpu import cpu_pool
        from retrieval.sounds.route import SoundRejected

        try:  # sniffing and decoding are CPU work: in the process-wide pool, off the reactor
            self.stored[request.url] = await cpu_pool().run(self.sounds.put, response.body, request.url)
        except SoundRejected as exc:
            reason = rejection_reason(str(exc))
            self.failed[request.url] = reason
            raise MediaRejected(reason, str(exc)) from None
        except OSError as exc:  # the sound folder cannot be written: the sound is failed, the job goes on
            self.failed[request.url] = "cannot_store"
            raise MediaRejected("cannot_store", f"{type(exc).__name__}: {exc}") from None
        return await super().media_downloaded(response, request, info, item=item)

    async def file_downloaded(self, response: Any, request: Request, info: Any, *, item: Any = None) -> str:
        return self.stored[request.url].sha256  # already in the sound store (SoundStore.put)

    def item_completed(self, results: list[tuple[bool, Any]], item: Any, info: Any) -> Any:
        entity = item.get("entity")
        if entity is None:
            return item
        audio = list(entity.audio)
        have = {a.sha256 for a in audio}
        stats = self.crawler.stats
        for url, (ok, value) in zip(self._urls(item), results):
            if ok and url in self.stored:
                sound = self.stored[url]
                if sound.sha256 not in have:
                    audio.append(sound)
                    have.add(sound.sha256)
                stats.inc_value("kar/sounds_stored")
            else:
                reason = self.failed.get(url) or getattr(getattr(value, "value", None), "reason", None) or "unreachable"
                stats.inc_value(f"kar/sounds_failed/{reason}")
                log.info("entity %r stored without sound %s (%s)", entity.name, url, reason)
        item["entity"] = entity.model_copy(update={"audio": audio[:50]})
        return item
