"""The item every spider yields: one parsed page, before normalization into a CultureBase ``Entity``."""

from __future__ import annotations

import scrapy


class PageItem(scrapy.Item):
    """One entity page as extracted by a spider (raw strings; the pipeline validates and normalizes)."""

    # identity
    site = scrapy.Field()  # "knowyourmeme" | "moegirl"
    url = scrapy.Field()  # the page URL (canonical when the page declares one)
    page_key = scrapy.Field()  # the request key used for resume/incremental state (fetched URL)
    name = scrapy.Field()
    aliases = scrapy.Field()  # list[str]: title variants, "also known as", redirects, 别号 ...
    source_work = scrapy.Field()
    description = scrapy.Field()
    visual_desc = scrapy.Field()
    cultural_usage = scrapy.Field()
    language = scrapy.Field()
    tags = scrapy.Field()  # list[str]
    # extras kept for the corpus / incremental crawl
    title = scrapy.Field()
    page_text = scrapy.Field()  # cleaned full text for the corpus collection
    image = scrapy.Field()
    status = scrapy.Field()  # KYM: Confirmed / Submission / Deadpool ...
    details = scrapy.Field()  # dict of the details list / infobox parameters
    etag = scrapy.Field()
    last_modified = scrapy.Field()
    revid = scrapy.Field()  # MediaWiki revision id
    drop_reason = scrapy.Field()  # set by a spider when the page cannot become an entity (e.g. an API error)
    entity = scrapy.Field()  # set by NormalizePipeline: the validated culturebase Entity
    # images and identity (crawlers.images, memegen)
    image_urls = scrapy.Field()  # list[str]: images to download for the entity (EntityImagesPipeline)
    image_results = scrapy.Field()  # set by EntityImagesPipeline (Scrapy's per-file results)
    image_kind = scrapy.Field()  # "template" (default) | "example"
    audio_urls = scrapy.Field()  # list[str]: sound files linked from the page (EntitySoundsPipeline)
    audio_results = scrapy.Field()  # set by EntitySoundsPipeline (Scrapy's per-file results)
    same_as = scrapy.Field()  # the page the site itself says this record is (memegen: the template whose KnowYourMeme page this is)
    extra_sources = scrapy.Field()  # list[{"site", "url"}]: pages the record links as its sources (never joined by)
