"""The API's tuned values, in one frozen parameters object.

Values an operator sets (queue size, in-flight limits, deadlines, upload and import limits) are settings
(:class:`culturebase.settings.Settings`); these are the values the code chose.  No bench script chose them:
each was set by hand for the reason given beside it; ``python bench/service.py`` (explain under load),
``python bench/clip_load.py`` (clips) and ``python bench/import_api.py`` (imports) exercise them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceParams:
    """Tuned values of the FastAPI service."""

    #: seconds assumed for one explain before any has finished (the first Retry-After); set by hand
    default_service_s: float = 2.0
    #: seconds assumed for one clip before any has finished; set by hand
    default_media_service_s: float = 20.0
    #: the longest Retry-After a 503 asks for, in seconds; set by hand
    max_retry_after_s: int = 300
    #: bytes a request body may carry beyond its image: multipart part headers and form fields; set by hand
    body_slack_bytes: int = 64 * 1024
    #: body limit of ``POST /v1/entities/import`` (a JSON body, not streamed to disk); set by hand
    entities_import_max_bytes: int = 64 * 1024 * 1024
    #: body limit of every other route; set by hand
    default_body_bytes: int = 4 * 1024 * 1024
    #: seconds shutdown waits for the store lock (a running import's last batch) before closing CultureBase;
    #: set by hand
    close_wait_s: float = 120.0
    #: seconds shutdown waits for a running warm-up step before leaving it; set by hand
    stop_grace_s: float = 30.0
    #: seconds between two writes of a running import job's status.json; set by hand
    save_every_s: float = 1.0
    #: bad records listed in an import job's report (all are counted: a crawl's WARC can skip thousands of
    #: images); set by hand
    max_listed: int = 1000


PARAMS = ServiceParams()
