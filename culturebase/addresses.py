"""Which network addresses a fetch may reach: one rule for the API's image fetcher and the crawlers."""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_refusal(ip: IPAddress) -> str | None:
    """Why an address may not be fetched (None: allowed, a public unicast address)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local (cloud metadata lives here)"
    if ip.is_multicast:
        return "multicast"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_private:
        return "private"
    if not ip.is_global:
        return "not globally routable (reserved, shared/CGNAT or documentation range)"
    return None
