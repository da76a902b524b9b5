"""Image input for the API: byte sniffing, decode checks, and SSRF-safe ``image_url`` fetching.

``validate_image`` is the one byte checker (:func:`culturebase.images.check_image_bytes`, the
same the crawler, imports, ``kar explain`` and ``kar run`` use) with its rejection reasons
mapped to API errors: PNG, JPEG, WebP and GIF (first frame) judged from the bytes, never from a
filename or a declared content type; empty, oversized, truncated/corrupt images and
decompression bombs (pixel limit checked from the header before any pixel is decoded) refused.

``fetch_image_url`` downloads with a total deadline and a byte cap while streaming.  Every
TCP connection (the first request and each redirect hop) goes through
:class:`GuardedNetworkBackend`, which resolves the host itself, refuses when *any* address
is loopback, private, link-local (cloud metadata 169.254.169.254), CGNAT (100.64/10, e.g.
Alibaba metadata 100.100.100.200), ULA (fd00:ec2::254), multicast, reserved or
unspecified, and then connects to the address it checked, so a DNS answer cannot change
between the check and the connect (no rebinding window).  TLS still verifies the host name.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx

from culturebase.addresses import IPAddress, address_refusal
from culturebase.images import MIME, CheckedImage, ImageRejected, check_image_bytes  # noqa: F401 - CheckedImage: the API's type too
from services.errors import ApiError

#: HTTP status and error code of each reason :func:`culturebase.images.check_image_bytes` gives
REJECTION = {
    "empty": (400, "empty_image"),
    "too_large": (413, "image_too_large"),
    "svg": (415, "unsupported_image_type"),
    "html": (415, "unsupported_image_type"),
    "not_an_image": (415, "unsupported_image_type"),
    "too_many_pixels": (422, "image_too_many_pixels"),
    "metadata_too_large": (422, "image_metadata_too_large"),
    "corrupt": (422, "image_corrupt"),
}


def validate_image(data: bytes, max_bytes: int, max_pixels: int, work_side: int | None = None) -> CheckedImage:
    """The one byte checker (:func:`culturebase.images.check_image_bytes`) with its reasons as API
    errors (:data:`REJECTION`); with ``work_side`` the returned ``data`` is the bounded working copy
    (first frame, upright, longest side ≤ ``work_side``) made in the same single decode."""
    try:
        return check_image_bytes(data, max_bytes, max_pixels, work_side)
    except ImageRejected as exc:
        status, code = REJECTION.get(exc.reason, (422, "image_corrupt"))
        message = str(exc)
        if code == "unsupported_image_type":
            from agents.media.sniff import ACCEPTED

            message += f"; send {ACCEPTED}"
        elif code == "image_too_many_pixels" and "bomb" not in message:
            message += " (decompression bomb?)"
        raise ApiError(status, code, message) from None


# -- SSRF-safe fetching --------------------------------------------------------------------
Resolver = Callable[[str, int], list[str]]
AddressPolicy = Callable[[IPAddress], str | None]


default_policy: AddressPolicy = address_refusal  # why an address may not be fetched (None: a public unicast address)


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


class ForbiddenAddress(Exception):
    """The host resolves to an address the policy refuses."""


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """Resolve, check every address, connect to a checked address (used for every hop)."""

    def __init__(self, policy: AddressPolicy = default_policy, resolver: Resolver = system_resolver) -> None:
        self.policy = policy
        self.resolver = resolver
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        try:
            literal = ipaddress.ip_address(host.strip("[]"))
            addresses = [str(literal)]
        except ValueError:
            try:
                addresses = await asyncio.to_thread(self.resolver, host, port)
            except (OSError, UnicodeError) as exc:
                raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None
        if not addresses:
            raise httpcore.ConnectError(f"{host} has no addresses")
        for addr in addresses:
            why = self.policy(ipaddress.ip_address(addr.split("%", 1)[0]))
            if why is not None:
                shown = host if host == addr else f"{host} ({addr})"
                raise ForbiddenAddress(f"{shown} is a {why} address")
        return await self.inner.connect_tcp(addresses[0], port, timeout=timeout, local_address=local_address, socket_options=socket_options)

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:  # pragma: no cover
        raise ForbiddenAddress("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


@dataclass
class UrlFetcher:
    """Downloads ``image_url`` inputs safely (policy and resolver injectable for tests)."""

    max_bytes: int
    timeout_s: float = 10.0
    max_redirects: int = 3
    policy: AddressPolicy = default_policy
    resolver: Resolver = system_resolver

    def _client(self) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(retries=0)
        transport._pool = httpcore.AsyncConnectionPool(  # the public transport, our connect step
            ssl_context=httpx.create_ssl_context(), network_backend=GuardedNetworkBackend(self.policy, self.resolver), max_connections=4
        )
        return httpx.AsyncClient(transport=transport, trust_env=False, follow_redirects=False, headers={"User-Agent": "CultureKAR-image-fetch/0.1"})

    async def fetch(self, url: str) -> bytes:
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._fetch(url)
        except TimeoutError:
            raise ApiError(422, "image_url_timeout", f"fetching image_url took longer than {self.timeout_s:g} s") from None

    async def _fetch(self, url: str) -> bytes:
        current = url
        async with self._client() as client:
            for hop in range(self.max_redirects + 1):
                check_url(current)
                try:
                    async with client.stream("GET", current) as resp:
                        if resp.is_redirect:
                            location = resp.headers.get("location")
                            if not location:
                                raise ApiError(422, "image_url_unreachable", f"{current} redirected without a Location")
                            current = urljoin(current, location)
                            continue
                        if resp.status_code != 200:
                            raise ApiError(422, "image_url_unreachable", f"image_url answered HTTP {resp.status_code}")
                        declared = resp.headers.get("content-length")
                        if declared and declared.isdigit() and int(declared) > self.max_bytes:
                            raise ApiError(413, "image_too_large", f"image_url is {declared} bytes; the limit is {self.max_bytes} bytes")
                        buf = bytearray()
                        async for chunk in resp.aiter_bytes():
                            buf += chunk
                            if len(buf) > self.max_bytes:
                                raise ApiError(413, "image_too_large", f"image_url sent more than the limit of {self.max_bytes} bytes")
                        return bytes(buf)
                except ForbiddenAddress as exc:
                    where = "after a redirect, " if hop else ""
                    raise ApiError(422, "image_url_forbidden", f"{where}image_url host {exc}; only public addresses are fetched") from None
                except httpx.HTTPError as exc:
                    cause = exc.__cause__ or exc.__context__
                    if isinstance(cause, ForbiddenAddress):
                        where = "after a redirect, " if hop else ""
                        raise ApiError(422, "image_url_forbidden", f"{where}image_url host {cause}; only public addresses are fetched") from None
                    raise ApiError(422, "image_url_unreachable", f"cannot fetch image_url: {type(exc).__name__}: {exc}") from None
        raise ApiError(422, "image_url_unreachable", f"image_url redirected more than {self.max_redirects} times")


def check_url(url: str) -> None:
    """Only absolute http(s) URLs with a host, no credentials."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ApiError(422, "invalid_image_url", f"image_url is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ApiError(422, "invalid_image_url", f"image_url must be http(s), not {parts.scheme or 'a relative URL'!r}")
    if not parts.hostname:
        raise ApiError(422, "invalid_image_url", "image_url has no host")
    if parts.username or parts.password:
        raise ApiError(422, "invalid_image_url", "image_url must not carry credentials")
