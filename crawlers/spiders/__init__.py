"""The spiders: ``knowyourmeme`` (entry/listing/search pages) and ``moegirl`` (MediaWiki API)."""
