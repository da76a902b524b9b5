"""Scrapy settings of the CultureKAR crawlers (``scrapy crawl knowyourmeme`` reads this module).

Politeness values come from the one settings class (``KAR_CRAWL_*``): robots.txt obeyed,
AutoThrottle on, one or two concurrent requests per domain, a download delay and an
identifying User-Agent.  :func:`crawlers.runner.scrapy_settings` builds the same values
for a given :class:`~culturebase.settings.Settings` (crawl jobs, tests, the benchmark).
"""

from culturebase.settings import get_settings

_kar = get_settings()

BOT_NAME = "culturekar"
SPIDER_MODULES = ["crawlers.spiders"]
NEWSPIDER_MODULE = "crawlers.spiders"

USER_AGENT = _kar.crawl_user_agent
ROBOTSTXT_OBEY = _kar.crawl_obey_robots
CONCURRENT_REQUESTS = 8
# a page yields one or two items, so Scrapy's default of 100 parallel item slots only costs
# 100 asyncio tasks per response (a third of the parse time in bench/crawl.py)
CONCURRENT_ITEMS = 4
CONCURRENT_REQUESTS_PER_DOMAIN = _kar.crawl_concurrency_per_domain
DOWNLOAD_DELAY = _kar.crawl_delay_s
DOWNLOAD_TIMEOUT = 30
AUTOTHROTTLE_ENABLED = True
AUTOTHROTTLE_START_DELAY = max(_kar.crawl_delay_s, 1.0)
AUTOTHROTTLE_MAX_DELAY = 60.0
AUTOTHROTTLE_TARGET_CONCURRENCY = float(_kar.crawl_concurrency_per_domain)
COOKIES_ENABLED = False
TELNETCONSOLE_ENABLED = False

RETRY_ENABLED = True
RETRY_TIMES = 3
RETRY_HTTP_CODES = [500, 502, 503, 504, 522, 524, 408, 429]
RETRY_AFTER_MAX_S = 120  # longest Retry-After we honour before giving up on the request

DOWNLOADER_MIDDLEWARES = {
    "crawlers.middlewares.LoginRedirectMiddleware": 40,  # before robots.txt (100)
    "crawlers.netpolicy.AddressPolicyMiddleware": 45,  # non-start hosts only at public addresses (every redirect hop)
    "crawlers.middlewares.ResumeSkipMiddleware": 50,
    "crawlers.middlewares.IncrementalMiddleware": 60,
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "crawlers.middlewares.RetryAfterMiddleware": 550,
    "crawlers.middlewares.BlockPageMiddleware": 580,  # after decompression (590), before retries (550)
}
ITEM_PIPELINES = {
    "crawlers.pipelines.NormalizePipeline": 300,
    "crawlers.images.EntityImagesPipeline": 400,  # entity images via Scrapy's FilesPipeline
    "crawlers.sounds.EntitySoundsPipeline": 450,  # entity sounds: stored like imported ones, fingerprinted at the write
    "crawlers.pipelines.CultureBasePipeline": 800,
}
EXTENSIONS = {
    "crawlers.extensions.JobProgressExtension": 500,
}

MEDIA_ALLOW_REDIRECTS = True  # image redirects are followed (each hop passes the address policy)

# CultureKAR options (overridden per job by crawlers.runner):
KAR_STORE = True  # False: parse and normalize only (benchmark)
KAR_INCREMENTAL = True  # conditional requests / revision ids against the KB's page state
KAR_CORPUS = True  # also store page text chunks in the corpus collection
KAR_FLUSH_EVERY = 64  # entities per embed+upsert batch

REQUEST_FINGERPRINTER_IMPLEMENTATION = "2.7"
FEED_EXPORT_ENCODING = "utf-8"
LOG_LEVEL = "INFO"
LOG_FORMATTER = "crawlers.extensions.QuietLogFormatter"
LOGSTATS_INTERVAL = 30.0
