"""Spider arguments as Scrapy passes them (``scrapy crawl NAME -a key=value``: strings; from code: any value)."""

from __future__ import annotations

import re
from typing import Any


#: what separates the items of a list argument given as one string: commas and whitespace
WORDS = r"[,\s]+"
#: ... for items that hold spaces themselves (MediaWiki page and category titles): commas, newlines, pipes
TITLES = r"[,\n|]"


def as_list(value: Any, separators: str = WORDS) -> list[str]:
    """A list argument: a string split on ``separators`` (a regex), or any iterable as strings; None: []."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in re.split(separators, value) if v.strip()]
    return [str(v) for v in value]


def truthy(value: Any) -> bool:
    """A flag argument: "1", "true", "yes" or "on" (any case); None: False."""
    return str(value).strip().lower() in ("1", "true", "yes", "on") if value is not None else False
