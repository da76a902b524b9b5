"""Which hosts a crawl may reach: its start hosts always; any other host only at a public address.

A crawl job trusts the host of its start URLs whatever its address (a fixture server or an
intranet mirror is loopback or private).  A link, image or redirect to *another* host that
resolves to a loopback, private, link-local (cloud metadata), CGNAT, multicast, reserved or
unspecified address is refused before it is fetched and counted
(``kar/refused_address``); an image refused this way counts as ``forbidden_address``.
Redirects pass through here again, so a public image that redirects to a private address
is refused too.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest

from culturebase.addresses import address_refusal

log = logging.getLogger(__name__)


class ForbiddenAddress(IgnoreRequest):
    """A request to a non-start host that resolves to a non-public address."""


def _resolve(host: str) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []  # unresolvable: the download itself fails and is counted as unreachable
    return list(dict.fromkeys(str(i[4][0]).split("%", 1)[0] for i in infos))


class AddressPolicyMiddleware:
    """Downloader middleware applying the policy above to every request (and every redirect hop)."""

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self._cache: dict[str, str | None] = {}
        self._trusted_hosts: set[str] | None = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> "AddressPolicyMiddleware":
        return cls(crawler)

    def _trusted(self, spider: Spider | None) -> set[str]:
        """Hosts of the spider's start URLs (and of its API endpoint: the MediaWiki spider turns pages into API calls)."""
        if self._trusted_hosts is None:
            spider = spider or self.crawler.spider
            hosts = {h.lower() for h in getattr(spider, "trusted_hosts", ()) or ()}
            urls = [*(getattr(spider, "start_urls", ()) or ()), getattr(spider, "api_url", None) or ""]
            for url in urls:
                host = urlsplit(url).hostname if isinstance(url, str) else None
                if host:
                    hosts.add(host.lower())
            self._trusted_hosts = hosts
        return self._trusted_hosts

    def _refusal(self, host: str) -> str | None:
        if host not in self._cache:
            why = None
            for addr in _resolve(host):
                why = address_refusal(ipaddress.ip_address(addr))
                if why:
                    shown = host if host == addr else f"{host} ({addr})"
                    why = f"{shown} is a {why} address"
                    break
            self._cache[host] = why
        return self._cache[host]

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        host = (urlsplit(request.url).hostname or "").lower()
        if not host or host in self._trusted(spider):
            return None
        why = self._refusal(host)
        if why is None:
            return None
        self.crawler.stats.inc_value("kar/refused_address")
        log.warning("refused %s: %s (only the start host may be non-public)", request.url, why)
        raise ForbiddenAddress(f"forbidden_address: {why}")
