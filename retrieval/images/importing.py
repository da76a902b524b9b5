"""``image`` / ``images`` fields of imported records: URLs and files turned into stored entity images.

An imported record may carry ``image`` (one) or ``images`` (a list); each entry is a URL
(``http(s)://...``, downloaded), a path relative to the imported file, or an object with
``url`` / ``path`` and optionally ``kind`` (``template`` | ``example``) — the exported form
(``{url, path, sha256, width, height, kind}``) re-imports as is when the image folder
already holds that file.  An image that cannot be read, fetched or accepted is left out,
and the import report names the line, the image and the reason; the record is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from culturebase.entity import EntityImage
from culturebase.images import ImageRejected, ImageStore

log = logging.getLogger(__name__)
Fetcher = Callable[[str], bytes]


@dataclass
class ImageProblem:
    """An image of an imported record that was left out, and why."""

    line: int
    image: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "image": self.image, "reason": self.reason}


def http_fetcher(max_bytes: int, timeout_s: float = 20.0, guard: bool = False) -> Fetcher:
    """Download with a byte cap while streaming.  Unguarded: the operator's own import file, any host it
    names.  ``guard=True``: every request and redirect hop must resolve to a public address
    (:func:`address_check`)."""

    def fetch(url: str) -> bytes:
        import httpx

        hooks = {"request": [lambda request: address_check(str(request.url))]} if guard else {}
        headers = {"User-Agent": "CultureKAR-import/0.1"}
        with httpx.Client(follow_redirects=True, timeout=timeout_s, headers=headers, event_hooks=hooks) as client:
            with client.stream("GET", url) as resp:
                if resp.status_code != 200:
                    raise ImageRejected("http_error", f"HTTP {resp.status_code}")
                buf = bytearray()
                for chunk in resp.iter_bytes():
                    buf += chunk
                    if len(buf) > max_bytes:
                        raise ImageRejected("too_large", f"more than the limit of {max_bytes} bytes")
                return bytes(buf)

    return fetch


def address_check(url: str) -> None:
    """Refuse a URL whose host resolves to a loopback, private, link-local or otherwise non-public address
    (:func:`culturebase.addresses.address_refusal`, the rule the crawlers and the API apply)."""
    import ipaddress
    import socket
    from urllib.parse import urlsplit

    from culturebase.addresses import address_refusal

    host = urlsplit(url).hostname or ""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ImageRejected("unreachable", f"cannot resolve {host!r}: {exc}") from None
    for info in infos:
        why = address_refusal(ipaddress.ip_address(info[4][0].split("%", 1)[0]))
        if why:
            raise ImageRejected("forbidden_address", f"{host} resolves to a {why} address")


def guarded_fetcher(max_bytes: int, timeout_s: float = 20.0) -> Fetcher:
    """:func:`http_fetcher` for URLs a third-party dump names (``kar kb import --fetch-images``): every request
    and redirect hop must resolve to a public address; the bytes then go through the image store's checks
    (content sniffed, pixel and size limits)."""
    return http_fetcher(max_bytes, timeout_s, guard=True)


def _entries(rec: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    single = rec.pop("image", None)
    if single not in (None, ""):
        out.append(single)
    many = rec.pop("images", None)
    if many is not None:
        if not isinstance(many, list):
            raise ValueError("field 'images': must be a list of URLs, paths or image objects")
        out.extend(many)
    return out


def resolve_images(
    rec: dict[str, Any], line: int, base_dir: Path, store: ImageStore, fetch: Fetcher | None
) -> tuple[dict[str, Any], list[ImageProblem]]:
    """The record with ``images`` as stored-image objects; problems for the entries left out."""
    entries = _entries(rec)
    if not entries:
        return rec, []
    images: list[dict[str, Any]] = []
    problems: list[ImageProblem] = []
    for n, entry in enumerate(entries):
        kind = "template"
        url = path = None
        if isinstance(entry, str):
            if entry.startswith(("http://", "https://")):
                url = entry
            else:
                path = entry
        elif isinstance(entry, dict):
            kind = entry.get("kind") or "template"
            url, path = entry.get("url"), entry.get("path")
            if entry.get("sha256") and path:
                try:
                    stored = EntityImage.model_validate({**entry, "kind": kind})
                except Exception:
                    stored = None
                if stored is not None and store.exists(stored):
                    images.append(stored.model_dump())
                    continue
        else:
            problems.append(ImageProblem(line, f"images[{n}]", f"expected a URL, a path or an object, got {type(entry).__name__}"))
            continue
        label = url or path or f"images[{n}]"
        if kind not in ("template", "example"):
            problems.append(ImageProblem(line, label, f"kind {kind!r} is not 'template' or 'example'"))
            continue
        try:
            if path and not (url and not (base_dir / path).is_file()):
                file = (base_dir / path).resolve()
                try:
                    data = file.read_bytes()
                except FileNotFoundError:
                    raise ImageRejected("missing_file", f"no file {file}") from None
                except IsADirectoryError:
                    raise ImageRejected("missing_file", f"{file} is a directory") from None
            elif url:
                if fetch is None:
                    raise ImageRejected("not_fetched", "image URLs are not downloaded in this import (use `kar kb import`)")
                data = fetch(url)
            else:
                raise ImageRejected("no_source", "the image object has neither url nor path")
            images.append(store.put(data, url=url, kind=kind).model_dump())
        except ImageRejected as exc:
            problems.append(ImageProblem(line, label, f"{exc.reason}: {exc}"))
        except Exception as exc:  # network errors and the like: the record is kept without this image
            problems.append(ImageProblem(line, label, f"unreachable: {type(exc).__name__}: {exc}"))
    rec["images"] = images
    return rec, problems
